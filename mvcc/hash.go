package mvcc

import (
	"bytes"
	"hash"
	"hash/crc32"
	"sort"
	"sync"
	"time"

	"github.com/strata-db/strata/pagestore"
)

// KeyValueHash is the result of HashKV.
type KeyValueHash struct {
	Hash            uint32
	CompactRevision int64
	Revision        int64
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// HashKV hashes the key bucket up to rev (0: current) exactly as etcd
// does, so members (and etcd itself, given the same history) agree:
// CRC-32C over the bucket name, then every record key and stored value
// with main revision <= rev, skipping records at or below the compact
// revision that a compaction will delete, and a tombstone at exactly the
// compact revision. A hash a finished compaction stored for rev (see
// Hashes) is returned as it is, as etcd's HashByRev does. It returns the
// hash and the current revision.
func (s *Store) HashKV(rev int64) (KeyValueHash, int64, error) {
	s.hashMu.RLock()
	locked := true
	unlock := func() {
		if locked {
			locked = false
			s.hashMu.RUnlock()
		}
	}
	defer unlock()
	compactRev, currentRev := s.compactRev.Load(), s.rev.Load()
	if h, ok := s.hashes.get(rev); ok {
		return h, currentRev, nil
	}
	if rev > 0 && rev < compactRev {
		return KeyValueHash{}, currentRev, ErrCompacted
	}
	if rev > currentRev {
		return KeyValueHash{}, currentRev, ErrFutureRev
	}
	if rev == 0 {
		rev = currentRev
	}
	start := time.Now()
	defer func() {
		if m := s.metrics; m != nil {
			m.HashRev.Observe(time.Since(start).Seconds())
		}
	}()
	h := newRevHasher(compactRev, rev, s.index().Keep(rev))
	rd, err := s.be.BeginRead()
	unlock() // the view is taken: a compaction may apply now
	if err != nil {
		return KeyValueHash{}, currentRev, err
	}
	defer rd.Close()
	var kbuf []byte
	err = rd.ScanRevisions(0, rev, func(r Revision, tomb bool, v []byte) bool {
		kbuf = appendRevKey(kbuf[:0], r, tomb)
		h.add(r, tomb, kbuf, v)
		return true
	})
	if err != nil {
		return KeyValueHash{}, currentRev, err
	}
	return h.sum(), currentRev, nil
}

// revHasher is etcd's hash of the key bucket at a revision, fed one
// record at a time in revision order: by HashKV, and by a compaction as
// it passes every record at or below its revision.
type revHasher struct {
	h          hash.Hash32
	compactRev int64
	rev        int64
	keep       map[Revision]struct{}
}

func newRevHasher(compactRev, rev int64, keep map[Revision]struct{}) *revHasher {
	h := crc32.New(castagnoli)
	h.Write(KeyBucket)
	return &revHasher{h: h, compactRev: compactRev, rev: rev, keep: keep}
}

// add hashes the record r (key bytes k, stored value v) if etcd's hash at
// rh.rev includes it: at or below the revision; not a record at or below
// the compact revision that the compaction deletes (unless nothing is
// kept); not a tombstone at exactly the compact revision (etcd releases
// differ on whether compaction deletes that one).
func (rh *revHasher) add(r Revision, tomb bool, k, v []byte) {
	if r.Main > rh.rev {
		return
	}
	if r.Main <= rh.compactRev && len(rh.keep) > 0 {
		if _, ok := rh.keep[r]; !ok {
			return
		}
	}
	if r.Main == rh.compactRev && tomb {
		return
	}
	rh.h.Write(k)
	rh.h.Write(v)
}

func (rh *revHasher) sum() KeyValueHash {
	return KeyValueHash{Hash: rh.h.Sum32(), CompactRevision: rh.compactRev, Revision: rh.rev}
}

// compactHashesKept is how many compaction hashes a store keeps (etcd
// keeps 10).
const compactHashesKept = 10

// compactHashes are the hashes finished compactions computed, each of
// the key bucket at its compaction revision as of the compaction before:
// what the leader's compaction hash check compares between members. Kept
// in memory, as etcd keeps them.
type compactHashes struct {
	mu   sync.Mutex
	list []KeyValueHash // ascending by revision
}

func (c *compactHashes) store(h KeyValueHash) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.list = append(c.list, h)
	sort.Slice(c.list, func(i, j int) bool { return c.list[i].Revision < c.list[j].Revision })
	if len(c.list) > compactHashesKept {
		c.list = c.list[len(c.list)-compactHashesKept:]
	}
}

func (c *compactHashes) get(rev int64) (KeyValueHash, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, h := range c.list {
		if h.Revision == rev {
			return h, true
		}
	}
	return KeyValueHash{}, false
}

// Hashes returns the hashes the last (up to 10) finished compactions
// stored, oldest first.
func (s *Store) Hashes() []KeyValueHash {
	s.hashes.mu.Lock()
	defer s.hashes.mu.Unlock()
	return append([]KeyValueHash(nil), s.hashes.list...)
}

// Hash hashes every bucket of the committed page store (after committing
// what is pending), skipping the raft bookkeeping that differs between
// members: CRC-32C over each bucket name and its keys and values.
func (s *Store) Hash() (uint32, int64, error) {
	start := time.Now()
	defer func() {
		if m := s.metrics; m != nil {
			m.Hash.Observe(time.Since(start).Seconds())
		}
	}()
	if err := s.be.ForceCommit(); err != nil {
		return 0, 0, err
	}
	rev := s.rev.Load()
	h := crc32.New(castagnoli)
	err := s.be.DB().View(func(tx *pagestore.Tx) error {
		return tx.ForEach(func(name []byte, b *pagestore.Bucket) error {
			h.Write(name)
			return b.ForEach(func(k, v []byte) error {
				if bytes.Equal(name, MetaBucket) && (bytes.Equal(k, metaConsistentIndex) || bytes.Equal(k, metaTerm)) {
					return nil
				}
				h.Write(k)
				h.Write(v)
				return nil
			})
		})
	})
	return h.Sum32(), rev, err
}
