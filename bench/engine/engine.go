// Package engine benchmarks Strata's page store side by side with bbolt
// (etcd's backend) on etcd-shaped workloads. See engine_bench_test.go and
// bench/RESULTS.md.
package engine

import (
	"encoding/binary"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/strata-db/strata/pagestore"
)

// Engine is the minimal surface the benchmark drives.
type Engine interface {
	// PutBatch stores every key with val in one commit.
	PutBatch(keys [][]byte, val []byte) error
	// DeleteBatch deletes every key in one commit.
	DeleteBatch(keys [][]byte) error
	// Get reads n keys in one read transaction, calling key(i) for each.
	Get(n int, key func(i int) []byte) (found int, err error)
	// Scan reads up to n consecutive keys from start, in one read tx.
	Scan(start []byte, n int) (int, error)
	// IOTime is the time commits have spent so far writing pages and in
	// fdatasync, both syncs (pagestore: Stats WriteTotal + SyncTotal;
	// bbolt: TxStats WriteTime, which spans the same steps).
	IOTime() time.Duration
	Close() error
}

// Opener opens (creating if needed) an engine's file at path.
type Opener func(path string) (Engine, error)

var bucket = []byte("key")

// RevKey is etcd's revision key: 8-byte big-endian main revision, '_',
// 8-byte big-endian sub revision (17 bytes).
func RevKey(main, sub uint64) []byte {
	k := make([]byte, 17)
	binary.BigEndian.PutUint64(k, main)
	k[8] = '_'
	binary.BigEndian.PutUint64(k[9:], sub)
	return k
}

// FileSize returns the size of path, or -1.
func FileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return -1
	}
	return fi.Size()
}

// TimeOpen measures how long opening path takes.
func TimeOpen(open Opener, path string) (time.Duration, error) {
	start := time.Now()
	e, err := open(path)
	if err != nil {
		return 0, err
	}
	d := time.Since(start)
	return d, e.Close()
}

// ---- pagestore ----

type psEngine struct{ db *pagestore.DB }

func (e *psEngine) IOTime() time.Duration {
	st := e.db.Stats()
	return st.WriteTotal + st.SyncTotal
}

// OpenPagestore opens a pagestore file with default (durable) options.
func OpenPagestore(path string) (Engine, error) { return OpenPagestoreOpts(path, nil) }

// OpenPagestoreOpts opens a pagestore file with opts.
func OpenPagestoreOpts(path string, opts *pagestore.Options) (Engine, error) {
	db, err := pagestore.Open(path, opts)
	if err != nil {
		return nil, err
	}
	return &psEngine{db}, nil
}

func (e *psEngine) PutBatch(keys [][]byte, val []byte) error {
	return e.db.Update(func(tx *pagestore.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucket)
		if err != nil {
			return err
		}
		for _, k := range keys {
			if err := b.Put(k, val); err != nil {
				return err
			}
		}
		return nil
	})
}

func (e *psEngine) DeleteBatch(keys [][]byte) error {
	return e.db.Update(func(tx *pagestore.Tx) error {
		b, err := tx.Bucket(bucket)
		if err != nil {
			return err
		}
		for _, k := range keys {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
}

func (e *psEngine) Get(n int, key func(int) []byte) (int, error) {
	found := 0
	err := e.db.View(func(tx *pagestore.Tx) error {
		b, err := tx.Bucket(bucket)
		if err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			v, err := b.Get(key(i))
			if err != nil {
				return err
			}
			if v != nil {
				found++
			}
		}
		return nil
	})
	return found, err
}

func (e *psEngine) Scan(start []byte, n int) (int, error) {
	got := 0
	err := e.db.View(func(tx *pagestore.Tx) error {
		b, err := tx.Bucket(bucket)
		if err != nil {
			return err
		}
		c := b.Cursor()
		for k, _ := c.Seek(start); k != nil && got < n; k, _ = c.Next() {
			got++
		}
		return c.Err()
	})
	return got, err
}

func (e *psEngine) Close() error { return e.db.Close() }

// ---- bbolt, configured as etcd configures it ----

type boltEngine struct{ db *bolt.DB }

func (e *boltEngine) IOTime() time.Duration {
	st := e.db.Stats()
	return st.TxStats.GetWriteTime()
}

// OpenBolt opens a bbolt file with etcd's backend options: hashmap
// freelist, no freelist sync, 10 GiB initial mmap; sequential puts use a
// 0.9 fill percent as etcd's UnsafeSeqPut does.
func OpenBolt(path string) (Engine, error) { return OpenBoltOpts(path, false) }

// OpenBoltOpts is OpenBolt with optional NoSync for building large files.
func OpenBoltOpts(path string, noSync bool) (Engine, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		InitialMmapSize: 10 << 30,
		NoFreelistSync:  true,
		FreelistType:    bolt.FreelistMapType,
		NoSync:          noSync,
	})
	if err != nil {
		return nil, err
	}
	return &boltEngine{db}, nil
}

func (e *boltEngine) PutBatch(keys [][]byte, val []byte) error {
	return e.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucket)
		if err != nil {
			return err
		}
		b.FillPercent = 0.9
		for _, k := range keys {
			if err := b.Put(k, val); err != nil {
				return err
			}
		}
		return nil
	})
}

func (e *boltEngine) DeleteBatch(keys [][]byte) error {
	return e.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket)
		for _, k := range keys {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
}

func (e *boltEngine) Get(n int, key func(int) []byte) (int, error) {
	found := 0
	err := e.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket)
		for i := 0; i < n; i++ {
			if b.Get(key(i)) != nil {
				found++
			}
		}
		return nil
	})
	return found, err
}

func (e *boltEngine) Scan(start []byte, n int) (int, error) {
	got := 0
	err := e.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucket).Cursor()
		for k, _ := c.Seek(start); k != nil && got < n; k, _ = c.Next() {
			got++
		}
		return nil
	})
	return got, err
}

func (e *boltEngine) Close() error { return e.db.Close() }
