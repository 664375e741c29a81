package mvcc

import (
	"hash/crc32"
	"sort"
	"sync"

	"github.com/strata-db/strata/btreeidx"
)

// etcd's compaction hash is a CRC-32C over the key bucket's records at
// or below the compaction's revision, in revision order (hash.go's
// revHasher decides which records count). Reading those records means
// reading every live value below the revision, so a compaction that read
// them would cost what the store keeps, not what it removes. Instead the
// store keeps, for every record of the key bucket, the CRC of its bytes
// and their length (recordSums), and a compaction combines those: a CRC
// is linear, so the CRC of a concatenation follows from the CRCs and
// lengths of its parts (crcCombine). The hash then costs one polynomial
// multiplication per record at or below the revision, in memory, and
// reads no value (BenchmarkRecordSumsCompact).
//
// The sums are built from the records when the store opens (restore reads
// every record then anyway) and added by every write, in the same apply
// as the record; a compaction removes its garbage's sums when it computes
// its hash. So at the start of each compaction the sums at or below its
// revision are exactly the records the page store holds there: the
// previous compaction has finished (compactions run one at a time), and
// after a crash both are rebuilt from the page store.

// recordSum is one key-bucket record's revision and the CRC-32C and
// length of its key and value bytes, as the hash reads them.
type recordSum struct {
	main int64
	sub  uint32 // the revision's sub, with sumTombstone for a tombstone
	crc  uint32
	n    uint32
}

const sumTombstone = 1 << 31

func (r recordSum) rev() Revision { return Revision{Main: r.main, Sub: int64(r.sub &^ sumTombstone)} }

func (r recordSum) tombstone() bool { return r.sub&sumTombstone != 0 }

// recordSums holds every key-bucket record's sum, ascending by revision.
// The apply goroutine appends; the compactor reads the entries at or
// below its revision (which appends never touch) without the lock and
// takes it only to splice its result in.
type recordSums struct {
	mu   sync.Mutex
	list []recordSum
	kbuf []byte // apply goroutine's scratch key
}

// add records and returns the sum of a record written at r: its key
// bytes and value v, as the key bucket stores them. Revisions ascend.
func (rs *recordSums) add(r Revision, tomb bool, v []byte) recordSum {
	rs.kbuf = appendRevKey(rs.kbuf[:0], r, tomb)
	sum := makeRecordSum(r, tomb, rs.kbuf, v)
	rs.mu.Lock()
	rs.list = append(rs.list, sum)
	rs.mu.Unlock()
	return sum
}

func makeRecordSum(r Revision, tomb bool, k, v []byte) recordSum {
	sub := uint32(r.Sub)
	if tomb {
		sub |= sumTombstone
	}
	crc := crc32.Update(crc32.Checksum(k, castagnoli), castagnoli, v)
	return recordSum{main: r.Main, sub: sub, crc: crc, n: uint32(len(k) + len(v))}
}

// reset replaces the sums (the store's restore builds them afresh).
func (rs *recordSums) reset(list []recordSum) {
	rs.mu.Lock()
	rs.list = list
	rs.mu.Unlock()
}

// compact computes etcd's compaction hash at rev (the compact revision
// before it prev) from the sums, removes the sums of garbage (the
// records the compaction deletes, ascending by revision) and returns the
// hash. The records it hashes are revHasher's: those at or below rev,
// except the ones at or below prev that the compaction deletes (all of
// them count when it keeps none) and a tombstone at exactly prev.
func (rs *recordSums) compact(prev, rev int64, garbage []btreeidx.Garbage) KeyValueHash {
	rs.mu.Lock()
	list := rs.list
	rs.mu.Unlock()
	m := sort.Search(len(list), func(i int) bool { return list[i].main > rev })
	keepNone := len(garbage) == m
	acc := crc32.Checksum(KeyBucket, castagnoli)
	var pow powCache
	kept := make([]recordSum, 0, m-min(len(garbage), m))
	g := 0
	for _, r := range list[:m] {
		rr := r.rev()
		for g < len(garbage) && garbage[g].Rev.Compare(rr) < 0 {
			g++ // not a record: nothing to match (the index and the sums agree)
		}
		isGarbage := g < len(garbage) && garbage[g].Rev == rr
		if isGarbage {
			g++
		} else {
			kept = append(kept, r)
		}
		if r.main <= prev && isGarbage && !keepNone {
			continue
		}
		if r.main == prev && r.tombstone() {
			continue
		}
		acc = pow.combine(acc, r.crc, r.n)
	}
	rs.mu.Lock()
	// Entries past m were appended since list was read; they are all
	// above rev.
	rs.list = append(kept, rs.list[m:]...)
	rs.mu.Unlock()
	return KeyValueHash{Hash: acc, CompactRevision: prev, Revision: rev}
}

// CRC-32C arithmetic: polynomials over GF(2) modulo the Castagnoli
// polynomial, in the reflected bit order crc32 uses (bit 31 is x^0).

const castagnoliReflected = 0x82f63b78

// mulModP returns a(x)·b(x) mod P(x).
func mulModP(a, b uint32) uint32 {
	var p uint32
	for m := uint32(1) << 31; m != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
			if a&(m-1) == 0 {
				break
			}
		}
		if b&1 != 0 {
			b = b>>1 ^ castagnoliReflected
		} else {
			b >>= 1
		}
	}
	return p
}

// x2kModP[k] is x^(2^k) mod P(x).
var x2kModP = func() (t [32]uint32) {
	p := uint32(1) << 30 // x^1
	for k := range t {
		t[k] = p
		p = mulModP(p, p)
	}
	return t
}()

// xPow8nModP returns x^(8n) mod P(x): the factor that shifts a CRC past
// n bytes.
func xPow8nModP(n uint32) uint32 {
	p := uint32(1) << 31 // x^0
	for k := 3; n != 0; n, k = n>>1, k+1 {
		if n&1 != 0 {
			p = mulModP(x2kModP[k&31], p)
		}
	}
	return p
}

// crcCombine returns the CRC-32C of A‖B from crcA = CRC(A), crcB = CRC(B)
// and n = len(B). The CRC's initial and final inversions cancel out of
// the combination, so this holds for crc32's checksums as they are.
func crcCombine(crcA, crcB, n uint32) uint32 {
	return mulModP(xPow8nModP(n), crcA) ^ crcB
}

// powCache remembers x^(8n) mod P for the lengths one hash meets: records
// of a store share a few lengths (tombstones, values of one shape), so
// most combinations cost one multiplication.
type powCache map[uint32]uint32

func (c *powCache) combine(crcA, crcB, n uint32) uint32 {
	if *c == nil {
		*c = map[uint32]uint32{}
	}
	p, ok := (*c)[n]
	if !ok {
		p = xPow8nModP(n)
		if len(*c) < 1<<16 {
			(*c)[n] = p
		}
	}
	return mulModP(p, crcA) ^ crcB
}
