package mvcc

import (
	"hash/crc32"
	"slices"
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
// The sums come from the revision metadata (revmeta.go) when the store
// opens: with the rest of it when the store reads it all, or, when the
// store opens on an index base (indexbase.go) and reads only what was
// written after the base, from a background read of the rest (loadSums)
// that compactions wait for, so that opening does not wait for it. Every
// write adds its records' sums in the same apply as the records; a
// compaction removes its garbage's sums when it computes its hash. So at
// the start of each compaction the sums at or below its revision are
// exactly the records the page store holds there: the previous
// compaction has finished (compactions run one at a time), and after a
// crash both are read again from the page store.

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

// sumChunks collects sums read in revision order in chunks, joined once
// at the end: growing one slice to millions of entries would copy it
// over and over.
type sumChunks struct {
	done [][]recordSum
	cur  []recordSum
}

func (c *sumChunks) add(r recordSum) {
	if len(c.cur) == cap(c.cur) {
		if c.cur != nil {
			c.done = append(c.done, c.cur)
		}
		c.cur = make([]recordSum, 0, 1<<16)
	}
	c.cur = append(c.cur, r)
}

func (c *sumChunks) all() []recordSum { return slices.Concat(append(c.done, c.cur)...) }

// recordSums holds every key-bucket record's sum, ascending by revision.
// The apply goroutine appends; the compactor reads the entries at or
// below its revision (which appends never touch) without the lock and
// takes it only to splice its result in.
type recordSums struct {
	mu   sync.Mutex
	list []recordSum
	kbuf []byte // apply goroutine's scratch key
	// ready is closed once list holds every record's sum (see reset);
	// compactions wait for it. gen counts resets, so that a load begun
	// before one discards its result. broken: the load failed, and
	// compactions store no hash.
	ready  chan struct{}
	gen    uint64
	broken bool
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

// reset replaces the sums (the store's restore builds them afresh). If
// complete is false, list holds only the records above some revision,
// and the caller loads the rest and hands it to fill with the returned
// generation.
func (rs *recordSums) reset(list []recordSum, complete bool) (gen uint64) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.list = list
	rs.gen++
	rs.broken = false
	rs.ready = make(chan struct{})
	if complete {
		close(rs.ready)
	}
	return rs.gen
}

// fill puts below (the sums of every record below the ones reset was
// given, ascending) in front of the list and makes the sums ready, if no
// reset came after generation gen. A failed load passes broken.
func (rs *recordSums) fill(gen uint64, below []recordSum, broken bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if gen != rs.gen {
		return
	}
	rs.list = append(below, rs.list...)
	rs.broken = broken
	close(rs.ready)
}

// wait returns once the sums are ready (true), or stop is closed
// (false).
func (rs *recordSums) wait(stop <-chan struct{}) bool {
	rs.mu.Lock()
	ready := rs.ready
	rs.mu.Unlock()
	if ready == nil {
		return true
	}
	select {
	case <-ready:
		return true
	case <-stop:
		return false
	}
}

// usable reports whether the sums cover every record (false after a
// failed load: a compaction hash from them would be wrong).
func (rs *recordSums) usable() bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return !rs.broken
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
	// Whether the compaction keeps none of the records at or below rev;
	// counted by matching, as garbage may name a revision with no record
	// (one a crashed compaction had already deleted).
	matched := 0
	for i, g := 0, 0; i < m && g < len(garbage); {
		switch c := garbage[g].Rev.Compare(list[i].rev()); {
		case c < 0:
			g++
		case c > 0:
			i++
		default:
			matched++
			i++
			g++
		}
	}
	keepNone := matched == m
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
