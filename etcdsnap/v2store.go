package etcdsnap

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/strata-db/strata/membership"
)

// V2Store is the Data of a raft snapshot an etcd leader sends: the
// membership as etcd's retired v2 store, serialized as that store
// serializes itself (JSON). etcd 3.7 ignores it, but etcd 3.6 restores
// its v2 store from it when it installs a snapshot, and stops ("failed to
// restore v2 store") on anything that is not such a store, an empty Data
// included. So a Strata leader sends one to etcd followers, built as
// etcd's leader builds it (its RaftCluster.Store into an empty store):
//
//	/0/members/<id hex>/raftAttributes  {"peerURLs":[...]} (+"isLearner":true)
//	/0/members/<id hex>/attributes      {"name":...,"clientURLs":[...]}, once published
//	/0/removed_members/<id hex>         ""
//	/0/version                          the cluster version ("3.6.0"), once decided
//	/1                                  the (empty) keys directory
//
// with etcd's node indexes (one per write, in that order, members in id
// order), its watcher history of those writes in a queue of etcd's
// capacity, and its operation counters.
func V2Store(members []*membership.Member, removed []uint64, clusterVersion string) ([]byte, error) {
	st := newV2Store()
	ms := append([]*membership.Member(nil), members...)
	sort.Slice(ms, func(i, j int) bool { return ms[i].ID < ms[j].ID })
	st.gets.Fail++ // etcd first checks that the store holds no members
	for _, m := range ms {
		raft, err := json.Marshal(struct {
			PeerURLs  []string `json:"peerURLs"`
			IsLearner bool     `json:"isLearner,omitempty"`
		}{m.PeerURLs, m.IsLearner})
		if err != nil {
			return nil, err
		}
		dir := fmt.Sprintf("/0/members/%x", m.ID)
		st.write("create", dir+"/raftAttributes", string(raft))
		if m.ClientURLs != nil {
			attrs, err := json.Marshal(struct {
				Name       string   `json:"name,omitempty"`
				ClientURLs []string `json:"clientURLs,omitempty"`
			}{m.Name, m.ClientURLs})
			if err != nil {
				return nil, err
			}
			st.write("set", dir+"/attributes", string(attrs))
		}
	}
	for _, id := range removed {
		st.write("create", fmt.Sprintf("/0/removed_members/%x", id), "")
	}
	if clusterVersion != "" {
		st.write("set", "/0/version", clusterVersion)
	}
	return json.Marshal(st)
}

// v2Capacity is the capacity of etcd's v2 watcher history, which its
// store serializes as a slice of exactly that length (a ring buffer).
const v2Capacity = 1000

// v2ZeroTime is Go's zero time as JSON: a node that never expires.
const v2ZeroTime = "0001-01-01T00:00:00Z"

// The v2 store's JSON, field for field (the names are its Go field names
// and JSON tags; wire format of etcd's snapshots, never change).
type (
	v2Store struct {
		Root           *v2Node      `json:"Root"`
		WatcherHub     v2WatcherHub `json:"WatcherHub"`
		CurrentIndex   uint64       `json:"CurrentIndex"`
		Stats          *v2Stats     `json:"Stats"`
		CurrentVersion int          `json:"CurrentVersion"`
		gets           *v2Count
	}
	v2Node struct {
		Path          string             `json:"Path"`
		CreatedIndex  uint64             `json:"CreatedIndex"`
		ModifiedIndex uint64             `json:"ModifiedIndex"`
		ExpireTime    string             `json:"ExpireTime"`
		Value         string             `json:"Value"`
		Children      map[string]*v2Node `json:"Children"`
	}
	v2WatcherHub struct {
		EventHistory v2History `json:"EventHistory"`
	}
	v2History struct {
		Queue      v2Queue `json:"Queue"`
		StartIndex uint64  `json:"StartIndex"`
		LastIndex  uint64  `json:"LastIndex"`
	}
	v2Queue struct {
		Events   []*v2Event `json:"Events"`
		Size     int        `json:"Size"`
		Front    int        `json:"Front"`
		Back     int        `json:"Back"`
		Capacity int        `json:"Capacity"`
	}
	v2Event struct {
		Action string      `json:"action"`
		Node   v2EventNode `json:"node"`
	}
	v2EventNode struct {
		Key           string `json:"key"`
		Value         string `json:"value"`
		ModifiedIndex uint64 `json:"modifiedIndex"`
		CreatedIndex  uint64 `json:"createdIndex"`
	}
	v2Stats struct {
		GetSuccess            uint64 `json:"getsSuccess"`
		GetFail               uint64 `json:"getsFail"`
		SetSuccess            uint64 `json:"setsSuccess"`
		SetFail               uint64 `json:"setsFail"`
		DeleteSuccess         uint64 `json:"deleteSuccess"`
		DeleteFail            uint64 `json:"deleteFail"`
		UpdateSuccess         uint64 `json:"updateSuccess"`
		UpdateFail            uint64 `json:"updateFail"`
		CreateSuccess         uint64 `json:"createSuccess"`
		CreateFail            uint64 `json:"createFail"`
		CompareAndSwapSuccess uint64 `json:"compareAndSwapSuccess"`
		CompareAndSwapFail    uint64 `json:"compareAndSwapFail"`
		CompareAndDeleteSucc  uint64 `json:"compareAndDeleteSuccess"`
		CompareAndDeleteFail  uint64 `json:"compareAndDeleteFail"`
		ExpireCount           uint64 `json:"expireCount"`
		Watchers              uint64 `json:"watchers"`
	}
	v2Count struct{ Fail uint64 }
)

// newV2Store is an empty store as etcd makes one for a snapshot: the
// root with its two directories, /0 (cluster) and /1 (keys).
func newV2Store() *v2Store {
	dir := func(path string) *v2Node {
		return &v2Node{Path: path, ExpireTime: v2ZeroTime, Children: map[string]*v2Node{}}
	}
	root := dir("/")
	root.Children["0"], root.Children["1"] = dir("/0"), dir("/1")
	return &v2Store{Root: root, Stats: &v2Stats{}, CurrentVersion: 2, gets: &v2Count{},
		WatcherHub: v2WatcherHub{EventHistory: v2History{Queue: v2Queue{Events: make([]*v2Event, v2Capacity), Capacity: v2Capacity}}}}
}

// write is a create or set of a new leaf at path: the next index for the
// leaf and any directory it creates, an event in the history, a count.
func (s *v2Store) write(action, path, value string) {
	s.CurrentIndex++
	idx := s.CurrentIndex
	n := s.Root
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	for i, name := range parts {
		child := n.Children[name]
		if child == nil {
			child = &v2Node{Path: "/" + strings.Join(parts[:i+1], "/"), CreatedIndex: idx, ModifiedIndex: idx, ExpireTime: v2ZeroTime}
			if i < len(parts)-1 {
				child.Children = map[string]*v2Node{}
			} else {
				child.Value = value
			}
			n.Children[name] = child
		}
		n = child
	}
	q := &s.WatcherHub.EventHistory
	if q.StartIndex == 0 {
		q.StartIndex = idx
	}
	q.LastIndex = idx
	q.Queue.Events[q.Queue.Back] = &v2Event{Action: action, Node: v2EventNode{Key: path, Value: value, ModifiedIndex: idx, CreatedIndex: idx}}
	q.Queue.Back = (q.Queue.Back + 1) % v2Capacity
	if q.Queue.Size < v2Capacity {
		q.Queue.Size++
	} else {
		q.Queue.Front = (q.Queue.Front + 1) % v2Capacity
		q.StartIndex++
	}
	if action == "create" {
		s.Stats.CreateSuccess++
	} else {
		s.Stats.SetSuccess++
	}
	s.Stats.GetFail = s.gets.Fail
}
