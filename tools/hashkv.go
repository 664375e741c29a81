package tools

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/btreeidx"
	"github.com/strata-db/strata/mvcc"
	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/schema"
)

// HashKVResult is etcd's HashKV of a database's key space, as etcdutl
// hashkv and 'etcdctl endpoint hashkv' print it.
type HashKVResult struct {
	Hash            uint32 `json:"hash"`
	HashRevision    int64  `json:"hashRevision"`
	CompactRevision int64  `json:"compactRevision"`
}

// HashKV computes etcd's HashKV at rev (0: the latest revision) of an
// etcd snapshot.db or bbolt db file, a Strata snapshot image or page
// store, or the page store of a data dir (target is then the
// directory). The file is opened read-only, so unlike etcdutl's
// hashkv it is never written; a running server's file is waited for up
// to lockTimeout (0: forever).
//
// The store's state is what a server opening the file would have: the
// current revision is the highest of the key records and the compaction
// revisions; the compact revision is the finished compaction's, or the
// scheduled one's when that was interrupted (the server resumes it
// before answering). The hash is then the one mvcc.Store.HashKV computes
// (and etcd's): CRC-32C over the bucket name and every record at or
// below rev, leaving out records at or below the compact revision that
// the compaction removes, and a tombstone at exactly the compact
// revision. Errors are etcd's: mvcc.ErrCompacted for a rev below the
// compact revision, mvcc.ErrFutureRev above the current one.
func HashKV(target string, rev int64, lockTimeout time.Duration) (*HashKVResult, error) {
	path := target
	if fi, err := os.Stat(target); err != nil {
		return nil, err
	} else if fi.IsDir() {
		path = filepath.Join(target, "member", "snap", "db")
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("%s is a directory without a db (member/snap/db): give a data dir, a db file or a snapshot: %w", target, err)
		}
	}
	format, err := dbFileFormat(path)
	if err != nil {
		return nil, err
	}
	var src kvSource
	switch format {
	case schema.FormatEtcd:
		db, err := openBoltReadOnly(path, lockTimeout)
		if err != nil {
			return nil, fmt.Errorf("open etcd database %s: %w", path, err)
		}
		tx, err := db.Begin(false)
		if err != nil {
			db.Close()
			return nil, err
		}
		src = &boltSource{db: db, tx: tx}
	default:
		db, err := openPageStore(path, &pagestore.Options{ReadOnly: true}, lockTimeout)
		if err != nil {
			if format == schema.FormatUnknown && errors.Is(err, pagestore.ErrCorrupt) {
				return nil, notADatabase(path, err)
			}
			return nil, fmt.Errorf("open Strata database: %w", err)
		}
		tx, err := db.Begin(false)
		if err != nil {
			db.Close()
			return nil, err
		}
		src = &pageSource{db: db, tx: tx}
	}
	defer src.Close()
	var res *HashKVResult
	err = guard(path, func() error {
		var err error
		res, err = hashKV(src, rev)
		return err
	})
	if err != nil {
		if errors.Is(err, mvcc.ErrCompacted) || errors.Is(err, mvcc.ErrFutureRev) {
			return nil, err // etcd's message alone, as etcdutl prints it
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return res, nil
}

// metaRevision reads a compaction revision of the meta bucket; found is
// false when it is absent.
func metaRevision(src kvSource, key []byte) (rev int64, found bool, err error) {
	v, err := src.Get(schema.Meta, key)
	if err != nil || v == nil {
		return 0, false, err
	}
	if len(v) < 8 {
		return 0, false, fmt.Errorf("meta %s is %d bytes, want a revision", key, len(v))
	}
	return int64(binary.BigEndian.Uint64(v)), true, nil
}

// forEachRevision calls fn for each record of the key bucket in order,
// with the record's revision; a missing bucket has no records.
func forEachRevision(src kvSource, fn func(k, v []byte, r btreeidx.Revision, tomb bool) error) error {
	names, err := src.Buckets()
	if err != nil {
		return err
	}
	found := false
	for _, n := range names {
		if string(n) == bucketKey {
			found = true
		}
	}
	if !found {
		return nil
	}
	c, err := src.Cursor(schema.Key)
	if err != nil {
		return err
	}
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if !validRevKey(k) {
			return fmt.Errorf("bucket %q: malformed revision key %x (want 8-byte main, '_', 8-byte sub, optional 't')", bucketKey, k)
		}
		r := btreeidx.Revision{Main: int64(binary.BigEndian.Uint64(k)), Sub: int64(binary.BigEndian.Uint64(k[9:]))}
		if err := fn(k, v, r, len(k) == 18); err != nil {
			return err
		}
	}
	return c.Err()
}

func hashKV(src kvSource, rev int64) (*HashKVResult, error) {
	finished, finishedFound, err := metaRevision(src, metaFinished)
	if err != nil {
		return nil, err
	}
	scheduled, _, err := metaRevision(src, metaScheduled)
	if err != nil {
		return nil, err
	}
	// The key index, rebuilt as a server rebuilds it at start; a record
	// the index refuses (a tombstone of a key not live) is skipped, as
	// etcd skips it with a warning.
	idx := btreeidx.NewIndex()
	current := int64(1)
	var kv mvccpb.KeyValue
	err = forEachRevision(src, func(k, v []byte, r btreeidx.Revision, tomb bool) error {
		kv.Reset()
		if err := proto.Unmarshal(v, &kv); err != nil {
			return fmt.Errorf("value of revision key %x: %w", k, err)
		}
		_ = idx.Restore(kv.Key, r, btreeidx.Revision{Main: kv.CreateRevision}, kv.Version, 0, tomb)
		current = max(current, r.Main)
		return nil
	})
	if err != nil {
		return nil, err
	}
	compactRev := int64(-1)
	if finishedFound {
		compactRev = finished
	}
	current = max(current, compactRev, scheduled)
	if scheduled != 0 && scheduled > compactRev {
		compactRev = scheduled
	}
	if rev > 0 && rev < compactRev {
		return nil, mvcc.ErrCompacted
	}
	if rev > 0 && rev > current {
		return nil, mvcc.ErrFutureRev
	}
	if rev == 0 {
		rev = current
	}
	keep := idx.Keep(rev)
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	h.Write(schema.Key)
	err = forEachRevision(src, func(k, v []byte, r btreeidx.Revision, tomb bool) error {
		if r.Main > rev {
			return nil
		}
		if r.Main <= compactRev && len(keep) > 0 {
			if _, ok := keep[r]; !ok {
				return nil // the compaction removes it
			}
		}
		if r.Main == compactRev && tomb {
			return nil // etcd releases differ on whether compaction removes it
		}
		h.Write(k)
		h.Write(v)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &HashKVResult{Hash: h.Sum32(), HashRevision: rev, CompactRevision: compactRev}, nil
}
