package server

import (
	"bytes"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/internal/testseed"
	"github.com/strata-db/strata/mvcc"
	"github.com/strata-db/strata/pagestore"
)

// checkPutProposal fails unless encodePutProposal gives proto.Marshal's
// bytes for a proposal of p with header h, and they decode back to it.
func checkPutProposal(t *testing.T, p *pb.PutRequest, h *pb.RequestHeader) {
	t.Helper()
	checkProposalEncoder(t, "encodePutProposal", encodePutProposal, &pb.InternalRaftRequest{Put: p, Header: h})
}

// checkProposalEncoder fails unless encode gives proto.Marshal's bytes
// for req, and they decode back to it.
func checkProposalEncoder(t *testing.T, name string, encode proposalEncoder, req *pb.InternalRaftRequest) {
	t.Helper()
	got, err := encode(req)
	if err != nil {
		t.Fatalf("%s(%v): %v", name, req, err)
	}
	want, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s(%v):\n got %x\nwant %x (proto.Marshal)", name, req, got, want)
	}
	var back pb.InternalRaftRequest
	if err := proto.Unmarshal(got, &back); err != nil || !proto.Equal(&back, req) {
		t.Fatalf("%s(%v) decodes to %v, %v", name, req, &back, err)
	}
}

func randomBytes(r *rand.Rand) []byte {
	switch r.IntN(4) {
	case 0:
		return nil
	case 1:
		return make([]byte, r.IntN(3)) // empty or short
	case 2:
		return bytes.Repeat([]byte{byte(r.Uint32())}, r.IntN(300)) // one- and two-byte lengths
	}
	return make([]byte, r.IntN(70000)) // three-byte lengths
}

func randomVarint(r *rand.Rand) uint64 {
	switch r.IntN(4) {
	case 0:
		return 0
	case 1:
		return uint64(r.IntN(300))
	case 2:
		return math.MaxUint64 - uint64(r.IntN(3)) // negative leases: ten bytes
	}
	return r.Uint64() >> r.IntN(64)
}

func TestPutProposalMatchesProtobuf(t *testing.T) {
	seed := testseed.Seed(t)
	r := rand.New(rand.NewPCG(seed, seed))
	checkPutProposal(t, &pb.PutRequest{Key: []byte("foo"), Value: []byte("bar")}, &pb.RequestHeader{ID: 7})
	checkPutProposal(t, &pb.PutRequest{}, nil)
	checkPutProposal(t, &pb.PutRequest{Key: []byte("k"), Lease: -1, PrevKv: true, IgnoreValue: true, IgnoreLease: true},
		&pb.RequestHeader{ID: math.MaxUint64, Username: "root", AuthRevision: 3})
	for i := 0; i < 20000; i++ {
		p := &pb.PutRequest{Key: randomBytes(r), Value: randomBytes(r), Lease: int64(randomVarint(r)),
			PrevKv: r.IntN(2) == 0, IgnoreValue: r.IntN(2) == 0, IgnoreLease: r.IntN(2) == 0}
		var h *pb.RequestHeader
		if r.IntN(8) > 0 {
			h = &pb.RequestHeader{ID: randomVarint(r), AuthRevision: randomVarint(r)}
			if r.IntN(2) == 0 {
				// A username is valid UTF-8: proto.Marshal refuses
				// anything else, and so did the decoding of the request
				// that created the user.
				h.Username = strings.Repeat("ü", len(randomBytes(r)))
			}
		}
		checkPutProposal(t, p, h)
	}
}

// A put that came with unknown fields keeps them in its entry, as
// proto.Marshal writes them.
func TestPutProposalKeepsUnknownFields(t *testing.T) {
	var p pb.PutRequest
	// key "k", then field 15 (unknown to PutRequest) holding varint 1.
	if err := proto.Unmarshal([]byte{0x0a, 0x01, 'k', 0x78, 0x01}, &p); err != nil {
		t.Fatal(err)
	}
	if len(p.ProtoReflect().GetUnknown()) == 0 {
		t.Fatal("the test's put has no unknown field")
	}
	checkPutProposal(t, &p, &pb.RequestHeader{ID: 1})
	got, _ := encodePutProposal(&pb.InternalRaftRequest{Put: &p})
	if !bytes.Contains(got, []byte{0x78, 0x01}) {
		t.Fatalf("the unknown field is not in the entry %x", got)
	}
}

// FuzzPutProposal: any put protobuf decodes, with any header, is encoded
// as proto.Marshal encodes it.
func FuzzPutProposal(f *testing.F) {
	f.Add([]byte{0x0a, 0x03, 'f', 'o', 'o', 0x12, 0x03, 'b', 'a', 'r'}, uint64(1), "", uint64(0))
	f.Add([]byte{0x0a, 0x01, 'k', 0x18, 0xff, 0x01, 0x20, 0x01}, uint64(math.MaxUint64), "root", uint64(9))
	f.Fuzz(func(t *testing.T, b []byte, id uint64, user string, authRev uint64) {
		var p pb.PutRequest
		if proto.Unmarshal(b, &p) != nil || !utf8.ValidString(user) {
			return
		}
		checkPutProposal(t, &p, &pb.RequestHeader{ID: id, Username: user, AuthRevision: authRev})
		checkPutProposal(t, &p, nil)
	})
}

// BenchmarkPutProposal compares the put's encoder with proto.Marshal on
// etcd's benchmark's put (8-byte key, 256-byte value).
func BenchmarkPutProposal(b *testing.B) {
	req := &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("00000001"), Value: make([]byte, 256)},
		Header: &pb.RequestHeader{ID: 0x1234567890abcdef}}
	for _, enc := range []struct {
		name string
		f    proposalEncoder
	}{{"encodePutProposal", encodePutProposal}, {"proto.Marshal", marshalProposal}} {
		b.Run(enc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := enc.f(req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// checkCodecMarshal fails unless the client API's codec gives
// proto.Marshal's bytes for m, and returns them.
func checkCodecMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	data, err := wireCodec{}.Marshal(m)
	if err != nil {
		t.Fatalf("wireCodec.Marshal(%v): %v", m, err)
	}
	got := data.Materialize()
	want, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("wireCodec.Marshal(%v):\n got %x\nwant %x (proto.Marshal)", m, got, want)
	}
	return got
}

// checkRangeResponse fails unless the client API's codec gives
// proto.Marshal's bytes for r, and they decode to r with kvs as its
// key-values.
func checkRangeResponse(t *testing.T, r *pb.RangeResponse, kvs []*mvccpb.KeyValue) {
	t.Helper()
	got := checkCodecMarshal(t, r)
	var back pb.RangeResponse
	if err := proto.Unmarshal(got, &back); err != nil {
		t.Fatalf("wireCodec.Marshal(%v) does not decode: %v", r, err)
	}
	wantResp := &pb.RangeResponse{Header: r.Header, More: r.More, Count: r.Count, Kvs: kvs}
	if !proto.Equal(&back, wantResp) {
		t.Fatalf("wireCodec.Marshal(%v) decodes to %v, want %v", r, &back, wantResp)
	}
	// The same response as a chunk of a RangeStream.
	got = checkCodecMarshal(t, &pb.RangeStreamResponse{RangeResponse: r})
	var chunk pb.RangeStreamResponse
	if err := proto.Unmarshal(got, &chunk); err != nil {
		t.Fatalf("wireCodec.Marshal of a stream chunk of %v does not decode: %v", r, err)
	}
	if !proto.Equal(chunk.RangeResponse, wantResp) {
		t.Fatalf("wireCodec.Marshal of a stream chunk of %v decodes to %v, want %v", r, chunk.RangeResponse, wantResp)
	}
	// The same chunk with its key-values in a pool's buffer, as
	// RangeStream sends it (wireRangeChunk): the same bytes, and the
	// buffer back in its pool once gRPC frees what it wrote.
	if u := r.ProtoReflect().GetUnknown(); len(u) > 0 {
		pool := &recordingPool{chunkPool: newChunkPool(max(2048, len(u)))}
		kvs := pool.Get(len(u))
		copy(*kvs, u)
		data, err := wireCodec{}.Marshal(&wireRangeChunk{resp: r, kvs: kvs, pool: pool})
		if err != nil {
			t.Fatal(err)
		}
		if b := data.Materialize(); !bytes.Equal(b, got) {
			t.Fatalf("wireCodec.Marshal of a pooled stream chunk of %v:\n got %x\nwant %x (proto.Marshal)", r, b, got)
		}
		data.Free()
		if len(pool.put) != 1 || pool.put[0] != kvs {
			t.Fatalf("a pooled stream chunk's buffer, once freed, went back to its pool %d times", len(pool.put))
		}
	}
}

// recordingPool is a chunkPool that keeps what is put back in it.
type recordingPool struct {
	*chunkPool
	put []*[]byte
}

func (p *recordingPool) Put(b *[]byte) {
	p.put = append(p.put, b)
	p.chunkPool.Put(b)
}

// TestRangeResponseMatchesProtobuf: a range response whose key-values are
// still encoded, as mvcc.Store.RangeEncoded and RangeChunk leave them in
// its unknown fields, goes out as its head and those bytes, alone or as
// a RangeStream's chunk: together what proto.Marshal writes, zero
// fields, a header's own unknown fields and ten-byte varints included,
// and a client decodes the key-values from it.
func TestRangeResponseMatchesProtobuf(t *testing.T) {
	seed := testseed.Seed(t)
	r := rand.New(rand.NewPCG(seed, seed))
	checkRangeResponse(t, &pb.RangeResponse{}, nil)
	checkRangeResponse(t, &pb.RangeResponse{Header: &pb.ResponseHeader{}}, nil)
	checkRangeResponse(t, &pb.RangeResponse{Header: &pb.ResponseHeader{ClusterId: math.MaxUint64, MemberId: 1, Revision: math.MaxInt64, RaftTerm: 2},
		More: true, Count: -1}, nil)
	for i := 0; i < 5000; i++ {
		resp := &pb.RangeResponse{More: r.IntN(2) == 0, Count: int64(randomVarint(r))}
		if r.IntN(8) > 0 {
			resp.Header = &pb.ResponseHeader{ClusterId: randomVarint(r), MemberId: randomVarint(r),
				Revision: int64(randomVarint(r)), RaftTerm: randomVarint(r)}
			if r.IntN(8) == 0 {
				// field 9, unknown to ResponseHeader, holding a varint.
				resp.Header.ProtoReflect().SetUnknown([]byte{0x48, byte(r.IntN(128))})
			}
		}
		var raw []byte
		var kvs []*mvccpb.KeyValue
		for range r.IntN(4) {
			kv := &mvccpb.KeyValue{Key: randomBytes(r), Value: randomBytes(r),
				CreateRevision: int64(randomVarint(r)), ModRevision: int64(randomVarint(r)), Version: int64(randomVarint(r)), Lease: int64(randomVarint(r))}
			b, err := proto.Marshal(kv)
			if err != nil {
				t.Fatal(err)
			}
			raw = protowire.AppendTag(raw, 2, protowire.BytesType)
			raw = protowire.AppendBytes(raw, b)
			kvs = append(kvs, kv)
		}
		resp.ProtoReflect().SetUnknown(raw)
		checkRangeResponse(t, resp, kvs)
	}
}

// TestPutResponseMatchesProtobuf: the codec's put response is the bytes
// proto.Marshal makes of it, with or without a header, a previous
// key-value (proto.Marshal's path) or unknown fields.
func TestPutResponseMatchesProtobuf(t *testing.T) {
	seed := testseed.Seed(t)
	r := rand.New(rand.NewPCG(seed, seed))
	for i := 0; i < 5000; i++ {
		resp := &pb.PutResponse{}
		if r.IntN(8) > 0 {
			resp.Header = &pb.ResponseHeader{ClusterId: randomVarint(r), MemberId: randomVarint(r),
				Revision: int64(randomVarint(r)), RaftTerm: randomVarint(r)}
			if r.IntN(8) == 0 {
				resp.Header.ProtoReflect().SetUnknown([]byte{0x48, byte(r.IntN(128))})
			}
		}
		if r.IntN(4) == 0 {
			resp.PrevKv = &mvccpb.KeyValue{Key: randomBytes(r), Value: randomBytes(r), ModRevision: int64(randomVarint(r))}
		}
		if r.IntN(8) == 0 {
			// field 15, unknown to PutResponse, holding a varint.
			resp.ProtoReflect().SetUnknown([]byte{0x78, byte(r.IntN(128))})
		}
		got := checkCodecMarshal(t, resp)
		var back pb.PutResponse
		if err := proto.Unmarshal(got, &back); err != nil || !proto.Equal(&back, resp) {
			t.Fatalf("wireCodec.Marshal(%v) decodes to %v, %v", resp, &back, err)
		}
	}
}

// TestRangeEncodedOnTheWire: a range served by the store's RangeEncoded
// and sent through the codec decodes to the key-values Range returns.
func TestRangeEncodedOnTheWire(t *testing.T) {
	db, err := pagestore.Open(filepath.Join(t.TempDir(), "db"), &pagestore.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	be, err := mvcc.NewBackend(db, mvcc.BackendConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	s, err := mvcc.OpenStore(be, mvcc.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// The second value is long enough to be kept compressed.
	for i, v := range []string{"a", strings.Repeat("b", 5000), ""} {
		if _, err := s.Put(uint64(i+1), 1, &pb.PutRequest{Key: []byte{'k', byte('0' + i)}, Value: []byte(v)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, req := range []*pb.RangeRequest{
		{Key: []byte("k"), RangeEnd: []byte("l")},
		{Key: []byte("k"), RangeEnd: []byte("l"), Limit: 2},
		{Key: []byte("k1")},
		{Key: []byte("none")},
		// A sort target with no order sorts ascending: by value here,
		// which is not the key order.
		{Key: []byte("k"), RangeEnd: []byte("l"), SortTarget: pb.RangeRequest_VALUE},
	} {
		want, err := s.Range(req)
		if err != nil {
			t.Fatal(err)
		}
		enc, err := s.RangeEncoded(req)
		if err != nil {
			t.Fatal(err)
		}
		data, err := wireCodec{}.Marshal(enc)
		if err != nil {
			t.Fatal(err)
		}
		var got pb.RangeResponse
		if err := (wireCodec{}).Unmarshal(data, &got); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&got, want) {
			t.Fatalf("range %q-%q limit %d: sent %v, Range returns %v", req.Key, req.RangeEnd, req.Limit, &got, want)
		}
	}
}

// BenchmarkResponseMarshal compares the codec's encoding of the two
// responses it encodes by hand with its encoding through proto.Marshal
// (marshalMessage): a 1-key range as RangeEncoded leaves it (etcd's
// benchmark's 8-byte key and 256-byte value, stored) and a put's.
func BenchmarkResponseMarshal(b *testing.B) {
	kv, err := proto.Marshal(&mvccpb.KeyValue{Key: []byte("00000001"), Value: make([]byte, 256), CreateRevision: 30001, ModRevision: 30001, Version: 1})
	if err != nil {
		b.Fatal(err)
	}
	raw := protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), kv)
	header := func() *pb.ResponseHeader {
		return &pb.ResponseHeader{ClusterId: 0x1c2d3e4f5a6b7c8d, MemberId: 0x8e9fa0b1c2d3e4f5, Revision: 30001, RaftTerm: 2}
	}
	for _, c := range []struct {
		name string
		resp func() any
	}{
		{"range", func() any {
			r := &pb.RangeResponse{Header: header(), Count: 1}
			r.ProtoReflect().SetUnknown(raw)
			return r
		}},
		{"put", func() any { return &pb.PutResponse{Header: header()} }},
	} {
		for _, enc := range []struct {
			name string
			f    func(any) (mem.BufferSlice, error)
		}{{"wireCodec", wireCodec{}.Marshal}, {"proto.Marshal", wireCodec{}.marshalMessage}} {
			b.Run(c.name+"/"+enc.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					data, err := enc.f(c.resp())
					if err != nil {
						b.Fatal(err)
					}
					data.Free()
				}
			})
		}
	}
}

// randomTxn is a random txn: mostly of puts, sometimes with a compare, a
// failure op, a range op or unknown fields, which the txn encoders leave
// to proto.Marshal.
func randomTxn(r *rand.Rand) *pb.TxnRequest {
	t := &pb.TxnRequest{}
	for n := r.IntN(4); n > 0; n-- {
		p := &pb.PutRequest{Key: randomBytes(r), Value: randomBytes(r), Lease: int64(randomVarint(r)),
			PrevKv: r.IntN(2) == 0, IgnoreValue: r.IntN(4) == 0, IgnoreLease: r.IntN(4) == 0}
		op := &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: p}}
		switch r.IntN(16) {
		case 0:
			op = &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: p.Key}}}
		case 1:
			p.ProtoReflect().SetUnknown([]byte{0x78, 0x01})
		case 2:
			op.ProtoReflect().SetUnknown([]byte{0x78, 0x02})
		}
		t.Success = append(t.Success, op)
	}
	switch r.IntN(16) {
	case 0:
		t.Compare = []*pb.Compare{{Key: []byte("k"), Target: pb.Compare_MOD}}
	case 1:
		t.Failure = []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("f")}}}}
	case 2:
		t.ProtoReflect().SetUnknown([]byte{0x78, 0x03})
	}
	return t
}

// TestTxnProposalMatchesProtobuf: encodeTxnProposal gives proto.Marshal's
// bytes for any txn (its own encoding for a txn of puts, proto.Marshal's
// for the rest), and they decode back to the proposal.
func TestTxnProposalMatchesProtobuf(t *testing.T) {
	seed := testseed.Seed(t)
	r := rand.New(rand.NewPCG(seed, seed))
	for i := 0; i < 5000; i++ {
		req := &pb.InternalRaftRequest{Txn: randomTxn(r)}
		if r.IntN(8) > 0 {
			req.Header = &pb.RequestHeader{ID: randomVarint(r), AuthRevision: randomVarint(r)}
			if r.IntN(2) == 0 {
				req.Header.Username = "root"
			}
		}
		checkProposalEncoder(t, "encodeTxnProposal", encodeTxnProposal, req)
	}
	if _, ok := putTxnSize(&pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("k")}}}}}); !ok {
		t.Fatal("a txn of one put is not taken by the txn encoder")
	}
}

// TestPutTxnResponseMatchesProtobuf: the codec writes proto.Marshal's
// bytes for any txn response, by hand for a txn of puts' answer.
func TestPutTxnResponseMatchesProtobuf(t *testing.T) {
	seed := testseed.Seed(t)
	r := rand.New(rand.NewPCG(seed, seed))
	header := func() *pb.ResponseHeader {
		if r.IntN(8) == 0 {
			return nil
		}
		h := &pb.ResponseHeader{ClusterId: randomVarint(r), MemberId: randomVarint(r),
			Revision: int64(randomVarint(r)), RaftTerm: randomVarint(r)}
		if r.IntN(8) == 0 {
			h.ProtoReflect().SetUnknown([]byte{0x48, byte(r.IntN(128))})
		}
		return h
	}
	byHand := 0
	for i := 0; i < 5000; i++ {
		resp := &pb.TxnResponse{Header: header(), Succeeded: r.IntN(4) > 0}
		for n := r.IntN(5); n > 0; n-- {
			p := &pb.PutResponse{Header: header()}
			op := &pb.ResponseOp{Response: &pb.ResponseOp_ResponsePut{ResponsePut: p}}
			switch r.IntN(16) {
			case 0:
				p.PrevKv = &mvccpb.KeyValue{Key: randomBytes(r), ModRevision: 3}
			case 1:
				op = &pb.ResponseOp{Response: &pb.ResponseOp_ResponseRange{ResponseRange: &pb.RangeResponse{Count: 2}}}
			case 2:
				op.ProtoReflect().SetUnknown([]byte{0x78, 0x01})
			case 3:
				p.ProtoReflect().SetUnknown([]byte{0x78, 0x02})
			}
			resp.Responses = append(resp.Responses, op)
		}
		if r.IntN(16) == 0 {
			resp.ProtoReflect().SetUnknown([]byte{0x78, 0x03})
		}
		if _, ok := putTxnResponseSize(resp); ok {
			byHand++
		}
		checkCodecMarshal(t, resp)
	}
	if byHand < 1000 {
		t.Fatalf("only %d of 5000 responses were encoded by hand; the generator is not exercising it", byHand)
	}
}
