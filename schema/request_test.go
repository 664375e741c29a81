package schema

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRequestID: the id read from an entry's bytes without decoding
// (PeekRequestID) is the one a decoded request gives (RequestID), for every encoding that decodes,
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
		id, ok := PeekRequestID(b)
		if !ok || id != RequestID(&r) {
			t.Fatalf("%s: PeekRequestID = %d, %v; decoding gives %d", name, id, ok, RequestID(&r))
		}
		return true
	}
	for name, b := range cases {
		if !check(name, b) {
			t.Fatalf("%s: the case does not decode", name)
		}
	}
	seed := uint64(rand.Int64())
	if s := os.Getenv("STRATA_SCHEMA_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (replay with STRATA_SCHEMA_SEED)", seed)
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
