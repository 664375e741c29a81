package tools

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/schema"
)

// SnapshotStatus describes a snapshot file, as etcdutl's "snapshot status"
// does: a CRC-32C over every bucket, the highest revision, the number of
// records in the key bucket, and the file size.
type SnapshotStatus struct {
	Format    string `json:"format"` // "strata" or "etcd"
	Hash      uint32 `json:"hash"`
	Revision  int64  `json:"revision"`
	TotalKey  int    `json:"totalKey"`
	TotalSize int64  `json:"totalSize"`
	// HashChecked reports that the file carried the SHA-256 trailer that
	// Maintenance.Snapshot appends, and that it matched.
	HashChecked bool `json:"hashChecked"`
}

// ErrSnapshotIntegrity means the SHA-256 trailer of a snapshot does not
// match its contents.
var ErrSnapshotIntegrity = errors.New("snapshot: SHA-256 trailer does not match the contents")

// Status inspects a snapshot: a Strata page store or an etcd snapshot.db
// (bbolt), with or without the 32-byte SHA-256 trailer that the snapshot
// stream ends with (present when size % 512 == 32). The file is read in
// place, read-only (both formats ignore the trailer), so errors name it
// and the offset of a damaged page; it is never modified.
func Status(path string) (*SnapshotStatus, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := fi.Size()
	st := &SnapshotStatus{TotalSize: size}
	if size%512 == sha256.Size {
		body := size - sha256.Size
		h := sha256.New()
		if _, err := io.Copy(h, io.NewSectionReader(f, 0, body)); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		trailer := make([]byte, sha256.Size)
		if _, err := f.ReadAt(trailer, body); err != nil {
			return nil, fmt.Errorf("%s: read SHA-256 trailer at offset %d: %w", path, body, err)
		}
		if !bytes.Equal(h.Sum(nil), trailer) {
			return nil, fmt.Errorf("%w: %s", ErrSnapshotIntegrity, path)
		}
		st.TotalSize, st.HashChecked = body, true // the database, without the trailer, as etcdutl reports
	}
	head := make([]byte, schema.HeaderSize)
	n, _ := f.ReadAt(head, 0)
	if schema.Detect(head[:n]) == schema.FormatEtcd {
		st.Format = "etcd"
		return st, etcdStatus(path, st)
	}
	st.Format = "strata"
	return st, strataStatus(path, st)
}

// bucketHasher hashes buckets as etcd's backend does: bucket names in
// order, each followed by its keys and values.
type bucketHasher struct{ h hashWriter }

type hashWriter interface {
	io.Writer
	Sum32() uint32
}

func newBucketHasher() *bucketHasher {
	return &bucketHasher{h: crc32.New(crc32.MakeTable(crc32.Castagnoli))}
}

// keyCounter follows the key bucket's records in revision order to find
// the highest revision and the keys live at it (etcdutl's TOTAL KEYS).
type keyCounter struct {
	live map[string]struct{}
}

func (c *keyCounter) note(st *SnapshotStatus, k, v []byte) error {
	if len(k) < 17 {
		return fmt.Errorf("malformed revision key %x", k)
	}
	if rev := int64(binary.BigEndian.Uint64(k)); rev > st.Revision {
		st.Revision = rev
	}
	var kv mvccpb.KeyValue
	if err := proto.Unmarshal(v, &kv); err != nil {
		return fmt.Errorf("value of revision key %x: %w", k, err)
	}
	if len(k) == 18 && k[17] == 't' {
		delete(c.live, string(kv.Key))
	} else {
		c.live[string(kv.Key)] = struct{}{}
	}
	st.TotalKey = len(c.live)
	return nil
}

func etcdStatus(path string, st *SnapshotStatus) error {
	// Read-only takes a shared lock; give up rather than wait for a
	// writer (a running etcd) to let go.
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return fmt.Errorf("open etcd snapshot %s: %w", path, err)
	}
	defer db.Close()
	bh := newBucketHasher()
	return db.View(func(tx *bolt.Tx) error {
		var names [][]byte
		tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
			names = append(names, append([]byte(nil), name...))
			return nil
		})
		sort.Slice(names, func(i, j int) bool { return bytes.Compare(names[i], names[j]) < 0 })
		for _, name := range names {
			bh.h.Write(name)
			isKey := string(name) == "key"
			kc := &keyCounter{live: map[string]struct{}{}}
			if err := tx.Bucket(name).ForEach(func(k, v []byte) error {
				bh.h.Write(k)
				bh.h.Write(v)
				if isKey {
					return kc.note(st, k, v)
				}
				return nil
			}); err != nil {
				return err
			}
		}
		st.Hash = bh.h.Sum32()
		return nil
	})
}

func strataStatus(path string, st *SnapshotStatus) error {
	db, err := pagestore.Open(path, &pagestore.Options{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("open Strata snapshot: %w", err)
	}
	defer db.Close()
	bh := newBucketHasher()
	return db.View(func(tx *pagestore.Tx) error {
		return tx.ForEach(func(name []byte, b *pagestore.Bucket) error {
			bh.h.Write(name)
			isKey := string(name) == "key"
			kc := &keyCounter{live: map[string]struct{}{}}
			err := b.ForEach(func(k, v []byte) error {
				bh.h.Write(k)
				bh.h.Write(v)
				if isKey {
					return kc.note(st, k, v)
				}
				return nil
			})
			st.Hash = bh.h.Sum32()
			return err
		})
	})
}
