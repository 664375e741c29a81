package mvcc

import (
	"bytes"
	"fmt"
	"math/rand"
	"path/filepath"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/btreeidx"
)

// decodeChunk is what a client reads of a RangeChunk response.
func decodeChunk(t *testing.T, resp *pb.RangeResponse) *pb.RangeResponse {
	t.Helper()
	b, err := proto.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	out := &pb.RangeResponse{}
	if err := proto.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRangeChunkMatchesRange walks random ranges chunk by chunk, as a
// RangeStream does, and checks that the chunks put together are the
// unary Range's answer at the same revision, that each chunk's count and
// more are those of a read that stops one key past its limit, and that no
// chunk's key-values pass the byte bound unless it holds one.
func TestRangeChunkMatchesRange(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewSource(seed))
	leases := fakeLeases{7: {}}
	ts := openTestStore(t, filepath.Join(t.TempDir(), "db"), StoreConfig{Leases: leases})
	defer ts.close()
	s := ts.s
	ci := uint64(0)
	for i := 0; i < 2000; i++ {
		ci++
		k := []byte(fmt.Sprintf("k%03d", rng.Intn(300)))
		var err error
		switch rng.Intn(6) {
		case 0:
			_, err = s.DeleteRange(ci, 2, &pb.DeleteRangeRequest{Key: k})
		default:
			lease := int64(0)
			if rng.Intn(4) == 0 {
				lease = 7
			}
			_, err = s.Put(ci, 2, &pb.PutRequest{Key: k, Value: make([]byte, rng.Intn(600)), Lease: lease})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	cur := s.Rev()
	ci++
	_, done, err := s.Compact(ci, 2, &pb.CompactionRequest{Revision: cur / 2})
	if err != nil {
		t.Fatal(err)
	}
	<-done
	for c := 0; c < 400; c++ {
		r := &pb.RangeRequest{Key: []byte(fmt.Sprintf("k%03d", rng.Intn(300)))}
		switch rng.Intn(4) {
		case 0:
		case 1:
			r.RangeEnd = []byte{0}
		default:
			r.RangeEnd = []byte(fmt.Sprintf("k%03d", rng.Intn(300)))
		}
		if rng.Intn(2) == 0 {
			r.Revision = cur/2 + rng.Int63n(cur-cur/2+1)
		}
		r.KeysOnly = rng.Intn(3) == 0
		if rng.Intn(4) == 0 {
			r.SortTarget = pb.RangeRequest_SortTarget(1 + rng.Intn(4))
		}
		total := int64(rng.Intn(3) * rng.Intn(100))
		maxBytes := []int{0, 1, 2000, 20000}[rng.Intn(4)]
		want, err := s.Range(&pb.RangeRequest{Key: r.Key, RangeEnd: r.RangeEnd, Revision: r.Revision, KeysOnly: r.KeysOnly, Limit: total})
		if err != nil {
			t.Fatal(err)
		}
		var got []*mvccpb.KeyValue
		q := proto.Clone(r).(*pb.RangeRequest)
		// One reader for the stream's chunks, as a stream keeps one:
		// what a chunk left in its buffers must not reach the next.
		cr := new(ChunkReader)
		for {
			q.Limit = 1 + int64(rng.Intn(40))
			if total > 0 {
				q.Limit = min(q.Limit, total-int64(len(got)))
			}
			// Half the chunks are encoded into buffers handed out dirty,
			// as a pool hands them out: each must be filled, and used
			// as the chunk's key-values.
			var handed []byte
			var alloc func(int) []byte
			if rng.Intn(2) == 0 {
				alloc = func(n int) []byte {
					handed = bytes.Repeat([]byte{0xa5}, n+rng.Intn(16))
					return handed[:0]
				}
			}
			cr.Alloc = alloc
			c, err := s.RangeChunk(q, maxBytes, cr)
			if err != nil {
				t.Fatalf("seed %d: chunk %v: %v", seed, q, err)
			}
			if c.Pooled != (handed != nil) {
				t.Fatalf("seed %d: chunk %v: Pooled %v, alloc called: %v", seed, q, c.Pooled, handed != nil)
			}
			if alloc != nil && q.SortTarget == pb.RangeRequest_KEY && c.Len > 0 && !c.Pooled {
				t.Fatalf("seed %d: chunk %v: encoded without the alloc it was given", seed, q)
			}
			if u := c.Resp.ProtoReflect().GetUnknown(); c.Pooled && (len(u) == 0 || &u[0] != &handed[0]) {
				t.Fatalf("seed %d: chunk %v: the key-values are not in the buffer alloc returned", seed, q)
			}
			out, last := decodeChunk(t, c.Resp), c.Last
			if c.Len != len(out.Kvs) {
				t.Fatalf("seed %d: chunk %v: Len %d, %d key-values", seed, q, c.Len, len(out.Kvs))
			}
			// The read stops one key past the limit.
			at := q.Revision
			if at == 0 {
				at = cur
			}
			all, _ := s.index().Keys(q.Key, rangeEnd(q.RangeEnd), at, 0, false, nil)
			wantFound := min(int64(len(all)), q.Limit+1)
			if out.Count != wantFound {
				t.Fatalf("seed %d: chunk %v: count %d, want %d", seed, q, out.Count, wantFound)
			}
			if len(out.Kvs) > 1 && maxBytes > 0 {
				size := 0
				for _, kv := range out.Kvs {
					size += proto.Size(&pb.RangeResponse{Kvs: []*mvccpb.KeyValue{kv}})
				}
				if size > maxBytes {
					t.Fatalf("seed %d: chunk %v: %d key-values of %d bytes, bound %d", seed, q, len(out.Kvs), size, maxBytes)
				}
			}
			if out.More != (int64(len(out.Kvs)) < wantFound) {
				t.Fatalf("seed %d: chunk %v: more %v with %d of %d found", seed, q, out.More, len(out.Kvs), wantFound)
			}
			got = append(got, out.Kvs...)
			if !out.More || total > 0 && int64(len(got)) == total {
				break
			}
			if len(out.Kvs) > 0 && string(last) != string(out.Kvs[len(out.Kvs)-1].Key) {
				t.Fatalf("seed %d: last %q, chunk ends at %q", seed, last, out.Kvs[len(out.Kvs)-1].Key)
			}
			q.Key = append(last, 0)
			q.Revision = at
		}
		if r.SortTarget != pb.RangeRequest_KEY {
			// Sorted within each chunk: the same key-values, in another
			// order (and, for a value sort, chunks that may skip keys,
			// as etcd's do), so only the sorted-by-key case is compared.
			continue
		}
		if len(got) != len(want.Kvs) {
			t.Fatalf("seed %d: %v in chunks: %d key-values, Range %d", seed, r, len(got), len(want.Kvs))
		}
		for i := range got {
			if !proto.Equal(got[i], want.Kvs[i]) {
				t.Fatalf("seed %d: %v in chunks: [%d] %v, Range %v", seed, r, i, got[i], want.Kvs[i])
			}
		}
	}
}

// TestAppendIndexKVMatchesProtobuf checks the keys-only encoding against
// proto.Marshal of the same KeyValue.
func TestAppendIndexKVMatchesProtobuf(t *testing.T) {
	rng := rand.New(rand.NewSource(testSeed(t)))
	for i := 0; i < 1000; i++ {
		k := btreeidx.KeyAt{Key: make([]byte, rng.Intn(300)), Created: btreeidx.Revision{Main: rng.Int63n(1 << uint(rng.Intn(63)))},
			Modified: btreeidx.Revision{Main: rng.Int63n(1 << uint(rng.Intn(63)))}, Version: rng.Int63n(1 << uint(rng.Intn(40)))}
		rng.Read(k.Key)
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(&mvccpb.KeyValue{Key: k.Key, CreateRevision: k.Created.Main, ModRevision: k.Modified.Main, Version: k.Version})
		if err != nil {
			t.Fatal(err)
		}
		if got := appendIndexKV(nil, k); string(got) != string(want) {
			t.Fatalf("%+v: %x, proto.Marshal %x", k, got, want)
		}
	}
}

// TestRangeChunkCompacted: a chunk at a revision a compaction has passed
// fails as any read there does.
func TestRangeChunkCompacted(t *testing.T) {
	ts := openTestStore(t, filepath.Join(t.TempDir(), "db"), StoreConfig{})
	defer ts.close()
	s := ts.s
	for i := uint64(1); i <= 10; i++ {
		if _, err := s.Put(i, 2, &pb.PutRequest{Key: []byte(fmt.Sprint("k", i)), Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	_, done, err := s.Compact(11, 2, &pb.CompactionRequest{Revision: 5})
	if err != nil {
		t.Fatal(err)
	}
	<-done
	for rev, want := range map[int64]error{4: ErrCompacted, 5: nil, 11: nil, 12: ErrFutureRev} {
		_, err := s.RangeChunk(&pb.RangeRequest{Key: []byte("k"), RangeEnd: []byte("l"), Revision: rev, Limit: 2}, 0, nil)
		if err != want {
			t.Fatalf("revision %d: %v, want %v", rev, err, want)
		}
	}
}
