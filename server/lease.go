package server

import (
	"context"
	"errors"
	"fmt"
	"github.com/strata-db/strata/server/config"
	"io"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/strata-db/strata/auth"
	"github.com/strata-db/strata/lease"
)

// leaseServer serves the Lease service. Grants, revokes and checkpoints
// go through raft; keep-alives and TTL queries are answered by the
// leader's lessor, whose clocks are not replicated.
type leaseServer struct {
	pb.UnimplementedLeaseServer
	s *Server
}

func (l *leaseServer) LeaseGrant(ctx context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	s := l.s
	if r.TTL > lease.MaxLeaseTTL {
		return nil, rpctypes.ErrGRPCLeaseTTLTooLarge
	}
	req := &pb.LeaseGrantRequest{ID: r.ID, TTL: r.TTL}
	if req.ID == 0 {
		// etcd derives server-chosen lease ids from its request ids.
		for req.ID == 0 {
			req.ID = int64(s.reqIDs.next() & (1<<63 - 1))
		}
	}
	res, err := s.propose(ctx, &pb.InternalRaftRequest{LeaseGrant: req})
	if err == nil {
		err = res.err
	}
	if err != nil {
		return nil, toGRPCError(err)
	}
	resp := res.resp.(*pb.LeaseGrantResponse)
	resp.Header = s.header(0)
	return resp, nil
}

func (l *leaseServer) LeaseRevoke(ctx context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	s := l.s
	ai, err := s.authInfo(ctx)
	if err != nil {
		return nil, err
	}
	if keys := s.leaseKeys(r.ID); keys != nil {
		if err := s.deferAuthToApply(s.auth.IsLeaseKeysPermitted(ai, keys)); err != nil {
			return nil, auth.ToGRPCError(err)
		}
	}
	res, err := s.proposeAs(ctx, &pb.InternalRaftRequest{LeaseRevoke: r}, ai)
	if err == nil {
		err = res.err
	}
	if err != nil {
		return nil, toGRPCError(err)
	}
	resp := res.resp.(*pb.LeaseRevokeResponse)
	s.fill(resp.Header)
	return resp, nil
}

func (l *leaseServer) LeaseKeepAlive(stream pb.Lease_LeaseKeepAliveServer) error {
	s := l.s
	for {
		req, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			s.metrics.streamFailed("receive", "lease-keepalive", stream.Context(), err)
			return err
		}
		resp := &pb.LeaseKeepAliveResponse{ID: req.ID, Header: s.header(0)}
		ttl, err := s.renewLease(stream.Context(), req.ID)
		// As etcd, a refused renewal (permission denied included) ends
		// the stream with its error; there is no per-request error.
		switch {
		case err == nil:
			resp.TTL = ttl
		case errors.Is(err, lease.ErrLeaseNotFound):
			resp.TTL = 0 // etcd answers an unknown lease with TTL 0
		default:
			return toGRPCError(err)
		}
		if err := stream.Send(resp); err != nil {
			s.metrics.streamFailed("send", "lease-keepalive", stream.Context(), err)
			return err
		}
	}
}

// renewLease renews on the leader's lessor: here, after everything
// committed is applied (so a just-revoked lease is not renewed), or, on a
// follower or a leader that lost its leadership meanwhile, forwarded to
// the leader over the peer port (leasefwd.go), as etcd does.
func (s *Server) renewLease(ctx context.Context, id int64) (int64, error) {
	if s.node.IsLeader() {
		ttl, err := s.renewLocal(ctx, id)
		if !errors.Is(err, errNoLeader) || s.node.IsLeader() {
			return ttl, err
		}
	}
	rev, err := s.checkLeaseAccess(ctx, []int64{id}, leaseWrite)
	if err == nil {
		err = s.authRevisionMoved(rev)
	}
	if err != nil {
		return 0, err
	}
	return s.forwardRenew(ctx, id)
}

// renewLocal renews on this member, the leader. As etcd, it first waits
// until everything this member knows committed is applied (so a lease
// revoked just before is not renewed), for at most a second (etcd's
// "waiting for the applied index took too long"); with the
// FastLeaseKeepAlive gate (on by default) only for a lease this member
// does not have: a keep-alive of one it has then costs no wait, however
// far apply is behind under load. Leadership needs no read index here,
// as in etcd, whose check is only that its raft loop ticks: the raft
// goroutine here always does, and raft's quorum check ends a leadership
// that lost its followers.
func (s *Server) renewLocal(ctx context.Context, id int64) (int64, error) {
	if !s.cfg.FeatureEnabled(config.FeatureFastLeaseKeepAlive) || !s.lessor.Exists(id) {
		if err := s.waitAppliedCommitted(ctx); err != nil {
			return 0, err
		}
	}
	rev, err := s.checkLeaseAccess(ctx, []int64{id}, leaseWrite)
	if err == nil {
		err = s.authRevisionMoved(rev)
	}
	if err != nil {
		return 0, err
	}
	if err := s.waitLeasePrimary(ctx); err != nil {
		return 0, err
	}
	ttl, err := s.lessor.Renew(ctx, id)
	if errors.Is(err, lease.ErrNotPrimary) {
		return 0, errNoLeader
	}
	return ttl, err
}

// applyWaitTimeout is etcd's applyTimeout: how long a lease operation
// waits for apply to reach the committed index.
const applyWaitTimeout = time.Second

// waitAppliedCommitted waits until this member has applied everything it
// knows committed, as etcd's waitAppliedIndex.
func (s *Server) waitAppliedCommitted(ctx context.Context) error {
	ci := s.node.Committed()
	if s.node.Applied() >= ci {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, applyWaitTimeout)
	defer cancel()
	if err := s.node.WaitApplied(wctx, ci); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return rpctypes.ErrGRPCTimeoutWaitAppliedIndex
		}
		return err
	}
	return nil
}

// waitLeasePrimary returns once this member's lessor is the primary. A
// member promotes its lessor shortly after it becomes leader (runLeases,
// once the new term's entries are applied); a lease RPC arriving in that
// gap waits for it, as the lease clocks only run on the primary, instead
// of failing a client that etcd would have served.
func (s *Server) waitLeasePrimary(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.requestTimeout())
	defer cancel()
	for {
		if !s.node.IsLeader() {
			return errNoLeader
		}
		promoted := s.lessor.PromotedC()
		select {
		case <-promoted:
			return nil
		case <-ctx.Done():
			return readErr(ctx, ctx.Err())
		case <-s.stopping:
			return errStopped
		case <-s.node.Done():
			return errStopped
		}
	}
}

// LeaseTimeToLive checks permissions only when the keys are asked for,
// as etcd: the TTLs alone are no secret.
func (l *leaseServer) LeaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	s := l.s
	var rev uint64
	if r.Keys {
		var err error
		if rev, err = s.checkLeaseAccess(ctx, []int64{r.ID}, leaseRead); err != nil {
			return nil, err
		}
	}
	if !s.node.IsLeader() {
		return s.forwardedTimeToLive(ctx, r, rev)
	}
	if err := s.linearizableRead(ctx); err != nil {
		return nil, toGRPCError(err)
	}
	if s.lessor.Exists(r.ID) {
		if err := s.waitLeasePrimary(ctx); err != nil {
			return nil, toGRPCError(err)
		}
	}
	resp := &pb.LeaseTimeToLiveResponse{Header: s.header(0), ID: r.ID}
	info, err := s.lessor.TimeToLive(r.ID, r.Keys)
	if errors.Is(err, lease.ErrNotPrimary) {
		err = errNoLeader // demoted meanwhile
	}
	if errors.Is(err, lease.ErrLeaseNotFound) {
		resp.TTL = -1 // etcd: an unknown lease has TTL -1
		return resp, nil
	}
	if err == nil && r.Keys {
		err = s.authRevisionMoved(rev)
	}
	if err != nil {
		return nil, toGRPCError(err)
	}
	resp.TTL, resp.GrantedTTL, resp.Keys = info.TTLSeconds(), info.TTL, info.Keys
	return resp, nil
}

// forwardedTimeToLive asks the leader, whose lessor alone knows the
// remaining TTLs.
func (s *Server) forwardedTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest, rev uint64) (*pb.LeaseTimeToLiveResponse, error) {
	resp, err := s.forwardTimeToLive(ctx, r)
	if errors.Is(err, lease.ErrLeaseNotFound) {
		return &pb.LeaseTimeToLiveResponse{Header: s.header(0), ID: r.ID, TTL: -1}, nil
	}
	if err == nil && r.Keys {
		err = s.authRevisionMoved(rev)
	}
	if err != nil {
		return nil, toGRPCError(err)
	}
	resp.Header = s.header(0)
	if !r.Keys {
		resp.Keys = nil
	}
	return resp, nil
}

func (l *leaseServer) LeaseLeases(ctx context.Context, r *pb.LeaseLeasesRequest) (*pb.LeaseLeasesResponse, error) {
	s := l.s
	if err := s.linearizableRead(ctx); err != nil {
		return nil, toGRPCError(err)
	}
	ids := s.lessor.Leases()
	rev, err := s.checkLeaseAccess(ctx, ids, leaseRead)
	if err == nil {
		err = s.authRevisionMoved(rev)
	}
	if err != nil {
		return nil, err
	}
	resp := &pb.LeaseLeasesResponse{Header: s.header(0)}
	for _, id := range ids {
		resp.Leases = append(resp.Leases, &pb.LeaseStatus{ID: id})
	}
	return resp, nil
}

// leaseAccess is what a lease RPC needs on the keys attached to a lease.
type leaseAccess int

const (
	leaseRead  leaseAccess = iota // LeaseLeases, LeaseTimeToLive with keys
	leaseWrite                    // LeaseKeepAlive; LeaseRevoke has its own check
)

// checkLeaseAccess is etcd's rule for the lease RPCs that reveal or
// extend other users' leases. With auth enabled the caller must be
// identified; root passes; anyone else needs read (leaseRead) or write
// (leaseWrite) access to every key attached to each of the leases ids. A
// lease without keys, or one that does not exist, passes: the RPC then
// answers as it does for anyone. It returns the auth revision the check
// started at, for authRevisionMoved once the RPC has its answer. The
// error is a gRPC status.
func (s *Server) checkLeaseAccess(ctx context.Context, ids []int64, access leaseAccess) (uint64, error) {
	rev := s.auth.Revision()
	if !s.auth.IsAuthEnabled() {
		return rev, nil
	}
	ai, err := s.authInfo(ctx)
	if err != nil {
		return rev, err
	}
	if ai.Username == "" {
		return rev, auth.ToGRPCError(auth.ErrUserEmpty)
	}
	if s.auth.IsAdminPermitted(ai) == nil {
		return rev, nil
	}
	check := s.auth.IsLeaseKeysReadPermitted
	if access == leaseWrite {
		check = s.auth.IsLeaseKeysPermitted
	}
	for _, id := range ids {
		keys, ok := s.lessor.Keys(id)
		if !ok {
			continue
		}
		if err := check(ai, keys); err != nil {
			return rev, auth.ToGRPCError(err)
		}
	}
	return rev, nil
}

// authRevisionMoved refuses an answer computed while permissions changed
// (etcd's "revision of auth store is old"), as a gRPC status.
func (s *Server) authRevisionMoved(rev uint64) error {
	if s.auth.IsAuthEnabled() && s.auth.Revision() != rev {
		return auth.ToGRPCError(auth.ErrAuthOldRevision)
	}
	return nil
}

// runLeases promotes the lessor when this member becomes leader and
// demotes it when it stops being one (woken by raft's leader-change
// notification), and proposes a revoke for every lease the primary lessor
// reports expired.
func (s *Server) runLeases() {
	primary := false
	for {
		// Taken before reading the leader, so a change after the read
		// wakes the select below.
		changed := s.node.LeaderChanged()
		leader := s.node.IsLeader()
		switch {
		case leader && !primary:
			// Promote once the new term's entries are applied, so the
			// lessor sees every grant and revoke committed before.
			ctx, cancel := context.WithTimeout(context.Background(), s.requestTimeout())
			err := s.linearizableRead(ctx)
			cancel()
			if err == nil && s.node.IsLeader() {
				s.lessor.Promote(s.cfg.ElectionTimeout())
				primary = true
				// The leader's other duty once its term's entries are
				// applied: the cluster version (runVersionMonitor).
				select {
				case s.leading <- struct{}{}:
				default:
				}
			}
		case !leader && primary:
			s.lessor.Demote()
			primary = false
		}
		var retry <-chan time.Time
		if leader && !primary {
			// The read failed (it timed out under load, say) while this
			// member still leads: try again shortly, or at the next change.
			retry = time.After(s.cfg.HeartbeatInterval())
		}
		select {
		case <-s.stopping:
			return
		case <-s.node.Done():
			// The node stopped (a fatal error): it has no leader any more.
			if primary {
				s.lessor.Demote()
			}
			<-s.stopping
			return
		case <-changed:
		case <-retry:
		case ids := <-s.lessor.ExpiredLeasesC():
			if s.node.IsLeader() {
				s.revokeExpired(ids)
			}
		}
	}
}

// revokeExpired proposes the revoke of each expired lease.
func (s *Server) revokeExpired(ids []int64) {
	for _, id := range ids {
		go func(id int64) {
			ctx, cancel := context.WithTimeout(context.Background(), s.requestTimeout())
			defer cancel()
			// As root when auth is on, as etcd's leader revokes (its
			// WithRoot): every member checks the revoke at apply with
			// that identity.
			var as *auth.AuthInfo
			if s.auth.IsAuthEnabled() {
				as = s.auth.RootAuthInfo()
			}
			res, err := s.proposeAs(ctx, &pb.InternalRaftRequest{LeaseRevoke: &pb.LeaseRevokeRequest{ID: id}}, as)
			if err == nil {
				err = res.err
			}
			if err == nil {
				s.metrics.leaseExpired.Inc()
			}
			// The lessor reports the lease again later. Under the
			// CORRUPT alarm every revoke is refused, so expired
			// leases stay until it is disarmed; say so, as etcd.
			if err != nil && !errors.Is(err, lease.ErrLeaseNotFound) && !errors.Is(err, errStopped) {
				s.lg.Warn("failed to revoke an expired lease", "lease-id", fmt.Sprintf("%016x", id), "error", err)
			}
		}(id)
	}
}

// checkpointLeases proposes remaining-TTL checkpoints (the lessor calls it
// on the leader every checkpoint interval).
func (s *Server) checkpointLeases(ctx context.Context, cps []*pb.LeaseCheckpoint) error {
	res, err := s.propose(ctx, &pb.InternalRaftRequest{LeaseCheckpoint: &pb.LeaseCheckpointRequest{Checkpoints: cps}})
	if err == nil {
		err = res.err
	}
	return err
}
