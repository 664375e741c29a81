package server

import (
	"context"
	"errors"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/strata-db/strata/auth"
	"github.com/strata-db/strata/mvcc"
	"github.com/strata-db/strata/raft"
	"github.com/strata-db/strata/server/config"
)

// kvServer serves the KV service.
type kvServer struct {
	pb.UnimplementedKVServer
	s *Server
	// wire is set on the handler registered with the gRPC server, whose
	// Range responses are only marshalled and sent: it may answer with
	// the stored key-values still encoded (mvcc.Store.RangeEncoded). The
	// in-process callers (lock, election) read Kvs and leave it unset.
	wire bool
	// chunks holds the buffers of RangeStream's chunks; set with wire.
	chunks *chunkPool
}

// header fills a response header: cluster, member, raft term, and the
// store's current revision unless the operation set one.
func (s *Server) header(rev int64) *pb.ResponseHeader {
	if rev == 0 {
		rev = s.kv.Rev()
	}
	return &pb.ResponseHeader{ClusterId: s.cluster, MemberId: s.id, Revision: rev, RaftTerm: s.node.Term()}
}

func (s *Server) fill(h *pb.ResponseHeader) {
	if h == nil {
		return
	}
	h.ClusterId, h.MemberId, h.RaftTerm = s.cluster, s.id, s.node.Term()
	if h.Revision == 0 {
		h.Revision = s.kv.Rev()
	}
}

// linearizableRead waits until a read served from the local store
// reflects every write committed before it was called.
func (s *Server) linearizableRead(caller context.Context) error {
	deadline := time.Now().Add(s.requestTimeout())
	// The common case needs no context or timer of its own: the raft
	// goroutine enforces the deadline on the ReadIndex wait, and the
	// index is usually applied by the time the answer comes back.
	idx, err := s.node.ReadIndexBefore(caller, deadline)
	if err == nil && s.node.Applied() >= idx {
		return nil
	}
	ctx, cancel := context.WithDeadline(caller, deadline)
	defer cancel()
	// As etcd: the caller's own deadline or cancellation is answered with
	// the context's error; only the read's timeout is "request timed out".
	fail := func(err error) error {
		if caller.Err() != nil {
			return caller.Err()
		}
		if errors.Is(err, context.DeadlineExceeded) && !time.Now().Before(deadline) {
			return errTimeout
		}
		return readErr(ctx, err)
	}
	for err != nil {
		if !errors.Is(err, raft.ErrNoLeader) {
			return fail(err)
		}
		// As etcd's read loop, keep asking until there is a leader to
		// confirm the read index, or the request times out.
		if err := s.waitToPropose(ctx, nil); err != nil {
			return fail(err)
		}
		idx, err = s.node.ReadIndexBefore(ctx, deadline)
	}
	if err := s.node.WaitApplied(ctx, idx); err != nil {
		return fail(err)
	}
	return nil
}

func readErr(ctx context.Context, err error) error {
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
		return errTimeout
	}
	return err
}

// propose sends req through raft and waits for its apply result.
func (s *Server) propose(ctx context.Context, req *pb.InternalRaftRequest) (applyResult, error) {
	return s.proposeAs(ctx, req, nil)
}

// proposeAs proposes req on behalf of the caller ai (nil: the server
// itself), whose name and auth revision apply checks again. It sets
// req.Header. Neither req nor anything it points to may change after the
// call, even once it has returned: this member's apply goroutine may be
// applying req itself (waitRegistry.local) after the caller gave up.
func (s *Server) proposeAs(ctx context.Context, req *pb.InternalRaftRequest, ai *auth.AuthInfo) (applyResult, error) {
	return s.proposeEncoded(ctx, req, ai, marshalProposal)
}

// proposeEncoded is proposeAs with the request's entry encoded by encode.
func (s *Server) proposeEncoded(ctx context.Context, req *pb.InternalRaftRequest, ai *auth.AuthInfo, encode proposalEncoder) (applyResult, error) {
	if err := s.checkQuota(ctx, req); err != nil {
		return applyResult{}, err
	}
	if s.exceedsRequestLimit(req) {
		return applyResult{}, errTooManyRequests
	}
	cost, err := s.diskFull.admit(req)
	if err != nil {
		return applyResult{}, err
	}
	defer s.diskFull.release(cost)
	// etcd_server_request_duration_seconds: from here to the result. As
	// in etcd, success means the request was proposed; a proposal that
	// times out, or whose apply fails, still counts as a success.
	start, proposed := time.Now(), false
	defer func() { s.metrics.observeRequest(requestType(req), proposed, time.Since(start)) }()
	id := s.reqIDs.next()
	req.Header = &pb.RequestHeader{ID: id}
	if ai != nil {
		req.Header.Username, req.Header.AuthRevision = ai.Username, ai.Revision
	}
	data, err := encode(req)
	if err != nil {
		return applyResult{}, err
	}
	if len(data) > int(s.cfg.MaxRequestBytes) {
		return applyResult{}, errRequestTooLarge
	}
	// The request's timeout is a pooled timer, not a context.WithTimeout
	// (a timer, an allocation and an entry in the caller's context per
	// request).
	timeout := getTimer(s.requestTimeout())
	defer putTimer(timeout)
	s.metrics.proposalsPending.Inc()
	defer s.metrics.proposalsPending.Dec()
	drop := func(err error) {
		if errors.Is(err, raft.ErrProposalDropped) {
			err = errNoLeader
		}
		s.wait.trigger(id, applyResult{err: err, dropped: true})
	}
	for {
		ch := s.wait.registerRequest(id, req, data)
		if err := s.node.ProposeAsync(ctx, timeout.C, data, drop); err != nil {
			s.wait.cancel(id)
			s.metrics.proposalsFailed.Inc()
			if errors.Is(err, context.DeadlineExceeded) {
				return applyResult{}, errTimeout
			}
			return applyResult{}, err
		}
		proposed = true
		select {
		case r := <-ch:
			if !r.dropped {
				return r, nil
			}
			if errors.Is(r.err, errNoLeader) {
				// Raft takes no proposal while it knows no leader (or
				// while its leadership is being transferred); etcd's
				// proposal then waits until there is one, or until the
				// request times out with the context's error.
				if err := s.waitToPropose(ctx, timeout.C); err == nil {
					continue
				} else {
					s.metrics.proposalsFailed.Inc()
					return applyResult{}, err
				}
			}
			s.metrics.proposalsFailed.Inc()
			return applyResult{}, r.err
		case <-timeout.C:
			s.wait.cancel(id)
			s.metrics.proposalsFailed.Inc()
			return applyResult{}, s.proposalTimeoutErr(context.DeadlineExceeded, start)
		case <-ctx.Done():
			s.wait.cancel(id)
			s.metrics.proposalsFailed.Inc()
			return applyResult{}, s.proposalTimeoutErr(ctx.Err(), start)
		case <-s.stopping:
			return applyResult{}, errStopped
		}
	}
}

// Apply backlog limits, etcd's: a member whose applied index is this far
// behind its committed index takes no new proposal ("etcdserver: too many
// requests") until apply catches up; with the PriorityRequest gate a
// lease revoke may go twice as far behind, so that leases still expire
// (and free their keys) under an overload.
const (
	maxApplyGap         = 5000
	maxPriorityApplyGap = 2 * maxApplyGap
)

// errTooManyRequests is etcd's answer to a proposal over the limit. etcd
// maps its error to an rpctypes.EtcdError, which is no gRPC status, so its
// clients get it with the code Unknown; so do Strata's (toGRPCError).
var errTooManyRequests = errors.New("etcdserver: too many requests")

// exceedsRequestLimit is etcd's check of the apply backlog before a
// proposal.
func (s *Server) exceedsRequestLimit(req *pb.InternalRaftRequest) bool {
	return overApplyGap(s.node.Applied(), s.node.Committed(), req, s.cfg.FeatureEnabled(config.FeaturePriorityRequest))
}

// overApplyGap decides exceedsRequestLimit from the applied and committed
// indexes: a lease revoke is a priority request.
func overApplyGap(applied, committed uint64, req *pb.InternalRaftRequest, priority bool) bool {
	if committed <= applied+maxApplyGap {
		return false
	}
	if priority && req.LeaseRevoke != nil {
		return committed > applied+maxPriorityApplyGap
	}
	return true
}

// proposalTimeoutErr is etcd's reading of a proposal that was not applied
// in time (parseProposeCtxErr): a proposal made while the previous leader
// was failing (within two election timeouts before the current leader was
// elected) timed out "possibly due to previous leader failure"; one whose
// leader (or, on the leader, whose quorum) was not connected all along
// "possibly due to connection lost"; any other simply timed out.
func (s *Server) proposalTimeoutErr(err error, start time.Time) error {
	if !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	elected := s.node.LeaderElected()
	if start.After(elected.Add(-2*s.cfg.ElectionTimeout())) && start.Before(elected) {
		return errTimeoutLeaderFail
	}
	switch lead := s.node.Status().Leader; lead {
	case 0:
	case s.id:
		members := s.members.List()
		connected := 0
		for _, m := range members {
			if m.ID == s.id || s.connectedSince(m.ID, start) {
				connected++
			}
		}
		if connected < len(members)/2+1 {
			return errTimeoutConnectionLost
		}
	default:
		if !s.connectedSince(lead, start) {
			return errTimeoutConnectionLost
		}
	}
	return errTimeout
}

// connectedSince reports whether the link to member id has been active
// since before t.
func (s *Server) connectedSince(id uint64, t time.Time) bool {
	a := s.peers.tr.ActiveSince(id)
	return !a.IsZero() && a.Before(t)
}

// waitToPropose waits, after raft dropped a proposal, until proposing
// again may succeed: until a leader is known, or, when one is (it is
// transferring its leadership), for the next leader change or a
// heartbeat interval. It returns the context's error when the request's
// time is up: ctx's, or context.DeadlineExceeded when expired fires (nil:
// never).
func (s *Server) waitToPropose(ctx context.Context, expired <-chan time.Time) error {
	changed := s.node.LeaderChanged()
	var retry <-chan time.Time
	if s.node.Status().Leader != 0 {
		t := time.NewTimer(s.cfg.HeartbeatInterval())
		defer t.Stop()
		retry = t.C
	}
	select {
	case <-changed:
	case <-retry:
	case <-ctx.Done():
		return ctx.Err()
	case <-expired:
		return context.DeadlineExceeded
	case <-s.stopping:
		return errStopped
	case <-s.node.Done():
		return errStopped
	}
	return nil
}

// timers recycles the request timers of proposeAs.
var timers sync.Pool

// getTimer returns a running timer that fires once after d.
func getTimer(d time.Duration) *time.Timer {
	if t, ok := timers.Get().(*time.Timer); ok {
		t.Reset(d)
		return t
	}
	return time.NewTimer(d)
}

// putTimer stops t and keeps it for reuse. Since Go 1.23 a stopped timer's
// channel holds no stale tick, so a reused timer never fires early.
func putTimer(t *time.Timer) {
	t.Stop()
	timers.Put(t)
}

func (k *kvServer) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	if err := checkRangeRequest(r); err != nil {
		return nil, err
	}
	s := k.s
	ai, err := s.authInfo(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.auth.IsRangePermitted(ai, r.Key, r.RangeEnd); err != nil {
		return nil, auth.ToGRPCError(err)
	}
	read := s.kv.Range
	if k.wire {
		read = s.kv.RangeEncoded
	}
	resp, err := s.rangeReadAs(ctx, r, read)
	if err != nil {
		return nil, toGRPCError(err)
	}
	s.fill(resp.Header)
	return resp, nil
}

// rangeRead serves a permitted Range: a linearizable wait unless the
// request is serializable, then the local read. It is etcd's
// EtcdServer.Range, which its health checks call too, and keeps etcd's
// figures: request_duration_seconds{type="Range"} for the whole,
// range_duration_seconds for the read, and a slow apply beyond
// --warning-apply-duration.
func (s *Server) rangeRead(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	return s.rangeReadAs(ctx, r, s.kv.Range)
}

// rangeReadAs is rangeRead reading with read: the gRPC handler passes the
// store's RangeEncoded, whose response is only fit to be sent as it is
// (its key-values are still encoded, see mvcc.Store.RangeEncoded).
func (s *Server) rangeReadAs(ctx context.Context, r *pb.RangeRequest, read func(*pb.RangeRequest) (*pb.RangeResponse, error)) (*pb.RangeResponse, error) {
	// Three clock reads for a serializable read, four for a linearizable
	// one: the read starts when the request does unless it waited.
	start := time.Now()
	rstart := start
	if !r.Serializable {
		if err := s.linearizableRead(ctx); err != nil {
			s.observeRangeRequest(false, time.Since(start))
			return nil, err
		}
		rstart = time.Now()
	}
	s.lockForRead()
	resp, err := read(r)
	s.restoreMu.RUnlock()
	end := time.Now()
	s.metrics.observeRange(err == nil, end.Sub(rstart))
	s.observeRangeRequest(err == nil, end.Sub(start))
	return resp, err
}

// observeRangeRequest records a Range's whole duration: etcd's
// request_duration_seconds, and a slow apply beyond
// --warning-apply-duration.
func (s *Server) observeRangeRequest(ok bool, d time.Duration) {
	s.metrics.observeRequest("Range", ok, d)
	if d > s.cfg.WarningApplyDuration {
		s.metrics.slowApply.Inc()
	}
}

func (k *kvServer) Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	if err := checkPutRequest(r); err != nil {
		return nil, err
	}
	ai, err := k.s.authInfo(ctx)
	if err != nil {
		return nil, err
	}
	if err := k.s.deferAuthToApply(k.s.auth.IsPutRequestPermitted(ai, r, k.s.leaseKeys)); err != nil {
		return nil, auth.ToGRPCError(err)
	}
	res, err := k.s.proposeEncoded(ctx, &pb.InternalRaftRequest{Put: r}, ai, encodePutProposal)
	if err == nil {
		err = res.err
	}
	if err != nil {
		return nil, toGRPCError(err)
	}
	resp := res.resp.(*pb.PutResponse)
	k.s.fill(resp.Header)
	return resp, nil
}

func (k *kvServer) DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	if err := checkDeleteRequest(r); err != nil {
		return nil, err
	}
	ai, err := k.s.authInfo(ctx)
	if err != nil {
		return nil, err
	}
	if err := k.s.deferAuthToApply(k.s.auth.IsDeleteRangeRequestPermitted(ai, r)); err != nil {
		return nil, auth.ToGRPCError(err)
	}
	res, err := k.s.proposeAs(ctx, &pb.InternalRaftRequest{DeleteRange: r}, ai)
	if err == nil {
		err = res.err
	}
	if err != nil {
		return nil, toGRPCError(err)
	}
	resp := res.resp.(*pb.DeleteRangeResponse)
	k.s.fill(resp.Header)
	return resp, nil
}

func isTxnSerializable(r *pb.TxnRequest) bool {
	for _, branch := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, u := range branch {
			if rr := u.GetRequestRange(); rr == nil || !rr.Serializable {
				return false
			}
		}
	}
	return true
}

func (k *kvServer) Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	s := k.s
	if err := checkTxnRequest(r, int(s.cfg.MaxTxnOps)); err != nil {
		return nil, err
	}
	if err := checkBranch(r.Success); err != nil {
		return nil, err
	}
	if err := checkBranch(r.Failure); err != nil {
		return nil, err
	}
	ai, err := s.authInfo(ctx)
	if err != nil {
		return nil, err
	}
	readOnly := mvcc.IsTxnReadOnly(r)
	if err := s.auth.IsTxnPermitted(ai, r, s.leaseKeys); err != nil && (readOnly || s.deferAuthToApply(err) != nil) {
		return nil, auth.ToGRPCError(err)
	}
	if readOnly {
		if !isTxnSerializable(r) {
			if err := s.linearizableRead(ctx); err != nil {
				return nil, toGRPCError(err)
			}
		}
		// As etcd, the read itself is timed (ReadonlyTxn), not the wait.
		start := time.Now()
		s.lockForRead()
		resp, err := s.kv.ReadTxn(r)
		s.restoreMu.RUnlock()
		d := time.Since(start)
		s.metrics.observeRequest("ReadonlyTxn", err == nil, d)
		if d > s.cfg.WarningApplyDuration {
			s.metrics.slowApply.Inc()
		}
		if err != nil {
			return nil, toGRPCError(err)
		}
		s.fill(resp.Header)
		return resp, nil
	}
	res, err := s.proposeEncoded(ctx, &pb.InternalRaftRequest{Txn: r}, ai, encodeTxnProposal)
	if err == nil {
		err = res.err
	}
	if err != nil {
		return nil, toGRPCError(err)
	}
	resp := res.resp.(*pb.TxnResponse)
	s.fill(resp.Header)
	return resp, nil
}

func (k *kvServer) Compact(ctx context.Context, r *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	ai, err := k.s.authInfo(ctx)
	if err != nil {
		return nil, err
	}
	if err := k.s.auth.IsAdminPermitted(ai); err != nil {
		return nil, auth.ToGRPCError(err)
	}
	res, err := k.s.proposeAs(ctx, &pb.InternalRaftRequest{Compaction: r}, ai)
	if err == nil {
		err = res.err
	}
	if err != nil {
		return nil, toGRPCError(err)
	}
	if r.Physical && res.done != nil {
		select {
		case <-res.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-k.s.stopping:
			return nil, toGRPCError(errStopped)
		}
	}
	resp := res.resp.(*pb.CompactionResponse)
	k.s.fill(resp.Header)
	return resp, nil
}
