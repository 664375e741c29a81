package server

import (
	"context"
	"net/url"
	"sort"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// Member is one member of the cluster.
type Member struct {
	ID         uint64
	Name       string
	PeerURLs   []string
	ClientURLs []string
	IsLearner  bool
}

// members is the membership, guarded by its own lock: the apply goroutine
// writes it, RPCs read it.
type members struct {
	mu sync.RWMutex
	m  map[uint64]*Member
}

func newMembers() *members { return &members{m: map[uint64]*Member{}} }

func (ms *members) add(m *Member) {
	ms.mu.Lock()
	ms.m[m.ID] = m
	ms.mu.Unlock()
}

func (ms *members) get(id uint64) *Member {
	ms.mu.RLock()
	defer ms.mu.RUnlock()
	return ms.m[id]
}

// list returns the members sorted by id.
func (ms *members) list() []*Member {
	ms.mu.RLock()
	defer ms.mu.RUnlock()
	out := make([]*Member, 0, len(ms.m))
	for _, m := range ms.m {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func urlStrings(us []url.URL) []string {
	out := make([]string, len(us))
	for i, u := range us {
		out[i] = u.String()
	}
	return out
}

func (m *Member) pb() *pb.Member {
	return &pb.Member{ID: m.ID, Name: m.Name, PeerURLs: append([]string(nil), m.PeerURLs...),
		ClientURLs: append([]string(nil), m.ClientURLs...), IsLearner: m.IsLearner}
}

// clusterServer serves the Cluster service.
type clusterServer struct {
	pb.UnimplementedClusterServer
	s *Server
}

func (c *clusterServer) MemberList(ctx context.Context, r *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	if r.Linearizable {
		if err := c.s.linearizableRead(ctx); err != nil {
			return nil, toGRPCError(err)
		}
	}
	// etcd's cluster responses carry no revision.
	h := c.s.header(0)
	h.Revision = 0
	resp := &pb.MemberListResponse{Header: h}
	for _, m := range c.s.members.list() {
		resp.Members = append(resp.Members, m.pb())
	}
	return resp, nil
}
