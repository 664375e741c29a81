package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/mvcc"
	"github.com/strata-db/strata/pagestore"
)

// Membership changes go through raft as conf changes whose context is the
// member (JSON), as in etcd. Apply updates the member list and persists it
// in the page store, in the same commit as the entry's index:
//
//	bucket "members":         member id (16 hex digits) -> member JSON
//	bucket "members_removed": member id (16 hex digits) -> "removed"
//
// The raft side of a change (RawNode.ApplyConfChange) is done by the raft
// goroutine. Promoting a learner needs it to be in sync with the leader;
// until the peer transport exists no learner ever is, so promotion is
// refused with etcd's error.

var (
	membersBucket        = []byte("members")
	membersRemovedBucket = []byte("members_removed")
)

type memberJSON struct {
	ID         uint64   `json:"id"`
	Name       string   `json:"name,omitempty"`
	PeerURLs   []string `json:"peerURLs"`
	ClientURLs []string `json:"clientURLs,omitempty"`
	IsLearner  bool     `json:"isLearner,omitempty"`
}

func (m *Member) json() []byte {
	b, _ := json.Marshal(memberJSON{ID: m.ID, Name: m.Name, PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs, IsLearner: m.IsLearner})
	return b
}

func memberKey(id uint64) []byte { return []byte(fmt.Sprintf("%016x", id)) }

// load reads the persisted membership; ok is false for a new member with
// nothing persisted yet.
func (ms *members) load(db *pagestore.DB) (ok bool, err error) {
	err = db.View(func(tx *pagestore.Tx) error {
		list, removed, err := ReadMembership(tx)
		if err != nil {
			return err
		}
		for _, m := range list {
			ms.m[m.ID] = m
		}
		for _, id := range removed {
			ms.removed[id] = true
		}
		ok = len(list) > 0
		return nil
	})
	return ok, err
}

// persist writes every member (bootstrap) through w.
func (ms *members) persist(w *mvcc.WriteTx) {
	for _, m := range ms.list() {
		w.Put(membersBucket, memberKey(m.ID), m.json())
	}
}

func (ms *members) peerURLTaken(urls []string, except uint64) bool {
	ms.mu.RLock()
	defer ms.mu.RUnlock()
	for id, m := range ms.m {
		if id == except {
			continue
		}
		for _, a := range m.PeerURLs {
			for _, b := range urls {
				if a == b {
					return true
				}
			}
		}
	}
	return false
}

func (ms *members) learners() int {
	ms.mu.RLock()
	defer ms.mu.RUnlock()
	n := 0
	for _, m := range ms.m {
		if m.IsLearner {
			n++
		}
	}
	return n
}

func (ms *members) isRemoved(id uint64) bool {
	ms.mu.RLock()
	defer ms.mu.RUnlock()
	return ms.removed[id]
}

// startedVoters counts voters that have published a name (started), and
// all voters.
func (ms *members) startedVoters() (started, voters int) {
	ms.mu.RLock()
	defer ms.mu.RUnlock()
	for _, m := range ms.m {
		if m.IsLearner {
			continue
		}
		voters++
		if m.Name != "" {
			started++
		}
	}
	return started, voters
}

func validPeerURLs(us []string) ([]string, error) {
	if len(us) == 0 {
		return nil, rpctypes.ErrGRPCMemberBadURLs
	}
	out := make([]string, 0, len(us))
	for _, s := range us {
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" {
			return nil, rpctypes.ErrGRPCMemberBadURLs
		}
		out = append(out, u.String())
	}
	sort.Strings(out)
	return out, nil
}

// proposeMemberChange proposes a conf change and waits for its apply.
func (s *Server) proposeMemberChange(ctx context.Context, cc *raftpb.ConfChange) (applyResult, error) {
	id := s.reqIDs.next()
	cc.Id = proto.Uint64(id)
	ch := s.wait.register(id)
	ctx, cancel := context.WithTimeout(ctx, s.requestTimeout())
	defer cancel()
	if err := s.node.ProposeConfChange(ctx, cc); err != nil {
		s.wait.cancel(id)
		return applyResult{}, readErr(ctx, err)
	}
	select {
	case r := <-ch:
		return r, r.err
	case <-ctx.Done():
		s.wait.cancel(id)
		return applyResult{}, errTimeout
	case <-s.stopping:
		return applyResult{}, errStopped
	}
}

func (c *clusterServer) memberList() []*pb.Member {
	var out []*pb.Member
	for _, m := range c.s.members.list() {
		out = append(out, m.pb())
	}
	return out
}

func (c *clusterServer) MemberAdd(ctx context.Context, r *pb.MemberAddRequest) (*pb.MemberAddResponse, error) {
	s := c.s
	if err := s.checkAdmin(ctx); err != nil {
		return nil, err
	}
	urls, err := validPeerURLs(r.PeerURLs)
	if err != nil {
		return nil, err
	}
	if s.members.peerURLTaken(urls, 0) {
		return nil, rpctypes.ErrGRPCPeerURLExist
	}
	if r.IsLearner && s.members.learners() >= max(s.cfg.MaxLearners, 1) {
		return nil, rpctypes.ErrGRPCTooManyLearners
	}
	if !r.IsLearner {
		// etcd's strict reconfiguration check: the new voter must not
		// leave the cluster without a quorum of started members.
		started, voters := s.members.startedVoters()
		if started < (voters+1)/2+1 {
			return nil, rpctypes.ErrGRPCMemberNotEnoughStarted
		}
	}
	now := time.Now()
	id := memberID(urlsFromStrings(urls), s.cfg.InitialClusterToken+fmt.Sprint(now.Unix()))
	m := &Member{ID: id, PeerURLs: urls, IsLearner: r.IsLearner}
	typ := raftpb.ConfChangeAddNode
	if r.IsLearner {
		typ = raftpb.ConfChangeAddLearnerNode
	}
	if _, err := s.proposeMemberChange(ctx, &raftpb.ConfChange{Type: typ.Enum(), NodeId: proto.Uint64(id), Context: m.json()}); err != nil {
		return nil, toGRPCError(err)
	}
	return &pb.MemberAddResponse{Header: c.header(), Member: m.pb(), Members: c.memberList()}, nil
}

// existingMember checks the caller is root and returns member id.
func (c *clusterServer) existingMember(ctx context.Context, id uint64) (*Member, error) {
	if err := c.s.checkAdmin(ctx); err != nil {
		return nil, err
	}
	m := c.s.members.get(id)
	if m == nil || c.s.members.isRemoved(id) {
		return nil, rpctypes.ErrGRPCMemberNotFound
	}
	return m, nil
}

func (c *clusterServer) MemberRemove(ctx context.Context, r *pb.MemberRemoveRequest) (*pb.MemberRemoveResponse, error) {
	s := c.s
	m, err := c.existingMember(ctx, r.ID)
	if err != nil {
		return nil, err
	}
	if !m.IsLearner {
		started, voters := s.members.startedVoters()
		if voters-1 < 1 || started-1 < (voters-1)/2+1 {
			return nil, rpctypes.ErrGRPCMemberNotEnoughStarted
		}
	}
	if _, err := s.proposeMemberChange(ctx, &raftpb.ConfChange{Type: raftpb.ConfChangeRemoveNode.Enum(), NodeId: proto.Uint64(r.ID)}); err != nil {
		return nil, toGRPCError(err)
	}
	return &pb.MemberRemoveResponse{Header: c.header(), Members: c.memberList()}, nil
}

func (c *clusterServer) MemberUpdate(ctx context.Context, r *pb.MemberUpdateRequest) (*pb.MemberUpdateResponse, error) {
	s := c.s
	m, err := c.existingMember(ctx, r.ID)
	if err != nil {
		return nil, err
	}
	urls, err := validPeerURLs(r.PeerURLs)
	if err != nil {
		return nil, err
	}
	if s.members.peerURLTaken(urls, r.ID) {
		return nil, rpctypes.ErrGRPCPeerURLExist
	}
	nm := *m
	nm.PeerURLs = urls
	if _, err := s.proposeMemberChange(ctx, &raftpb.ConfChange{Type: raftpb.ConfChangeUpdateNode.Enum(), NodeId: proto.Uint64(r.ID), Context: nm.json()}); err != nil {
		return nil, toGRPCError(err)
	}
	return &pb.MemberUpdateResponse{Header: c.header(), Members: c.memberList()}, nil
}

func (c *clusterServer) MemberPromote(ctx context.Context, r *pb.MemberPromoteRequest) (*pb.MemberPromoteResponse, error) {
	m, err := c.existingMember(ctx, r.ID)
	if err != nil {
		return nil, err
	}
	if !m.IsLearner {
		return nil, rpctypes.ErrGRPCMemberNotLearner
	}
	// A learner is ready once it has caught up with the leader's log;
	// without a peer transport none can be.
	return nil, rpctypes.ErrGRPCLearnerNotReady
}

func (c *clusterServer) header() *pb.ResponseHeader {
	h := c.s.header(0)
	h.Revision = 0
	return h
}

func urlsFromStrings(ss []string) []url.URL {
	out := make([]url.URL, 0, len(ss))
	for _, s := range ss {
		if u, err := url.Parse(s); err == nil {
			out = append(out, *u)
		}
	}
	return out
}

// applyConfChange applies a committed membership change to the member
// list and the page store, and answers its proposer.
func (a *applier) applyConfChange(idx, term uint64, e *raftpb.Entry) {
	s := a.s
	w := s.be.BeginWrite()
	defer w.End(idx, term)
	if e.GetType() != raftpb.EntryConfChange {
		return
	}
	var cc raftpb.ConfChange
	if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
		s.lg.Error("cannot decode a committed conf change", "index", idx, "error", err)
		return
	}
	id := cc.GetNodeId()
	var mj memberJSON
	if len(cc.GetContext()) > 0 {
		_ = json.Unmarshal(cc.GetContext(), &mj)
	}
	ms := s.members
	ms.mu.Lock()
	switch cc.GetType() {
	case raftpb.ConfChangeAddNode, raftpb.ConfChangeAddLearnerNode:
		if _, ok := ms.m[id]; !ok && len(cc.GetContext()) > 0 {
			ms.m[id] = &Member{ID: id, PeerURLs: mj.PeerURLs, IsLearner: cc.GetType() == raftpb.ConfChangeAddLearnerNode}
			w.Put(membersBucket, memberKey(id), ms.m[id].json())
		}
	case raftpb.ConfChangeRemoveNode:
		if _, ok := ms.m[id]; ok {
			delete(ms.m, id)
			ms.removed[id] = true
			w.Delete(membersBucket, memberKey(id))
			w.Put(membersRemovedBucket, memberKey(id), []byte("removed"))
		}
	case raftpb.ConfChangeUpdateNode:
		if m, ok := ms.m[id]; ok && len(mj.PeerURLs) > 0 {
			m.PeerURLs = mj.PeerURLs
			w.Put(membersBucket, memberKey(id), m.json())
		}
	}
	ms.mu.Unlock()
	if cc.GetId() != 0 {
		s.wait.trigger(cc.GetId(), applyResult{})
	}
}
