package server

import (
	"context"
	"github.com/prometheus/client_golang/prometheus"
	"sort"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/mvcc"
	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/schema"
)

// alarmBucket holds active alarms as etcd stores them: the key is a
// marshaled AlarmMember, the value empty.
var alarmBucket = schema.Alarm

// alarms is the replicated set of active alarms. Apply changes it; RPCs
// and the quota check read it.
type alarms struct {
	mu sync.RWMutex
	m  map[alarmKey]bool
	// gauge is etcd_debugging_server_alarms, kept as etcd keeps it: up by
	// one for every ACTIVATE applied (a write refused for the quota raises
	// NOSPACE again each time), down by one for every DEACTIVATE of an
	// active alarm, not restored at start. So it counts activations, not
	// active alarms, as etcd's does.
	gauge *prometheus.GaugeVec
}

type alarmKey struct {
	member uint64
	typ    pb.AlarmType
}

func newAlarms() *alarms {
	return &alarms{m: map[alarmKey]bool{}, gauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "etcd_debugging_server_alarms",
		Help: "Alarms for every member in cluster. 1 for 'server_id' label with current ID. 2 for 'alarm_type' label with type of this alarm"},
		[]string{"server_id", "alarm_type"})}
}

// counted moves etcd_debugging_server_alarms for an applied request.
func (a *alarms) counted(member uint64, typ pb.AlarmType, delta float64) {
	a.gauge.WithLabelValues(hexID(member), typ.String()).Add(delta)
}

// load restores the alarms from the page store.
func (a *alarms) load(db *pagestore.DB) error {
	return db.View(func(tx *pagestore.Tx) error {
		b, err := tx.Bucket(alarmBucket)
		if err != nil {
			return nil // no alarm ever raised
		}
		return b.ForEach(func(k, _ []byte) error {
			var am pb.AlarmMember
			if err := proto.Unmarshal(k, &am); err != nil {
				return err
			}
			a.m[alarmKey{am.MemberID, am.Alarm}] = true
			return nil
		})
	})
}

// active reports whether an alarm of type t is raised on any member.
func (a *alarms) active(t pb.AlarmType) bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	for k := range a.m {
		if k.typ == t {
			return true
		}
	}
	return false
}

func (a *alarms) list() []*pb.AlarmMember {
	a.mu.RLock()
	defer a.mu.RUnlock()
	out := make([]*pb.AlarmMember, 0, len(a.m))
	for k := range a.m {
		out = append(out, &pb.AlarmMember{MemberID: k.member, Alarm: k.typ})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].MemberID != out[j].MemberID {
			return out[i].MemberID < out[j].MemberID
		}
		return out[i].Alarm < out[j].Alarm
	})
	return out
}

func alarmKeyBytes(member uint64, t pb.AlarmType) []byte {
	b, _ := proto.Marshal(&pb.AlarmMember{MemberID: member, Alarm: t})
	return b
}

// apply applies an AlarmRequest at raft index ci.
func (a *alarms) apply(w *mvcc.WriteTx, r *pb.AlarmRequest) *pb.AlarmResponse {
	resp := &pb.AlarmResponse{}
	a.mu.Lock()
	defer a.mu.Unlock()
	switch r.Action {
	case pb.AlarmRequest_GET:
		for k := range a.m {
			resp.Alarms = append(resp.Alarms, &pb.AlarmMember{MemberID: k.member, Alarm: k.typ})
		}
	case pb.AlarmRequest_ACTIVATE:
		if r.Alarm == pb.AlarmType_NONE {
			break
		}
		k := alarmKey{r.MemberID, r.Alarm}
		if !a.m[k] {
			a.m[k] = true
			w.Put(alarmBucket, alarmKeyBytes(r.MemberID, r.Alarm), []byte{})
		}
		a.counted(r.MemberID, r.Alarm, 1)
		resp.Alarms = append(resp.Alarms, &pb.AlarmMember{MemberID: r.MemberID, Alarm: r.Alarm})
	case pb.AlarmRequest_DEACTIVATE:
		// As etcd: exactly the (member, type) named; no wildcards.
		// `etcdctl alarm disarm` lists the alarms and deactivates each.
		k := alarmKey{r.MemberID, r.Alarm}
		if a.m[k] {
			delete(a.m, k)
			w.Delete(alarmBucket, alarmKeyBytes(k.member, k.typ))
			a.counted(k.member, k.typ, -1)
			resp.Alarms = append(resp.Alarms, &pb.AlarmMember{MemberID: k.member, Alarm: k.typ})
		}
	}
	return resp
}

// Quota (etcd's backend quota, on bytes in use rather than file size):
// a write that would push the estimated bytes in use over the quota is
// refused with "etcdserver: mvcc: database space exceeded" and raises the
// NOSPACE alarm; while the alarm is active, writes are refused at the
// server and at apply, and reads and deletes keep working.

// kvOverhead is etcd's per-write cost allowance for keys and bookkeeping.
const kvOverhead = 256

func requestCost(req *pb.InternalRaftRequest) int {
	switch {
	case req.Put != nil:
		return kvOverhead + len(req.Put.Key) + len(req.Put.Value)
	case req.Txn != nil:
		return txnCost(req.Txn)
	case req.LeaseGrant != nil:
		return 64
	}
	return 0
}

func txnCost(t *pb.TxnRequest) int {
	cost := 0
	for _, branch := range [][]*pb.RequestOp{t.Success, t.Failure} {
		c := 0
		for _, op := range branch {
			switch {
			case op.GetRequestPut() != nil:
				c += kvOverhead + len(op.GetRequestPut().Key) + len(op.GetRequestPut().Value)
			case op.GetRequestTxn() != nil:
				c += txnCost(op.GetRequestTxn())
			}
		}
		cost = max(cost, c)
	}
	return cost
}

// checkQuota refuses a write that does not fit, raising NOSPACE.
func (s *Server) checkQuota(ctx context.Context, req *pb.InternalRaftRequest) error {
	cost := requestCost(req)
	if cost == 0 {
		return nil
	}
	if s.alarms.active(pb.AlarmType_CORRUPT) {
		return nil // apply refuses it, as corrupt
	}
	up := s.alarms.active(pb.AlarmType_NOSPACE)
	if up && s.diskFull.raisedFor(s.id) {
		// This member's full-disk alarm (diskfull.go) clears itself once
		// commits succeed again; an ordinary ACTIVATE would make it one
		// that only a disarm ends.
		return errNoSpace
	}
	q := s.quotaBytes()
	over := q > 0 && s.be.DB().InUseBytes()+s.be.PendingBytes()+int64(cost) >= q
	if !over {
		if !up {
			return nil
		}
		// Refused while the alarm is up. etcd's check is on its file's
		// size, which stays over the quota while its own quota alarm is
		// up (until a defragmentation), so there it raises the alarm
		// again; this check is on bytes in use, which the refusal left
		// under the quota. So a write refused while this member's own
		// quota alarm is up counts as one over the quota; under another
		// member's alarm it is refused and nothing more.
		if !s.alarms.activeFor(s.id, pb.AlarmType_NOSPACE) {
			return errNoSpace
		}
	}
	// As etcd's quota check: a write refused for the quota raises the
	// alarm through raft, again if it is up, and is answered once that is
	// applied; etcd_debugging_server_alarms counts each.
	if !up {
		s.lg.Warn("database space exceeded; raising the NOSPACE alarm", "quota-size-bytes", q)
	}
	s.propose(ctx, &pb.InternalRaftRequest{Alarm: &pb.AlarmRequest{
		Action: pb.AlarmRequest_ACTIVATE, MemberID: s.id, Alarm: pb.AlarmType_NOSPACE}})
	return errNoSpace
}

// cappedByAlarm reports whether apply must refuse req: NOSPACE refuses
// everything that adds data (etcd's capped applier).
func (s *Server) cappedByAlarm(req *pb.InternalRaftRequest) bool {
	return requestCost(req) > 0 && s.alarms.active(pb.AlarmType_NOSPACE)
}
