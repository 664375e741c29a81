package server

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// decodedID is the id applyNormal takes from a decoded request.
func decodedID(r *pb.InternalRaftRequest) uint64 {
	if id := r.GetHeader().GetID(); id != 0 {
		return id
	}
	return r.ID
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRequestID: the id read from an entry's bytes without decoding is
// the one a decoded request gives, for every encoding that decodes,
// including repeated and merged headers and random corruptions.
func TestRequestID(t *testing.T) {
	put := &pb.PutRequest{Key: []byte("k"), Value: make([]byte, 300)}
	headerField := func(h *pb.RequestHeader) []byte {
		b := protowire.AppendTag(nil, 100, protowire.BytesType)
		return protowire.AppendBytes(b, mustMarshal(t, h))
	}
	explicitZero := protowire.AppendTag(nil, 100, protowire.BytesType)
	explicitZero = protowire.AppendBytes(explicitZero, protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 0))
	cases := map[string][]byte{
		"header":         mustMarshal(t, &pb.InternalRaftRequest{Header: &pb.RequestHeader{ID: 0x1234_5678_9abc}, Put: put}),
		"legacy only":    mustMarshal(t, &pb.InternalRaftRequest{ID: 77, Put: put}),
		"both":           mustMarshal(t, &pb.InternalRaftRequest{ID: 77, Header: &pb.RequestHeader{ID: 88, Username: "u"}, Txn: &pb.TxnRequest{}}),
		"header without": mustMarshal(t, &pb.InternalRaftRequest{ID: 77, Header: &pb.RequestHeader{Username: "u"}}),
		"explicit zero":  append(mustMarshal(t, &pb.InternalRaftRequest{ID: 5}), explicitZero...),
		"merged headers": append(append(mustMarshal(t, &pb.InternalRaftRequest{Put: put}),
			headerField(&pb.RequestHeader{ID: 9})...), headerField(&pb.RequestHeader{Username: "u"})...),
		"last id wins": append(append(mustMarshal(t, &pb.InternalRaftRequest{ID: 3}),
			headerField(&pb.RequestHeader{ID: 9})...), headerField(&pb.RequestHeader{ID: 11})...),
		"empty": nil,
	}
	check := func(name string, b []byte) bool {
		var r pb.InternalRaftRequest
		if proto.Unmarshal(b, &r) != nil {
			return false
		}
		id, ok := requestID(b)
		if !ok || id != decodedID(&r) {
			t.Fatalf("%s: requestID = %d, %v; decoding gives %d", name, id, ok, decodedID(&r))
		}
		return true
	}
	for name, b := range cases {
		if !check(name, b) {
			t.Fatalf("%s: the case does not decode", name)
		}
	}
	seed := uint64(rand.Int64())
	if s := os.Getenv("STRATA_SERVER_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (replay with STRATA_SERVER_SEED)", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	bases := make([][]byte, 0, len(cases))
	for _, b := range cases {
		bases = append(bases, b)
	}
	decoded := 0
	for i := 0; i < 20000; i++ {
		b := append([]byte(nil), bases[rng.IntN(len(bases))]...)
		switch {
		case len(b) > 0 && rng.IntN(2) == 0:
			b = b[:rng.IntN(len(b))]
		case len(b) > 0:
			for j := rng.IntN(3); j >= 0; j-- {
				b[rng.IntN(len(b))] = byte(rng.Uint32())
			}
		}
		if check(fmt.Sprintf("mutation %d", i), b) {
			decoded++
		}
	}
	t.Logf("%d of 20000 mutations decoded and agreed", decoded)
}

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
