package mvcc

import (
	"bytes"
	"hash/crc32"
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
// compact revision. It returns the hash and the current revision.
func (s *Store) HashKV(rev int64) (KeyValueHash, int64, error) {
	compactRev, currentRev := s.compactRev.Load(), s.rev.Load()
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
	keep := s.index().Keep(rev)
	rd, err := s.be.BeginRead()
	if err != nil {
		return KeyValueHash{}, currentRev, err
	}
	defer rd.Close()
	h := crc32.New(castagnoli)
	h.Write(KeyBucket)
	var kbuf []byte
	lower := Revision{Main: compactRev + 1}
	err = rd.ScanRevisions(0, rev, func(r Revision, tomb bool, v []byte) bool {
		if lower.GreaterThan(r) && len(keep) > 0 {
			if _, ok := keep[r]; !ok {
				return true
			}
		}
		if r.Main == compactRev && tomb {
			return true
		}
		kbuf = appendRevKey(kbuf[:0], r, tomb)
		h.Write(kbuf)
		h.Write(v)
		return true
	})
	if err != nil {
		return KeyValueHash{}, currentRev, err
	}
	return KeyValueHash{Hash: h.Sum32(), CompactRevision: compactRev, Revision: rev}, currentRev, nil
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
