package server

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/membership"
)

// Membership changes go through raft as conf changes whose context is the
// member (JSON), as in etcd. Apply updates the member list and persists it
// in the page store (package membership), in the same commit as the
// entry's index.
//
// The raft side of a change (RawNode.ApplyConfChange) is done by the raft
// goroutine; the transport's peers follow the member list (peer.go,
// syncMembers). Promoting a learner needs it to be in sync with the
// leader, which is not tracked yet (runtime reconfiguration), so
// promotion is refused with etcd's error.

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
	for _, m := range c.s.members.List() {
		out = append(out, memberPB(m))
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
	if s.members.PeerURLTaken(urls, 0) {
		return nil, rpctypes.ErrGRPCPeerURLExist
	}
	if r.IsLearner && s.members.Learners() >= max(s.cfg.MaxLearners, 1) {
		return nil, rpctypes.ErrGRPCTooManyLearners
	}
	if !r.IsLearner {
		// etcd's strict reconfiguration check: the new voter must not
		// leave the cluster without a quorum of started members.
		started, voters := s.members.StartedVoters()
		if started < (voters+1)/2+1 {
			return nil, rpctypes.ErrGRPCMemberNotEnoughStarted
		}
	}
	now := time.Now()
	id := membership.MemberID(urlsFromStrings(urls), s.cfg.InitialClusterToken+fmt.Sprint(now.Unix()))
	m := &Member{ID: id, PeerURLs: urls, IsLearner: r.IsLearner}
	typ := raftpb.ConfChangeAddNode
	if r.IsLearner {
		typ = raftpb.ConfChangeAddLearnerNode
	}
	if _, err := s.proposeMemberChange(ctx, &raftpb.ConfChange{Type: typ.Enum(), NodeId: proto.Uint64(id), Context: m.JSON()}); err != nil {
		return nil, toGRPCError(err)
	}
	return &pb.MemberAddResponse{Header: c.header(), Member: memberPB(m), Members: c.memberList()}, nil
}

// existingMember checks the caller is root and returns member id.
func (c *clusterServer) existingMember(ctx context.Context, id uint64) (*Member, error) {
	if err := c.s.checkAdmin(ctx); err != nil {
		return nil, err
	}
	m := c.s.members.Get(id)
	if m == nil || c.s.members.IsRemoved(id) {
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
		started, voters := s.members.StartedVoters()
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
	if s.members.PeerURLTaken(urls, r.ID) {
		return nil, rpctypes.ErrGRPCPeerURLExist
	}
	nm := *m
	nm.PeerURLs = urls
	if _, err := s.proposeMemberChange(ctx, &raftpb.ConfChange{Type: raftpb.ConfChangeUpdateNode.Enum(), NodeId: proto.Uint64(r.ID), Context: nm.JSON()}); err != nil {
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
		// etcd's reason label is its internal error's text.
		c.s.metrics.promoteFailed.WithLabelValues("membership: can only promote a learner member").Inc()
		return nil, rpctypes.ErrGRPCMemberNotLearner
	}
	// A learner is ready once it has caught up with the leader's log;
	// that is not tracked yet.
	c.s.metrics.promoteFailed.WithLabelValues("etcdserver: can only promote a learner member which is in sync with leader").Inc()
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
	s.members.ApplyConfChange(&cc, w)
	if s.peers != nil {
		s.peers.syncMembers()
	}
	if cc.GetId() != 0 {
		s.wait.trigger(cc.GetId(), applyResult{})
	}
}
