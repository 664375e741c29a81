package server

import (
	"context"
	"fmt"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
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
