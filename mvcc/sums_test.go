package mvcc

import (
	"bytes"
	"hash/crc32"
	"math/rand"
	"slices"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/strata-db/strata/btreeidx"
)

// TestCRCCombine checks crcCombine, and powCache's use of it, against
// crc32 over the concatenation, for random messages split at random
// points (empty parts included).
func TestCRCCombine(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewSource(seed))
	var pow powCache
	for i := 0; i < 2000; i++ {
		msg := make([]byte, rng.Intn(1<<uint(rng.Intn(17))))
		rng.Read(msg)
		want := crc32.Checksum(msg, castagnoli)
		// Fold the message in random pieces, as a compaction folds
		// records.
		acc := crc32.Checksum(nil, castagnoli)
		for rest := msg; ; {
			n := 0
			if len(rest) > 0 {
				n = rng.Intn(len(rest) + 1)
			}
			part := rest[:n]
			if i%2 == 0 {
				acc = crcCombine(acc, crc32.Checksum(part, castagnoli), uint32(len(part)))
			} else {
				acc = pow.combine(acc, crc32.Checksum(part, castagnoli), uint32(len(part)))
			}
			rest = rest[n:]
			if len(rest) == 0 && (n > 0 || rng.Intn(2) == 0) {
				break
			}
		}
		if acc != want {
			t.Fatalf("message %d (%d bytes): folded CRC %08x, crc32 %08x", i, len(msg), acc, want)
		}
	}
}

// TestRecordSumsCompact checks recordSums.compact against revHasher fed
// the records themselves, as a compaction that read them would: random
// records (tombstones among them, at the compact revisions too), random
// garbage at or below the revision (sometimes all of it, when etcd's hash
// counts every record), and the sums left afterwards.
func TestRecordSumsCompact(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewSource(seed))
	for round := 0; round < 500; round++ {
		type rec struct {
			r    Revision
			tomb bool
			k, v []byte
		}
		var recs []rec
		var rs recordSums
		main := int64(1)
		for i := rng.Intn(60); i >= 0; i-- {
			main += int64(1 + rng.Intn(2))
			for sub := int64(0); sub <= int64(rng.Intn(3)); sub++ {
				r := Revision{Main: main, Sub: sub}
				tomb := rng.Intn(4) == 0
				v := make([]byte, rng.Intn(40))
				rng.Read(v)
				recs = append(recs, rec{r, tomb, revKey(r, tomb), v})
				rs.add(r, tomb, v)
			}
		}
		rev := 1 + rng.Int63n(main+1)
		prev := rng.Int63n(rev)
		if rng.Intn(3) == 0 {
			// A compact revision on a tombstone, if there is one.
			for _, x := range recs {
				if x.tomb && x.r.Main < rev {
					prev = x.r.Main
					break
				}
			}
		}
		all := rng.Intn(5) == 0
		keep := map[Revision]struct{}{}
		var garbage []btreeidx.Garbage
		for _, x := range recs {
			if x.r.Main > rev {
				continue
			}
			if all || rng.Intn(2) == 0 {
				garbage = append(garbage, btreeidx.Garbage{Rev: x.r, Tombstone: x.tomb})
			} else {
				keep[x.r] = struct{}{}
			}
		}
		h := newRevHasher(prev, rev, keep)
		var wantLeft []Revision
		for _, x := range recs {
			h.add(x.r, x.tomb, x.k, x.v)
			if _, ok := keep[x.r]; ok || x.r.Main > rev {
				wantLeft = append(wantLeft, x.r)
			}
		}
		want := h.sum()
		got := rs.compact(prev, rev, garbage)
		if got != want {
			t.Fatalf("round %d: %d records, compaction at %d after %d, %d garbage: sums give %+v, the records %+v",
				round, len(recs), rev, prev, len(garbage), got, want)
		}
		var left []Revision
		for _, s := range rs.list {
			left = append(left, s.rev())
		}
		if !slices.Equal(left, wantLeft) {
			t.Fatalf("round %d: sums left %v, want %v", round, left, wantLeft)
		}
	}
}

// BenchmarkRecordSumsCompact: a compaction's hash and splice over a
// million records (values of a few shapes), a thousand of them garbage.
func BenchmarkRecordSumsCompact(b *testing.B) {
	const n = 1_000_000
	base := make([]recordSum, n)
	for i := range base {
		base[i] = recordSum{main: int64(i + 2), crc: uint32(i * 2654435761), n: uint32(200 + i%7*1000)}
	}
	var garbage []btreeidx.Garbage
	for i := 0; i < n; i += n / 1000 {
		garbage = append(garbage, btreeidx.Garbage{Rev: base[i].rev()})
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var rs recordSums
		rs.list = append([]recordSum(nil), base...)
		rs.compact(1, n+1, garbage)
	}
}

// TestDecodeKVMeta checks the restore's record decoder against protobuf's
// on random records, and that it refuses what protobuf refuses.
func TestDecodeKVMeta(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewSource(seed))
	for i := 0; i < 5000; i++ {
		kv := &mvccpb.KeyValue{Key: make([]byte, 1+rng.Intn(40)), CreateRevision: rng.Int63n(1 << uint(rng.Intn(63))),
			ModRevision: rng.Int63(), Version: rng.Int63n(1000), Lease: rng.Int63n(1 << uint(rng.Intn(63)))}
		rng.Read(kv.Key)
		if rng.Intn(2) == 0 {
			kv.Value = make([]byte, rng.Intn(300))
			rng.Read(kv.Value)
		}
		b := encodeKV(kv)
		if i%3 == 0 {
			b = b[:rng.Intn(len(b)+1)] // truncated
		}
		var want mvccpb.KeyValue
		wantErr := decodeKV(b, &want)
		got, err := decodeKVMeta(b)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("record %x: decodeKVMeta error %v, protobuf's %v", b, err, wantErr)
		}
		if err == nil && (!bytes.Equal(got.key, want.Key) || got.create != want.CreateRevision || got.version != want.Version || got.lease != want.Lease) {
			t.Fatalf("record %x: decodeKVMeta %+v, protobuf %+v", b, got, &want)
		}
	}
}
