package server

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/internal/testseed"
)

// checkPutProposal fails unless encodePutProposal gives proto.Marshal's
// bytes for a proposal of p with header h, and they decode back to it.
func checkPutProposal(t *testing.T, p *pb.PutRequest, h *pb.RequestHeader) {
	t.Helper()
	req := &pb.InternalRaftRequest{Put: p, Header: h}
	got, err := encodePutProposal(req)
	if err != nil {
		t.Fatalf("encodePutProposal(%v): %v", req, err)
	}
	want, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("encodePutProposal(%v):\n got %x\nwant %x (proto.Marshal)", req, got, want)
	}
	var back pb.InternalRaftRequest
	if err := proto.Unmarshal(got, &back); err != nil || !proto.Equal(&back, req) {
		t.Fatalf("encodePutProposal(%v) decodes to %v, %v", req, &back, err)
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
