package tools

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"sort"

	bolt "go.etcd.io/bbolt"

	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/progress"
	"github.com/strata-db/strata/schema"
)

// Moving data between Strata's page store and etcd's bbolt snapshot.db.
// Both hold the same buckets in etcd's schema (package schema), so a
// conversion copies buckets record by record; only membership and the
// raft position are rewritten. Restore's copy engine below reads a
// kvSource (either format) and writes a page store in bounded
// transactions; export writes etcd's format with package etcdsnap, the
// writer the server's Snapshot streams with, and uses bbolt not at all.

// Bucket names and meta keys of etcd's schema (package schema), as
// strings for switches.
var (
	bucketKey            = string(schema.Key)
	bucketMeta           = string(schema.Meta)
	bucketLease          = string(schema.Lease)
	bucketAlarm          = string(schema.Alarm)
	bucketAuth           = string(schema.Auth)
	bucketAuthUsers      = string(schema.AuthUsers)
	bucketAuthRoles      = string(schema.AuthRoles)
	bucketMembers        = string(schema.Members)
	bucketMembersRemoved = string(schema.MembersRemoved)
	bucketCluster        = string(schema.Cluster)

	metaConsistentIndex = schema.MetaConsistentIndex
	metaTerm            = schema.MetaTerm
	metaConfState       = schema.MetaConfState
	metaStorageVersion  = schema.MetaStorageVersion
	metaScheduled       = schema.MetaScheduledCompactRev
	metaFinished        = schema.MetaFinishedCompactRev
)

// minSnapshotBytes is less than any database: a bbolt file has at least
// four pages, a page store at least three.
const minSnapshotBytes = 1024

// snapshotFormat names the format of a database image from its first
// bytes: "etcd", "strata", or "" when it is neither.
func snapshotFormat(head []byte) string { return string(schema.Detect(head)) }

// hasSHA256Trailer reports whether a snapshot of size bytes ends with the
// SHA-256 of the rest, as a database (whole 512-byte multiples) streamed
// by Maintenance.Snapshot does; etcd's rule.
func hasSHA256Trailer(size int64) bool { return size%512 == sha256.Size }

// guard runs fn, turning a panic, including a memory fault on a mapping of
// a truncated file, into an error naming the file: a damaged input must
// never crash the tool.
func guard(path string, fn func() error) (err error) {
	old := debug.SetPanicOnFault(true)
	defer debug.SetPanicOnFault(old)
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s: the database is damaged and cannot be read (%v)", path, r)
		}
	}()
	return fn()
}

// kvCursor walks one bucket in key order.
type kvCursor interface {
	First() (k, v []byte)
	Next() (k, v []byte)
	Err() error
}

// kvSource is a read-only view of a database's buckets.
type kvSource interface {
	// Buckets returns the bucket names in order.
	Buckets() ([][]byte, error)
	// Cursor opens a bucket; it fails if the bucket does not exist.
	Cursor(name []byte) (kvCursor, error)
	// Get returns a value, nil if the bucket or key is absent.
	Get(bucket, key []byte) ([]byte, error)
	// Size is the size of the database the view sees, in bytes.
	Size() int64
	Close() error
}

// kvWriter writes inside one transaction of a kvSink.
type kvWriter interface {
	CreateBucket(name []byte) error
	Put(bucket, k, v []byte) error
}

// kvSink is a database being written.
type kvSink interface {
	Update(fn func(w kvWriter) error) error
}

// boltSource reads an etcd snapshot.db in one read transaction.
type boltSource struct {
	db *bolt.DB
	tx *bolt.Tx
}

func openBoltSource(path string) (*boltSource, error) {
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	tx, err := db.Begin(false)
	if err != nil {
		db.Close()
		return nil, err
	}
	return &boltSource{db: db, tx: tx}, nil
}

func (s *boltSource) Buckets() ([][]byte, error) {
	var names [][]byte
	err := s.tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
		names = append(names, append([]byte(nil), name...))
		return nil
	})
	sort.Slice(names, func(i, j int) bool { return bytes.Compare(names[i], names[j]) < 0 })
	return names, err
}

func (s *boltSource) Cursor(name []byte) (kvCursor, error) {
	b := s.tx.Bucket(name)
	if b == nil {
		return nil, fmt.Errorf("bucket %q not found", name)
	}
	return &boltCursor{b: b, c: b.Cursor()}, nil
}

func (s *boltSource) Get(bucket, key []byte) ([]byte, error) {
	if b := s.tx.Bucket(bucket); b != nil {
		return b.Get(key), nil
	}
	return nil, nil
}

func (s *boltSource) Size() int64 { return s.tx.Size() }

func (s *boltSource) Close() error {
	s.tx.Rollback()
	return s.db.Close()
}

// boltCursor reports nested buckets, which etcd never writes, as errors.
type boltCursor struct {
	b   *bolt.Bucket
	c   *bolt.Cursor
	err error
}

func (c *boltCursor) check(k, v []byte) ([]byte, []byte) {
	if k != nil && v == nil && c.b.Bucket(k) != nil {
		c.err = fmt.Errorf("key %x is a nested bucket, which etcd's schema never has", k)
		return nil, nil
	}
	return k, v
}

func (c *boltCursor) First() ([]byte, []byte) { return c.check(c.c.First()) }
func (c *boltCursor) Next() ([]byte, []byte)  { return c.check(c.c.Next()) }
func (c *boltCursor) Err() error              { return c.err }

// pageSource reads a Strata page store in one read transaction.
type pageSource struct {
	db *pagestore.DB
	tx *pagestore.Tx
}

func openPageSource(path string) (*pageSource, error) {
	db, err := pagestore.Open(path, nil)
	if err != nil {
		return nil, err
	}
	tx, err := db.Begin(false)
	if err != nil {
		db.Close()
		return nil, err
	}
	return &pageSource{db: db, tx: tx}, nil
}

func (s *pageSource) Buckets() ([][]byte, error) {
	var names [][]byte
	err := s.tx.ForEach(func(name []byte, _ *pagestore.Bucket) error {
		names = append(names, append([]byte(nil), name...))
		return nil
	})
	sort.Slice(names, func(i, j int) bool { return bytes.Compare(names[i], names[j]) < 0 })
	return names, err
}

func (s *pageSource) Cursor(name []byte) (kvCursor, error) {
	b, err := s.tx.Bucket(name)
	if err != nil {
		return nil, err
	}
	return b.Cursor(), nil
}

func (s *pageSource) Get(bucket, key []byte) ([]byte, error) {
	b, err := s.tx.Bucket(bucket)
	if err != nil {
		if isBucketNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	return b.Get(key)
}

func (s *pageSource) Size() int64 { return s.tx.Size() }

func (s *pageSource) Close() error {
	s.tx.Rollback()
	return s.db.Close()
}

// pageSink writes a Strata page store.
type pageSink struct{ db *pagestore.DB }

func (s pageSink) Update(fn func(w kvWriter) error) error {
	return s.db.Update(func(tx *pagestore.Tx) error {
		return fn(&pageWriter{tx: tx, b: map[string]*pagestore.Bucket{}})
	})
}

type pageWriter struct {
	tx *pagestore.Tx
	b  map[string]*pagestore.Bucket
}

func (w *pageWriter) bucket(name []byte) (*pagestore.Bucket, error) {
	if b, ok := w.b[string(name)]; ok {
		return b, nil
	}
	b, err := w.tx.CreateBucketIfNotExists(name)
	if err != nil {
		return nil, err
	}
	w.b[string(name)] = b
	return b, nil
}

func (w *pageWriter) CreateBucket(name []byte) error { _, err := w.bucket(name); return err }

func (w *pageWriter) Put(bucket, k, v []byte) error {
	b, err := w.bucket(bucket)
	if err != nil {
		return err
	}
	return b.Put(k, v)
}

// safeCursor reads a source that may be damaged: a panic of the reader
// (or a fault, under guard) becomes the cursor's error, and every record
// is copied out of the mapping while still under its protection, so
// nothing that may fault reaches the sink, whose transaction must end
// normally.
type safeCursor struct {
	c   kvCursor
	err error
}

func (s *safeCursor) step(next func() ([]byte, []byte)) (k, v []byte) {
	if s.err != nil {
		return nil, nil
	}
	defer func() {
		if r := recover(); r != nil {
			s.err = fmt.Errorf("the database is damaged and cannot be read (%v)", r)
			k, v = nil, nil
		}
	}()
	k, v = next()
	if k == nil {
		return nil, nil
	}
	buf := make([]byte, len(k)+len(v))
	copy(buf, k)
	copy(buf[len(k):], v)
	return buf[:len(k):len(k)], buf[len(k):]
}

func (s *safeCursor) First() ([]byte, []byte) { return s.step(s.c.First) }
func (s *safeCursor) Next() ([]byte, []byte)  { return s.step(s.c.Next) }

func (s *safeCursor) Err() error {
	if s.err != nil {
		return s.err
	}
	return s.c.Err()
}

// copyBatchBytes bounds the data written per sink transaction.
const copyBatchBytes = 16 << 20

// copyPlan says what copyBuckets copies.
type copyPlan struct {
	// bucket decides, per source bucket, whether it is copied.
	bucket func(name []byte) bool
	// record sees every record of a copied bucket; it may drop it. A
	// returned error stops the copy and is reported with the bucket and
	// key.
	record func(bucket, k, v []byte) (keep bool, err error)
	bar    *progress.Bar
}

// copyBuckets copies the source's buckets to the sink, creating every
// copied bucket even when empty. It returns the names of the buckets it
// left out.
func copyBuckets(src kvSource, dst kvSink, plan copyPlan) (skipped []string, err error) {
	names, err := src.Buckets()
	if err != nil {
		return nil, err
	}
	var done int64
	for _, name := range names {
		if !plan.bucket(name) {
			skipped = append(skipped, string(name))
			continue
		}
		raw, err := src.Cursor(name)
		if err != nil {
			return nil, fmt.Errorf("bucket %q: %w", name, err)
		}
		c := &safeCursor{c: raw}
		k, v := c.First()
		for first := true; first || k != nil; first = false {
			err := dst.Update(func(w kvWriter) error {
				if err := w.CreateBucket(name); err != nil {
					return err
				}
				for n := 0; k != nil && n < copyBatchBytes; k, v = c.Next() {
					keep, err := plan.record(name, k, v)
					if err != nil {
						return fmt.Errorf("record %x: %w", k, err)
					}
					if keep {
						if err := w.Put(name, k, v); err != nil {
							return fmt.Errorf("record %x: %w", k, err)
						}
					}
					n += len(k) + len(v) + 16
					done += int64(len(k) + len(v) + 16)
				}
				return c.Err()
			})
			if err != nil {
				return nil, fmt.Errorf("bucket %q: %w", name, err)
			}
			if plan.bar != nil {
				plan.bar.Set(done)
			}
		}
	}
	return skipped, nil
}

// copyHashing copies n bytes from r to w, feeding them to h and advancing
// bar.
func copyHashing(w io.Writer, r io.Reader, n int64, h io.Writer, bar *progress.Bar) error {
	buf := make([]byte, 1<<20)
	for n > 0 {
		m, err := io.ReadFull(r, buf[:min(int64(len(buf)), n)])
		if m > 0 {
			h.Write(buf[:m])
			if _, werr := w.Write(buf[:m]); werr != nil {
				return werr
			}
			n -= int64(m)
			if bar != nil {
				bar.Add(int64(m))
			}
		}
		if err != nil {
			if err == io.ErrUnexpectedEOF || err == io.EOF {
				return fmt.Errorf("file ended %d bytes early", n)
			}
			return err
		}
	}
	return nil
}

func isBucketNotFound(err error) bool { return errors.Is(err, pagestore.ErrBucketNotFound) }
