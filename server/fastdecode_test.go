package server

import (
	"math/rand/v2"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/internal/testseed"
)

// checkFastDecode decodes b with decodeFast and with proto.Unmarshal and
// fails unless they agree: when the fast path takes b, the message must
// equal protobuf's (nil bytes fields included) and protobuf must find no
// unknown field or error; when it refuses, the message must be untouched.
func checkFastDecode(t *testing.T, b []byte) {
	t.Helper()
	for _, mk := range []func() proto.Message{
		func() proto.Message { return new(pb.PutRequest) },
		func() proto.Message { return new(pb.RangeRequest) },
		func() proto.Message { return new(pb.TxnRequest) },
	} {
		fast, ref := mk(), mk()
		in := append([]byte(nil), b...)
		ok := decodeFast(in, fast)
		err := proto.Unmarshal(b, ref)
		if !ok {
			if !proto.Equal(fast, mk()) {
				t.Fatalf("%T %x: refused, but changed the message to %v", fast, b, fast)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%T %x: taken by the fast path, refused by protobuf: %v", fast, b, err)
		}
		if len(ref.ProtoReflect().GetUnknown()) > 0 {
			t.Fatalf("%T %x: taken by the fast path, but has unknown fields", fast, b)
		}
		if !proto.Equal(fast, ref) {
			t.Fatalf("%T %x: fast path %v, protobuf %v", fast, b, fast, ref)
		}
		var fk, fv, rk, rv []byte
		switch f := fast.(type) {
		case *pb.PutRequest:
			r := ref.(*pb.PutRequest)
			fk, fv, rk, rv = f.Key, f.Value, r.Key, r.Value
		case *pb.RangeRequest:
			r := ref.(*pb.RangeRequest)
			fk, fv, rk, rv = f.Key, f.RangeEnd, r.Key, r.RangeEnd
		}
		if (fk == nil) != (rk == nil) || (fv == nil) != (rv == nil) {
			t.Fatalf("%T %x: nil bytes fields differ: fast %v/%v, protobuf %v/%v", fast, b, fk == nil, fv == nil, rk == nil, rv == nil)
		}
		// The decoded fields are copies: the request buffer is reused.
		for i := range in {
			in[i] ^= 0xff
		}
		if !proto.Equal(fast, ref) {
			t.Fatalf("%T %x: the decoded message shares the input buffer", fast, b)
		}
	}
}

// randomRequest is the encoding of a random put or range request, often
// with fields repeated, out of order, with unexpected wire types, unknown
// fields, or cut short.
func randomRequest(r *rand.Rand) []byte {
	var b []byte
	for n := r.IntN(8); n > 0; n-- {
		num := protowire.Number(1 + r.IntN(15))
		switch r.IntN(10) {
		case 0: // a wire type the field may not have
			b = protowire.AppendTag(b, num, protowire.Type(r.IntN(6)))
			b = protowire.AppendVarint(b, r.Uint64N(300))
		case 1:
			b = protowire.AppendTag(b, num, protowire.Fixed64Type)
			b = protowire.AppendFixed64(b, r.Uint64())
		default:
			if num <= 2 {
				v := make([]byte, r.IntN(20))
				for i := range v {
					v[i] = byte(r.IntN(256))
				}
				b = protowire.AppendTag(b, num, protowire.BytesType)
				b = protowire.AppendBytes(b, v)
			} else {
				b = protowire.AppendTag(b, num, protowire.VarintType)
				v := r.Uint64()
				if r.IntN(2) == 0 {
					v = r.Uint64N(3)
				}
				b = protowire.AppendVarint(b, v)
			}
		}
	}
	switch r.IntN(8) {
	case 0:
		if len(b) > 0 {
			b = b[:r.IntN(len(b))]
		}
	case 1:
		if len(b) > 0 {
			b[r.IntN(len(b))] = byte(r.IntN(256))
		}
	}
	return b
}

func TestDecodeFastMatchesProtobuf(t *testing.T) {
	seed := testseed.Seed(t)
	r := rand.New(rand.NewPCG(seed, seed))
	// What clients send: etcd's own encodings of typical requests.
	for _, m := range []proto.Message{
		&pb.PutRequest{Key: []byte("foo"), Value: []byte("bar")},
		&pb.PutRequest{Key: []byte("k"), Value: make([]byte, 256), Lease: 0x7ff, PrevKv: true, IgnoreLease: true},
		&pb.PutRequest{Key: []byte("k"), IgnoreValue: true, Lease: -1},
		&pb.PutRequest{},
		&pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("b"), Limit: 500, Revision: 9, Serializable: true},
		&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, SortOrder: pb.RangeRequest_DESCEND,
			SortTarget: pb.RangeRequest_MOD, KeysOnly: true, CountOnly: true, MinModRevision: 1,
			MaxModRevision: 2, MinCreateRevision: 3, MaxCreateRevision: -4},
		&pb.RangeRequest{},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		checkFastDecode(t, b)
		// The fast path takes every canonical encoding.
		if !decodeFast(b, proto.Clone(m).ProtoReflect().Type().New().Interface()) {
			t.Fatalf("the fast path refused %T %v", m, m)
		}
	}
	taken := 0
	for i := 0; i < 200000; i++ {
		b := randomRequest(r)
		checkFastDecode(t, b)
		if decodeFast(b, new(pb.PutRequest)) {
			taken++
		}
	}
	t.Logf("the fast path took %d of 200000 random encodings as a put", taken)
	if taken < 10000 {
		t.Fatalf("the fast path took only %d random encodings; the generator is not exercising it", taken)
	}
}

// FuzzDecodeFast: for any bytes, the fast path agrees with protobuf or
// leaves the request to it.
func FuzzDecodeFast(f *testing.F) {
	for _, m := range []proto.Message{
		&pb.PutRequest{Key: []byte("foo"), Value: []byte("bar"), Lease: 5, PrevKv: true},
		&pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("b"), Limit: 500, SortOrder: pb.RangeRequest_DESCEND},
	} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add(randomPutTxn(rand.New(rand.NewPCG(1, 1))))
	f.Fuzz(func(t *testing.T, b []byte) {
		checkFastDecode(t, b)
	})
}

// randomPutTxn is the encoding of a random txn, mostly of puts (most of
// them canonical, the rest a randomRequest), sometimes with a compare or a failure op, an op holding
// its put twice or another request, an empty op, or cut short.
func randomPutTxn(r *rand.Rand) []byte {
	var b []byte
	for n := r.IntN(4); n > 0; n-- {
		put := randomRequest(r)
		if r.IntN(4) > 0 {
			p := &pb.PutRequest{Key: randomBytes(r), Value: randomBytes(r), Lease: int64(randomVarint(r)), PrevKv: r.IntN(2) == 0}
			put, _ = proto.Marshal(p)
		}
		var op []byte
		switch r.IntN(12) {
		case 0: // a range op
			op = protowire.AppendTag(op, 1, protowire.BytesType)
			op = protowire.AppendBytes(op, put)
		case 1: // the put twice
			op = protowire.AppendTag(op, 2, protowire.BytesType)
			op = protowire.AppendBytes(op, put)
			op = protowire.AppendTag(op, 2, protowire.BytesType)
			op = protowire.AppendBytes(op, randomRequest(r))
		case 2: // an empty op
		default:
			op = protowire.AppendTag(op, 2, protowire.BytesType)
			op = protowire.AppendBytes(op, put)
		}
		num := protowire.Number(2)
		switch r.IntN(12) {
		case 0:
			num = 1 // a compare
		case 1:
			num = 3 // a failure op
		}
		b = protowire.AppendTag(b, num, protowire.BytesType)
		b = protowire.AppendBytes(b, op)
	}
	if r.IntN(8) == 0 && len(b) > 0 {
		b = b[:r.IntN(len(b))]
	}
	return b
}

// TestDecodePutTxnMatchesProtobuf: a txn of puts decodes on the fast path
// as protobuf decodes it; any other txn is left to protobuf.
func TestDecodePutTxnMatchesProtobuf(t *testing.T) {
	seed := testseed.Seed(t)
	r := rand.New(rand.NewPCG(seed, seed))
	put := func(k, v string) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(k), Value: []byte(v)}}}
	}
	for _, c := range []struct {
		m    *pb.TxnRequest
		fast bool
	}{
		{&pb.TxnRequest{Success: []*pb.RequestOp{put("00000001", strings.Repeat("v", 256))}}, true}, // etcd's benchmark's txn-put
		{&pb.TxnRequest{Success: []*pb.RequestOp{put("a", ""), put("", "b"), {Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{}}}}}, true},
		{&pb.TxnRequest{}, true},
		{&pb.TxnRequest{Compare: []*pb.Compare{{Key: []byte("a")}}, Success: []*pb.RequestOp{put("a", "b")}}, false},
		{&pb.TxnRequest{Success: []*pb.RequestOp{put("a", "b")}, Failure: []*pb.RequestOp{put("a", "c")}}, false},
		{&pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("a")}}}}}, false},
	} {
		b, err := proto.Marshal(c.m)
		if err != nil {
			t.Fatal(err)
		}
		checkFastDecode(t, b)
		if got := decodeFast(b, new(pb.TxnRequest)); got != c.fast {
			t.Fatalf("the fast path took %v: %v, want %v", c.m, got, c.fast)
		}
	}
	taken := 0
	for i := 0; i < 20000; i++ {
		b := randomPutTxn(r)
		checkFastDecode(t, b)
		var m pb.TxnRequest
		if decodeFast(b, &m) && len(m.Success) > 0 {
			taken++
		}
	}
	t.Logf("the fast path took %d of 20000 random txns with puts", taken)
	if taken < 1000 {
		t.Fatalf("the fast path took only %d random txns; the generator is not exercising it", taken)
	}
}
