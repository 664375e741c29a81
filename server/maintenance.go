package server

import (
	"context"
	"errors"
	"fmt"
	"github.com/strata-db/strata/server/config"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/status"
)

// maintenanceServer serves the Maintenance service.
type maintenanceServer struct {
	pb.UnimplementedMaintenanceServer
	s *Server
}

// quotaBytes is the backend quota etcd would apply: --quota-backend-bytes,
// 0 meaning the 2 GiB default.
func (s *Server) quotaBytes() int64 {
	q, enabled := s.cfg.QuotaBytes()
	if !enabled {
		return 0
	}
	return q
}

func (m *maintenanceServer) Status(ctx context.Context, r *pb.StatusRequest) (*pb.StatusResponse, error) {
	s := m.s
	st := s.node.Status()
	ds := s.be.DB().Stats()
	resp := &pb.StatusResponse{
		Header:           s.header(0),
		Version:          EtcdVersion,
		DbSize:           ds.FileSize,
		DbSizeInUse:      ds.InUseBytes,
		Leader:           st.Leader,
		RaftIndex:        st.Committed,
		RaftTerm:         st.Term,
		RaftAppliedIndex: st.Applied,
		DbSizeQuota:      s.quotaBytes(),
		StorageVersion:   s.versions.Storage(),
		DowngradeInfo:    s.versions.info(),
	}
	if m := s.members.Get(s.id); m != nil {
		resp.IsLearner = m.IsLearner
	}
	if st.Leader == 0 {
		// etcd's ErrNoLeader text, "etcdserver: no leader".
		resp.Errors = append(resp.Errors, status.Convert(rpctypes.ErrGRPCNoLeader).Message())
	}
	for _, a := range s.alarms.list() {
		resp.Errors = append(resp.Errors, fmt.Sprintf("memberID:%d alarm:%s", a.MemberID, a.Alarm))
	}
	return resp, nil
}

func (m *maintenanceServer) Alarm(ctx context.Context, r *pb.AlarmRequest) (*pb.AlarmResponse, error) {
	s := m.s
	if r.Action == pb.AlarmRequest_GET {
		// As etcd, a GET goes through raft too (so it is linearizable,
		// and fails as etcd's does without a leader); its apply only
		// reads. The answer is then read here, filtered by type.
		r.ProtoReflect().SetUnknown(nil)
		res, err := s.propose(ctx, &pb.InternalRaftRequest{Alarm: r})
		if err == nil {
			err = res.err
		}
		if err != nil {
			return nil, toGRPCError(err)
		}
		resp := &pb.AlarmResponse{Header: s.header(0)}
		for _, a := range s.alarms.list() {
			if r.Alarm == pb.AlarmType_NONE || a.Alarm == r.Alarm { // etcd filters by type
				resp.Alarms = append(resp.Alarms, a)
			}
		}
		return resp, nil
	}
	if err := s.checkAdmin(ctx); err != nil {
		return nil, err
	}
	r.ProtoReflect().SetUnknown(nil) // only the member itself marks a disk-full alarm
	res, err := s.propose(ctx, &pb.InternalRaftRequest{Alarm: r})
	if err == nil {
		err = res.err
	}
	if err != nil {
		return nil, toGRPCError(err)
	}
	resp := res.resp.(*pb.AlarmResponse)
	resp.Header = s.header(0)
	return resp, nil
}

// defragStarted, if set (by tests), is called once a Defragment request
// has reached the point where the defrag runs whatever the client does.
var defragStarted func()

// Defragment compacts the page store online: live pages move from the
// file's tail into holes in small steps while requests keep being served,
// then the file is truncated. It returns when done, as etcd's does.
func (m *maintenanceServer) Defragment(ctx context.Context, r *pb.DefragmentRequest) (*pb.DefragmentResponse, error) {
	if err := m.s.checkAdmin(ctx); err != nil {
		return nil, err
	}
	s := m.s
	start := time.Now()
	before := s.be.DB().Stats()
	if err := s.be.ForceCommit(); err != nil {
		return nil, toGRPCError(err)
	}
	// The steps ride along with the backend's own batch commits, so
	// under load defrag adds no commit (and no fdatasync) to the write
	// path; see mvcc.Backend.Defrag. As with etcd, a client that stops
	// waiting (etcdctl's default --command-timeout is 5 s) does not stop
	// the defrag: it runs to the end, and only the server's shutdown
	// interrupts it.
	done := make(chan error, 1)
	if s.cfg.FeatureEnabled(config.FeatureStopGRPCServiceOnDefrag) && s.health != nil {
		s.stopServing("defrag is active")
	}
	if defragStarted != nil {
		defragStarted()
	}
	go func() {
		s.logDefragStart(before)
		// An image kept for followers' snapshots holds pages that the
		// defrag would otherwise have to wait for.
		if s.node != nil {
			s.node.ReleaseImage()
		}
		err := s.be.Defrag(context.Background(), nil)
		if err == nil {
			s.logDefragDone(before, time.Since(start))
		} else {
			s.lg.Warn("failed to defragment", "error", err, "took", time.Since(start))
		}
		if s.health != nil {
			// As etcd's, the service is back once the defragmentation
			// ends, however the request that started it ended.
			s.startServing()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			return nil, toGRPCError(err)
		}
		// etcd's Defragment answers with an empty message, no header:
		// the gateway shows it as {}.
		return &pb.DefragmentResponse{}, nil
	case <-ctx.Done():
		s.lg.Info("defragment client went away; defragmentation continues", "error", ctx.Err())
		return nil, toGRPCError(ctx.Err())
	}
}

func (m *maintenanceServer) Hash(ctx context.Context, r *pb.HashRequest) (*pb.HashResponse, error) {
	if err := m.s.checkAdmin(ctx); err != nil {
		return nil, err
	}
	m.s.lockForRead()
	h, rev, err := m.s.kv.Hash()
	m.s.restoreMu.RUnlock()
	if err != nil {
		return nil, toGRPCError(err)
	}
	return &pb.HashResponse{Header: m.s.header(rev), Hash: h}, nil
}

func (m *maintenanceServer) HashKV(ctx context.Context, r *pb.HashKVRequest) (*pb.HashKVResponse, error) {
	if err := m.s.checkAdmin(ctx); err != nil {
		return nil, err
	}
	m.s.lockForRead()
	h, rev, err := m.s.kv.HashKV(r.Revision)
	m.s.restoreMu.RUnlock()
	if err != nil {
		return nil, toGRPCError(err)
	}
	return &pb.HashKVResponse{Header: m.s.header(rev), Hash: h.Hash, CompactRevision: h.CompactRevision, HashRevision: h.Revision}, nil
}

func (m *maintenanceServer) MoveLeader(ctx context.Context, r *pb.MoveLeaderRequest) (*pb.MoveLeaderResponse, error) {
	if err := m.s.checkAdmin(ctx); err != nil {
		return nil, err
	}
	s := m.s
	if !s.node.IsLeader() {
		return nil, rpctypes.ErrGRPCNotLeader
	}
	t := s.members.Get(r.TargetID)
	if t == nil || t.IsLearner {
		return nil, rpctypes.ErrGRPCBadLeaderTransferee
	}
	if err := s.moveLeader(ctx, r.TargetID); err != nil {
		return nil, toGRPCError(err)
	}
	return &pb.MoveLeaderResponse{}, nil // no header, as etcd's
}

// moveLeader hands leadership to member to and waits until this member
// sees it lead, or fails as etcd does when the transfer takes longer than
// the request timeout.
func (s *Server) moveLeader(ctx context.Context, to uint64) error {
	ctx, cancel := context.WithTimeout(ctx, s.requestTimeout())
	defer cancel()
	s.lg.Info("leadership transfer starting", "local-member-id", fmt.Sprintf("%x", s.id),
		"current-leader-member-id", fmt.Sprintf("%x", s.id), "transferee-member-id", fmt.Sprintf("%x", to))
	start := time.Now()
	if err := s.node.TransferLeadership(ctx, to); err != nil {
		return errLeaderTransferTimeout
	}
	for {
		changed := s.node.LeaderChanged()
		if s.node.Status().Leader == to {
			break
		}
		select {
		case <-changed:
		case <-time.After(s.cfg.HeartbeatInterval()):
			// raft gives up a transfer after an election timeout; ask
			// again while there is time, as the target may have been
			// catching up.
			if s.node.IsLeader() {
				_ = s.node.TransferLeadership(ctx, to)
			}
		case <-ctx.Done():
			return errLeaderTransferTimeout
		case <-s.stopping:
			return errStopped
		}
	}
	s.lg.Info("leadership transfer finished", "local-member-id", fmt.Sprintf("%x", s.id),
		"old-leader-member-id", fmt.Sprintf("%x", s.id), "new-leader-member-id", fmt.Sprintf("%x", to), "took", time.Since(start).String())
	return nil
}

// handOffLeadership moves the leadership, on a leader that stops, to the
// voter it has been connected to longest, as etcd's graceful stop does,
// so the cluster does not wait out an election timeout (and lose the
// proposals its followers forwarded to it meanwhile). Bounded by the
// request timeout; a failure is logged and the member stops anyway.
func (s *Server) handOffLeadership() {
	if s.node == nil || s.peers == nil || !s.node.IsLeader() {
		return
	}
	if IsRemoved(s.Err()) {
		// A removed leader's peers refuse it; they elect a new leader
		// as soon as it stops.
		return
	}
	var to uint64
	var since time.Time
	for _, v := range s.node.Status().Voters {
		if v == s.id {
			continue
		}
		if a := s.peers.tr.ActiveSince(v); !a.IsZero() && (to == 0 || a.Before(since)) {
			to, since = v, a
		}
	}
	if to == 0 {
		return // alone, or no other voter is reachable
	}
	// A transferee that becomes unreachable meanwhile (it was stopping
	// too: members of a cluster are often stopped one after the other)
	// will not take over; stop at once instead of waiting out the
	// request timeout.
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	go func() {
		tick := time.NewTicker(s.cfg.HeartbeatInterval())
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if s.peers.tr.ActiveSince(to).IsZero() {
					cancel(errTransfereeUnreachable)
					return
				}
			}
		}
	}()
	if err := s.moveLeader(ctx, to); err != nil {
		if cause := context.Cause(ctx); errors.Is(cause, errTransfereeUnreachable) {
			err = cause
		}
		s.lg.Warn("failed to transfer leadership before stopping", "transferee-member-id", fmt.Sprintf("%x", to), "error", err)
	}
}

var errTransfereeUnreachable = errors.New("the transferee became unreachable")
