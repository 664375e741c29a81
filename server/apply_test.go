package server

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	dto "github.com/prometheus/client_model/go"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestProposerCopyApplied: a member applies the requests it proposed from
// the proposer's copy, not by decoding the entry it encoded, and the
// result is the same as for a decoded one (what a client reads back).
// Followers decode; the 3-member tests compare their hashes with the
// leader's.
func TestProposerCopyApplied(t *testing.T) {
	m := startMember(t, t.TempDir())
	defer m.stop(t)
	ctx := context.Background()
	const n = 100
	before := m.s.applier.decoded.Load()
	for i := 0; i < n; i++ {
		k := []byte(fmt.Sprintf("k%03d", i))
		if i%2 == 0 {
			if _, err := m.kv.Put(ctx, &pb.PutRequest{Key: k, Value: []byte{}}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if _, err := m.kv.Txn(ctx, &pb.TxnRequest{
			Compare: []*pb.Compare{{Key: k, Target: pb.Compare_VALUE, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Value{}}},
			Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: k, Value: []byte("then")}}}},
			Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: k, Value: []byte("else")}}}},
		}); err != nil {
			t.Fatal(err)
		}
	}
	decoded := m.s.applier.decoded.Load() - before
	t.Logf("%d requests, %d applied by decoding their entry", n, decoded)
	if decoded > n/10 {
		t.Fatalf("%d of %d requests this member proposed were decoded at apply; want them applied from the proposer's copy", decoded, n)
	}
	resp, err := m.kv.Range(ctx, &pb.RangeRequest{Key: []byte("k"), RangeEnd: []byte("l")})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != n {
		t.Fatalf("%d keys, want %d", len(resp.Kvs), n)
	}
	for i, kv := range resp.Kvs {
		// A missing key compares as not equal to an empty value (etcd's
		// rule), so every txn took its else branch.
		want := ""
		if i%2 == 1 {
			want = "else"
		}
		if string(kv.Value) != want {
			t.Fatalf("%s = %q, want %q", kv.Key, kv.Value, want)
		}
	}
}

// TestApplyGapLimit is etcd's overload rule (exceedsRequestLimit) with
// and without the PriorityRequest gate: a proposal is refused once apply
// is more than 5,000 entries behind commit, a lease revoke under the gate
// only past 10,000; and the refusal reaches a client as etcd's does.
func TestApplyGapLimit(t *testing.T) {
	put := &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("k")}}
	revoke := &pb.InternalRaftRequest{LeaseRevoke: &pb.LeaseRevokeRequest{ID: 1}}
	for _, c := range []struct {
		gap      uint64
		req      *pb.InternalRaftRequest
		priority bool
		want     bool
	}{
		{0, put, false, false},
		{5000, put, false, false},
		{5001, put, false, true},
		{5001, put, true, true},
		{5001, revoke, false, true},
		{5001, revoke, true, false},
		{10000, revoke, true, false},
		{10001, revoke, true, true},
	} {
		if got := overApplyGap(100, 100+c.gap, c.req, c.priority); got != c.want {
			t.Errorf("apply %d behind, %v, PriorityRequest=%v: refused %v, want %v", c.gap, c.req, c.priority, got, c.want)
		}
	}
	st := status.Convert(toGRPCError(errTooManyRequests))
	if st.Code() != codes.Unknown || st.Message() != "etcdserver: too many requests" {
		t.Errorf("too many requests reaches a client as %v %q", st.Code(), st.Message())
	}
}

// TestAlarmGaugeCountsActivations: etcd_debugging_server_alarms is etcd's
// gauge of alarm activations: every write refused for the quota raises
// NOSPACE again and counts, a disarm takes one off.
func TestAlarmGaugeCountsActivations(t *testing.T) {
	m := startMember(t, filepath.Join(t.TempDir(), "d"), "--quota-backend-bytes", "1048576")
	defer m.stop(t)
	ctx := context.Background()
	big := make([]byte, 256<<10)
	rand.NewChaCha8([32]byte{1}).Read(big)
	refused := 0
	for i := 0; refused < 16; i++ {
		if i > 64 {
			t.Fatalf("%d puts of 256 KiB under a 1 MiB quota, %d refused", i, refused)
		}
		_, err := m.kv.Put(ctx, &pb.PutRequest{Key: []byte(fmt.Sprint("k", i)), Value: big})
		if err != nil {
			wantErr(t, err, rpctypes.ErrGRPCNoSpace)
			refused++
		}
	}
	gauge := func() float64 {
		var d dto.Metric
		if err := m.s.alarms.gauge.WithLabelValues(hexID(m.s.id), pb.AlarmType_NOSPACE.String()).Write(&d); err != nil {
			t.Fatal(err)
		}
		return d.GetGauge().GetValue()
	}
	if g := gauge(); g != 16 {
		t.Fatalf("after 16 refused puts the gauge is %v, want 16 as etcd's", g)
	}
	if _, err := m.maint.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_DEACTIVATE, MemberID: m.s.id, Alarm: pb.AlarmType_NOSPACE}); err != nil {
		t.Fatal(err)
	}
	if g := gauge(); g != 15 {
		t.Fatalf("after the disarm the gauge is %v, want 15 as etcd's", g)
	}
}
