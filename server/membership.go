package server

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/membership"
	"github.com/strata-db/strata/raft/transport"
)

// Membership changes go through raft as conf changes whose context is the
// member (JSON), as in etcd. Apply updates the member list and persists it
// in the page store (package membership), in the same commit as the
// entry's index.
//
// The raft side of a change (RawNode.ApplyConfChange) is done by the raft
// goroutine; the transport's peers follow the member list (peer.go,
// syncMembers). The checks before a change are etcd's (mayAddMember,
// mayRemoveMember, promoteOnLeader), with its errors; the apply is
// idempotent (membership.Set.ApplyConfChange).

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

// errNotEnoughStarted is etcd's refusal, which etcd sends as a plain
// error (gRPC code Unknown), not as a status with a code.
var errNotEnoughStarted = rpctypes.ErrMemberNotEnoughStarted

// defaultHealthInterval is how long a peer link must have been up for the
// peer to count as connected in the strict reconfiguration checks (etcd's
// HealthInterval).
const defaultHealthInterval = 5 * time.Second

// learnerReadyPercent is how close a learner's log must be to the
// leader's for it to be promoted (etcd's readyPercentThreshold).
const learnerReadyPercent = 0.9

func (c *clusterServer) MemberAdd(ctx context.Context, r *pb.MemberAddRequest) (*pb.MemberAddResponse, error) {
	s := c.s
	if err := s.checkAdmin(ctx); err != nil {
		return nil, err
	}
	urls, err := validPeerURLs(r.PeerURLs)
	if err != nil {
		return nil, err
	}
	// etcd's order: the strict check first; a taken peer URL and the
	// learner limit are found when the change applies, which Strata
	// checks here (the apply is idempotent, see the package comment).
	if err := s.mayAddMember(r.IsLearner); err != nil {
		return nil, err
	}
	if s.members.PeerURLTaken(urls, 0) {
		return nil, rpctypes.ErrGRPCPeerURLExist
	}
	if r.IsLearner && s.members.Learners() >= s.cfg.MaxLearners {
		return nil, rpctypes.ErrGRPCTooManyLearners
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

// mayAddMember is etcd's strict reconfiguration check for an add: a new
// voter must not leave fewer started voters than a quorum, and this
// member must have been connected to a quorum (the new member counted as
// down) for s.healthInterval.
func (s *Server) mayAddMember(learner bool) error {
	if !s.cfg.StrictReconfigCheck {
		return nil
	}
	started, voters := s.members.StartedVoters()
	if !learner && !(started == 1 && voters == 1) && started < (voters+1)/2+1 {
		s.lg.Warn("rejecting member add request; not enough healthy members",
			"local-member-id", transport.FormatID(s.id), "number-of-started-member", started, "quorum", (voters+1)/2+1)
		return errNotEnoughStarted
	}
	if voters > 1 && s.connectedVoters() < (voters+1)/2+1 {
		s.lg.Warn("rejecting member add request; local member has not been connected to majority peers, reconfigure breaks active quorum",
			"local-member-id", transport.FormatID(s.id))
		return rpctypes.ErrGRPCUnhealthy
	}
	return nil
}

// connectedVoters counts the voters this member has been connected to
// for s.healthInterval, itself included.
func (s *Server) connectedVoters() int {
	since := time.Now().Add(-s.healthInterval)
	n := 0
	for _, m := range s.members.List() {
		if m.IsLearner {
			continue
		}
		if m.ID == s.id {
			n++
			continue
		}
		if t := s.peers.tr.ActiveSince(m.ID); !t.IsZero() && t.Before(since) {
			n++
		}
	}
	return n
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
	if err := s.mayRemoveMember(m); err != nil {
		return nil, err
	}
	if _, err := s.proposeMemberChange(ctx, &raftpb.ConfChange{Type: raftpb.ConfChangeRemoveNode.Enum(), NodeId: proto.Uint64(r.ID)}); err != nil {
		return nil, toGRPCError(err)
	}
	return &pb.MemberRemoveResponse{Header: c.header(), Members: c.memberList()}, nil
}

// mayRemoveMember is etcd's strict reconfiguration check for a removal:
// a learner can always go; a voter only if the started voters left are a
// quorum of the voters left, and, unless it is down already, if the
// members this one is connected to stay a quorum without it. The last
// voter can never go (raft cannot run without one).
func (s *Server) mayRemoveMember(m *Member) error {
	if m.IsLearner {
		return nil
	}
	started, voters := s.members.StartedVoters()
	if voters <= 1 {
		return errNotEnoughStarted
	}
	if !s.cfg.StrictReconfigCheck {
		return nil
	}
	if m.Name != "" {
		started--
	}
	if started < (voters-1)/2+1 {
		s.lg.Warn("rejecting member remove request; not enough healthy members",
			"local-member-id", transport.FormatID(s.id), "requested-member-remove-id", transport.FormatID(m.ID))
		return errNotEnoughStarted
	}
	if m.ID != s.id && s.peers.tr.ActiveSince(m.ID).IsZero() {
		return nil // a member that is down is no part of the active quorum
	}
	if s.connectedVoters()-1 < 1+(voters-1)/2 {
		s.lg.Warn("rejecting member remove request; local member has not been connected to all peers, reconfigure breaks active quorum",
			"local-member-id", transport.FormatID(s.id), "requested-member-remove", transport.FormatID(m.ID))
		return rpctypes.ErrGRPCUnhealthy
	}
	return nil
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
	if err := c.s.checkAdmin(ctx); err != nil {
		return nil, err
	}
	ms, err := c.s.promoteMember(ctx, r.ID)
	if err != nil {
		c.s.metrics.promoteFailed.WithLabelValues(promoteReason(err)).Inc()
		return nil, toGRPCError(err)
	}
	c.s.metrics.promoteSucceeded.Inc()
	out := make([]*pb.Member, 0, len(ms))
	for _, m := range ms {
		out = append(out, memberPB(m))
	}
	return &pb.MemberPromoteResponse{Header: c.header(), Members: out}, nil
}

// promoteReason is the reason label of a failed promotion: etcd's
// internal error's text.
func promoteReason(err error) string {
	switch {
	case errors.Is(err, errPromoteNotFound):
		return transport.ErrIDNotFound.Error()
	case errors.Is(err, errPromoteNotLearner):
		return transport.ErrMemberNotLearner.Error()
	case errors.Is(err, errPromoteNotReady):
		return transport.ErrLearnerNotReady.Error()
	}
	return err.Error()
}

var (
	errPromoteNotFound   = rpctypes.ErrGRPCMemberNotFound
	errPromoteNotLearner = rpctypes.ErrGRPCMemberNotLearner
	errPromoteNotReady   = rpctypes.ErrGRPCLearnerNotReady
	errPromoteNotLeader  = errors.New("server: promote on a member that is not the leader")
)

// promoteMember promotes learner id, as etcd does: only the leader knows
// whether the learner's log has caught up, so a follower forwards the
// request to the leader's peer port (POST /members/promote/<id>, with the
// caller's token), which answers with the members or the reason.
func (s *Server) promoteMember(ctx context.Context, id uint64) ([]*Member, error) {
	ms, err := s.promoteOnLeader(ctx, id)
	if !errors.Is(err, errPromoteNotLeader) {
		return ms, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.requestTimeout())
	defer cancel()
	token := ""
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get(rpctypes.TokenFieldNameGRPC); len(v) > 0 {
			token = v[0]
		}
	}
	for ctx.Err() == nil {
		lead := s.members.Get(s.node.Status().Leader)
		if lead == nil || lead.ID == s.id {
			select {
			case <-s.node.LeaderChanged():
			case <-time.After(s.cfg.HeartbeatInterval()):
			case <-ctx.Done():
			}
			continue
		}
		for _, u := range lead.PeerURLs {
			ms, err := s.peers.forwardPromote(ctx, u, id, token)
			if err == nil || errors.Is(err, errPromoteNotFound) || errors.Is(err, errPromoteNotLearner) || errors.Is(err, errPromoteNotReady) {
				return ms, err
			}
			s.lg.Warn("failed to forward a member promotion to the leader", "leader-peer-url", u, "error", err)
		}
		select {
		case <-time.After(s.cfg.HeartbeatInterval()):
		case <-ctx.Done():
		}
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return nil, errTimeout
	}
	return nil, ctx.Err()
}

// promoteOnLeader is the leader's part of promoteMember; errPromoteNotLeader
// on a follower.
func (s *Server) promoteOnLeader(ctx context.Context, id uint64) ([]*Member, error) {
	m := s.members.Get(id)
	if m == nil {
		return nil, errPromoteNotFound
	}
	if !m.IsLearner {
		return nil, errPromoteNotLearner
	}
	// Apply what is committed first, so the leader's own match is current.
	progress, err := s.node.Progress(ctx)
	if err != nil {
		return nil, err
	}
	if progress == nil {
		return nil, errPromoteNotLeader
	}
	learnerMatch, ok := progress[id]
	if !ok {
		return nil, errPromoteNotFound
	}
	if leaderMatch := progress[s.id]; float64(learnerMatch) < float64(leaderMatch)*learnerReadyPercent {
		s.lg.Error("rejected promote learner request; learner is not ready",
			"learner-ready-percent", float64(learnerMatch)/float64(max(leaderMatch, 1)), "ready-percent-threshold", learnerReadyPercent)
		return nil, errPromoteNotReady
	}
	if s.cfg.StrictReconfigCheck {
		started, voters := s.members.StartedVoters()
		if started+1 < (voters+1)/2+1 {
			s.lg.Warn("rejecting member promote request; not enough healthy members",
				"local-member-id", transport.FormatID(s.id), "requested-member-remove-id", transport.FormatID(id))
			return nil, errNotEnoughStarted
		}
	}
	cc := &raftpb.ConfChange{Type: raftpb.ConfChangeAddNode.Enum(), NodeId: proto.Uint64(id), Context: membership.PromoteContext(id)}
	if _, err := s.proposeMemberChange(ctx, cc); err != nil {
		// (A refusal at apply maps to errPromoteNotFound and
		// errPromoteNotLearner.)
		return nil, toGRPCError(err)
	}
	return s.members.List(), nil
}

// promoteFromPeer serves a follower's forwarded promotion (the peer
// port's /members/promote/<id>), with the caller's token.
func (s *Server) promoteFromPeer(ctx context.Context, id uint64, token string) ([]*Member, error) {
	if token != "" {
		ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(rpctypes.TokenFieldNameGRPC, token))
	}
	if err := s.checkAdmin(ctx); err != nil {
		return nil, err
	}
	ms, err := s.promoteOnLeader(ctx, id)
	switch {
	case errors.Is(err, errPromoteNotFound):
		return nil, transport.ErrIDNotFound
	case errors.Is(err, errPromoteNotLearner):
		return nil, transport.ErrMemberNotLearner
	case errors.Is(err, errPromoteNotReady):
		return nil, transport.ErrLearnerNotReady
	}
	return ms, err
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
	// The raft goroutine refused the same changes (confcheck.go).
	refused := a.view.Apply(idx, &cc, s.cfg.MaxLearners)
	a.view.Persist(w)
	if refused != nil {
		s.lg.Warn("refused a committed conf change", "index", idx, "type", cc.GetType().String(),
			"member-id", transport.FormatID(cc.GetNodeId()), "reason", refused)
	} else {
		s.members.ApplyConfChange(&cc, w)
		if s.peers != nil {
			s.peers.syncMembers()
		}
	}
	if cc.GetId() != 0 {
		s.wait.trigger(cc.GetId(), applyResult{err: refused})
	}
	if refused == nil && cc.GetType() == raftpb.ConfChangeRemoveNode && cc.GetNodeId() == s.id {
		// As etcd: stop a little later, so the leader's next messages
		// tell the other members the entry is committed before this one
		// goes (the leader's own removal included).
		go func() {
			select {
			case <-time.After(removedStopDelay):
			case <-s.stopping:
			}
			s.removedFromCluster()
		}()
	}
}

// removedStopDelay is how long a member that applied its own removal
// keeps running (etcd's 10 heartbeats of 100 ms).
const removedStopDelay = time.Second

// removedFromCluster stops a member that was removed from the cluster,
// with etcd's log lines. The process exits 0, as etcd's does: restarting
// it cannot help.
func (s *Server) removedFromCluster() {
	s.removedOnce.Do(func() {
		s.lg.Warn("server error", "error", "the member has been permanently removed from the cluster")
		s.lg.Warn("data-dir used by this member must be removed", "data-dir", s.cfg.DataDir)
		s.fatal(errRemoved)
	})
}

// IsRemoved reports whether err, from Err, says the member stopped
// because it was removed from the cluster.
func IsRemoved(err error) bool { return errors.Is(err, errRemoved) }

// A learner serves only what cannot need a vote: Status, serializable
// ranges and the Snapshot stream; everything else gets etcd's "rpc not
// supported for learner" (etcd's interceptors).

// isLearner reports whether this member is a learner now.
func (s *Server) isLearner() bool {
	m := s.members.Get(s.id)
	return m != nil && m.IsLearner
}

// learnerRefuses is what a learner answers a unary request it does not
// serve (nil when it serves it, or when this member is no learner).
func (s *Server) learnerRefuses(req any) error {
	if s.isLearner() {
		switch r := req.(type) {
		case *pb.StatusRequest:
		case *pb.RangeRequest:
			if !r.Serializable {
				return rpctypes.ErrGRPCNotSupportedForLearner
			}
		default:
			return rpctypes.ErrGRPCNotSupportedForLearner
		}
	}
	return nil
}

func (s *Server) learnerStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if s.isLearner() && info.FullMethod != "/etcdserverpb.Maintenance/Snapshot" {
		return rpctypes.ErrGRPCNotSupportedForLearner
	}
	return h(srv, ss)
}
