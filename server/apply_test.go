package server

import (
	"context"
	"fmt"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
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
