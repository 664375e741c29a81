package server

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/mvcc"
	"github.com/strata-db/strata/pagestore"
)

// A full page-store disk. When the backend cannot
// commit, every acknowledged write stays in memory until it can: the
// writes are safe in the WAL, but memory is not infinite and nobody could
// see why it grew. So:
//
//   - The member raises NOSPACE for itself through raft, as the quota
//     does: every member's apply then refuses writes ("etcdserver: mvcc:
//     database space exceeded"), reads and deletes keep working, and the
//     alarm shows in `alarm list` and `endpoint status` ERRORS.
//   - Independently, a proposal is admitted only if the writes waiting
//     for a commit (PendingBytes) plus the writes admitted and not yet
//     applied stay within --backend-backlog-bytes (default 64 MiB). This
//     bounds memory from the first failed commit on, before the alarm is
//     applied, and on a disk that is healthy but too slow.
//   - The backend logs the failure once and then once a minute, retries
//     with backoff, and the metrics below show the backlog and failures.
//   - The first commit that succeeds again lets the member clear the
//     alarm it raised, by itself. Nothing is lost: the backlog goes to the
//     page store with that commit.
//
// Telling it apart from a quota NOSPACE, which only `alarm disarm` ends:
// both are AlarmType NOSPACE for the member (that is what etcd's clients
// know), but the member's own requests carry a mark, a varint field
// (diskFullField) unknown to etcd's AlarmRequest, set only by the server
// (client alarm requests have unknown fields stripped). Apply keeps the
// origin: a marked ACTIVATE raises NOSPACE with origin "disk full" (and
// stores diskFullValue in the alarm bucket, so the origin survives a
// restart; etcd writes an empty value there and ignores values when it
// reads one); the member proposes a marked DEACTIVATE only for an alarm
// whose origin is still "disk full", and it is applied as etcd applies
// any DEACTIVATE (etcd members of the cluster ignore the mark), so every
// member, of either kind, clears the same alarm. An unmarked ACTIVATE
// (the quota, an operator) of an alarm raised for a full disk turns it
// into an ordinary one, which the member then no longer clears, and
// `alarm disarm` clears both kinds. Because origin and alarm are applied
// through raft, every member agrees on both.
//
// Which member proposes: the member whose backend fails. A reconcile loop
// compares "my commits fail" with "my disk-full alarm is active" and
// proposes the difference, on every change and again each second until
// the proposal is applied (no leader, a timeout). After a restart with the
// alarm active it proposes the clear, and raises it again at once if the
// disk is still full: a commit of the clear's own write fails.

// diskFullValue is the alarm-bucket value of a NOSPACE alarm raised for a
// failing commit (wire format, never change).
var diskFullValue = []byte("strata:disk-full")

// diskFullField is the protobuf field number of the disk-full mark on an
// AlarmRequest (varint 1). etcd's AlarmRequest uses fields 1 to 3 (wire
// format, never change).
const diskFullField protowire.Number = 1701

// diskFull is the member's disk-full state: admission, the alarm's origin
// and the reconcile loop.
type diskFull struct {
	s     *Server
	limit int64 // --backend-backlog-bytes
	kick  chan struct{}

	// inflight is the cost of admitted proposals not yet answered.
	inflight atomic.Int64
	refused  atomic.Uint64 // proposals refused by the backlog bound
	lastLog  atomic.Int64  // unix nanos of the last refusal log line

	// mu guards raised: the members whose NOSPACE alarm was raised for a
	// failing commit. Changed only by apply; lock order alarms.mu, mu.
	mu     sync.Mutex
	raised map[uint64]bool
}

func newDiskFull(s *Server, limit int64) *diskFull {
	return &diskFull{s: s, limit: limit, kick: make(chan struct{}, 1), raised: map[uint64]bool{}}
}

// load restores the origins of the alarms in the page store.
func (d *diskFull) load(db *pagestore.DB) error {
	return db.View(func(tx *pagestore.Tx) error {
		b, err := tx.Bucket(alarmBucket)
		if err != nil {
			return nil // no alarm ever raised
		}
		return b.ForEach(func(k, v []byte) error {
			var am pb.AlarmMember
			if err := proto.Unmarshal(k, &am); err != nil {
				return err
			}
			if am.Alarm == pb.AlarmType_NOSPACE && string(v) == string(diskFullValue) {
				d.raised[am.MemberID] = true
			}
			return nil
		})
	})
}

// markDiskFull marks r as the member's own disk-full request.
func markDiskFull(r *pb.AlarmRequest) *pb.AlarmRequest {
	r.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, diskFullField, protowire.VarintType), 1))
	return r
}

// isDiskFullRequest reports whether r carries the disk-full mark.
func isDiskFullRequest(r *pb.AlarmRequest) bool {
	b := r.ProtoReflect().GetUnknown()
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		if num == diskFullField && typ == protowire.VarintType {
			v, m := protowire.ConsumeVarint(b)
			return m > 0 && v == 1
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return false
		}
		b = b[m:]
	}
	return false
}

// applyAlarm applies an AlarmRequest, keeping track of which NOSPACE
// alarms were raised for a full disk (see the comment at the top).
func (s *Server) applyAlarm(w *mvcc.WriteTx, r *pb.AlarmRequest) *pb.AlarmResponse {
	if isDiskFullRequest(r) {
		return s.diskFull.applyMarked(w, r)
	}
	s.diskFull.applyUnmarked(w, r)
	return s.alarms.apply(w, r)
}

// applyMarked applies the member's own disk-full ACTIVATE or DEACTIVATE
// of NOSPACE for r.MemberID.
func (d *diskFull) applyMarked(w *mvcc.WriteTx, r *pb.AlarmRequest) *pb.AlarmResponse {
	a := d.s.alarms
	k := alarmKey{r.MemberID, pb.AlarmType_NOSPACE}
	a.mu.Lock()
	defer a.mu.Unlock()
	d.mu.Lock()
	defer d.mu.Unlock()
	resp := &pb.AlarmResponse{}
	am := &pb.AlarmMember{MemberID: r.MemberID, Alarm: pb.AlarmType_NOSPACE}
	switch r.Action {
	case pb.AlarmRequest_ACTIVATE:
		if !a.m[k] {
			a.m[k] = true
			d.raised[r.MemberID] = true
			w.Put(alarmBucket, alarmKeyBytes(r.MemberID, pb.AlarmType_NOSPACE), diskFullValue)
		}
		a.counted(r.MemberID, pb.AlarmType_NOSPACE, 1)
		resp.Alarms = append(resp.Alarms, am)
	case pb.AlarmRequest_DEACTIVATE:
		// As etcd applies it (it ignores the mark): the member's NOSPACE
		// ends, whatever raised it, so that etcd and Strata members of
		// one cluster keep the same alarms. The proposer clears only an
		// alarm it raised itself.
		if a.m[k] {
			delete(a.m, k)
			delete(d.raised, r.MemberID)
			w.Delete(alarmBucket, alarmKeyBytes(r.MemberID, pb.AlarmType_NOSPACE))
			a.counted(r.MemberID, pb.AlarmType_NOSPACE, -1)
			resp.Alarms = append(resp.Alarms, am)
		}
	}
	return resp
}

// applyUnmarked updates the origins before an ordinary alarm request is
// applied: an ACTIVATE of NOSPACE makes a disk-full alarm an ordinary one
// (only `alarm disarm` ends it), a DEACTIVATE forgets the origins of what
// it clears.
func (d *diskFull) applyUnmarked(w *mvcc.WriteTx, r *pb.AlarmRequest) {
	a := d.s.alarms
	a.mu.Lock()
	defer a.mu.Unlock()
	d.mu.Lock()
	defer d.mu.Unlock()
	switch r.Action {
	case pb.AlarmRequest_ACTIVATE:
		if r.Alarm == pb.AlarmType_NOSPACE && d.raised[r.MemberID] {
			delete(d.raised, r.MemberID)
			w.Put(alarmBucket, alarmKeyBytes(r.MemberID, pb.AlarmType_NOSPACE), []byte{})
		}
	case pb.AlarmRequest_DEACTIVATE:
		if r.Alarm == pb.AlarmType_NONE || r.Alarm == pb.AlarmType_NOSPACE {
			for m := range d.raised {
				if r.MemberID == 0 || m == r.MemberID {
					delete(d.raised, m)
				}
			}
		}
	}
}

// activeFor reports whether alarm t is raised for member.
func (a *alarms) activeFor(member uint64, t pb.AlarmType) bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.m[alarmKey{member, t}]
}

// raisedFor reports whether member's NOSPACE alarm is active and was
// raised for a full disk.
func (d *diskFull) raisedFor(member uint64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.raised[member]
}

// admit reserves room for req in the backlog bound and returns the
// reservation, which release gives back once the proposal is answered.
// It refuses with errNoSpace a write that would take the writes waiting
// for a page-store commit past --backend-backlog-bytes.
func (d *diskFull) admit(req *pb.InternalRaftRequest) (cost int64, err error) {
	cost = int64(requestCost(req))
	if cost == 0 {
		return 0, nil
	}
	pending := d.s.be.PendingBytes()
	for {
		in := d.inflight.Load()
		if pending+in+cost > d.limit {
			d.refuse(pending, in)
			return 0, errNoSpace
		}
		if d.inflight.CompareAndSwap(in, in+cost) {
			return cost, nil
		}
	}
}

// release gives back a reservation admit made.
func (d *diskFull) release(cost int64) {
	if cost != 0 {
		d.inflight.Add(-cost)
	}
}

// refuseLogEvery spaces the backlog-refusal log lines.
const refuseLogEvery = time.Minute

func (d *diskFull) refuse(pending, inflight int64) {
	n := d.refused.Add(1)
	now := time.Now().UnixNano()
	last := d.lastLog.Load()
	if now-last >= int64(refuseLogEvery) && d.lastLog.CompareAndSwap(last, now) {
		d.s.lg.Warn("refusing writes: the writes waiting for a backend commit reached --backend-backlog-bytes",
			"backlog-bytes", pending, "in-flight-bytes", inflight, "backend-backlog-bytes", d.limit,
			"commit-failing", d.s.be.CommitFailing(), "refused-writes", n)
	}
}

// onCommitHealth is the backend's OnCommitHealth: it wakes the reconcile
// loop, and stops the member if the page store must be reopened. It runs
// under the backend's commit lock and must not block.
func (d *diskFull) onCommitHealth(err error) {
	if err != nil && errors.Is(err, pagestore.ErrFailed) {
		go d.s.fatal(err)
		return
	}
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// run is the reconcile loop (see the comment at the top). Started by Serve.
func (d *diskFull) run() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-d.kick:
		case <-t.C:
		case <-d.s.stopping:
			return
		}
		d.reconcile()
	}
}

func (d *diskFull) reconcile() {
	s := d.s
	failing := s.be.CommitFailing()
	raised := d.raisedFor(s.id)
	var action pb.AlarmRequest_AlarmAction
	switch {
	case failing && !raised && !s.alarms.activeFor(s.id, pb.AlarmType_NOSPACE):
		action = pb.AlarmRequest_ACTIVATE
	case !failing && raised:
		action = pb.AlarmRequest_DEACTIVATE
	default:
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.requestTimeout())
	defer cancel()
	req := markDiskFull(&pb.AlarmRequest{Action: action, MemberID: s.id, Alarm: pb.AlarmType_NOSPACE})
	if _, err := s.propose(ctx, &pb.InternalRaftRequest{Alarm: req}); err != nil {
		s.lg.Debug("disk-full alarm proposal failed; retrying", "action", action.String(), "error", err)
		return
	}
	if action == pb.AlarmRequest_ACTIVATE {
		s.lg.Warn("the page store cannot commit: raised NOSPACE; writes are refused until a commit succeeds "+
			"again (reads and deletes are served, nothing acknowledged is lost); free space on the data disk",
			"data-dir", s.cfg.DataDir, "error", s.be.LastCommitError(), "backlog-bytes", s.be.PendingBytes())
	} else {
		s.lg.Info("backend commits succeed again: cleared the NOSPACE alarm raised for the full disk",
			"data-dir", s.cfg.DataDir)
	}
}

// collectors are the disk-full metrics (Strata's own names).
func (d *diskFull) collectors() []prometheus.Collector {
	s := d.s
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "strata_backend_backlog_bytes",
			Help: "Bytes of applied writes waiting in memory for a backend commit."},
			func() float64 { return float64(s.be.PendingBytes()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "strata_backend_backlog_limit_bytes",
			Help: "--backend-backlog-bytes: past it, writes are refused with NOSPACE."},
			func() float64 { return float64(d.limit) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "strata_backend_commit_failing",
			Help: "1 while backend commits fail (a full or failing data disk), else 0."},
			func() float64 { return b2f(s.be.CommitFailing()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "strata_backend_commit_failures_total",
			Help: "Backend commits that failed."},
			func() float64 { return float64(s.be.CommitFailures()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "strata_backend_backlog_refused_total",
			Help: "Write proposals refused because the backend backlog reached --backend-backlog-bytes."},
			func() float64 { return float64(d.refused.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "strata_server_disk_full_alarm",
			Help: "1 while this member's NOSPACE alarm is the one raised for its failing backend commits."},
			func() float64 { return b2f(d.raisedFor(s.id)) }),
	}
}
