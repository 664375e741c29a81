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
	"path/filepath"
	"sort"

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
// stream ends with (present when size % 512 == 32). The file is not
// modified; the database is read from a private copy.
func Status(path string) (*SnapshotStatus, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	st := &SnapshotStatus{TotalSize: int64(len(data))}
	if len(data)%512 == sha256.Size {
		body, trailer := data[:len(data)-sha256.Size], data[len(data)-sha256.Size:]
		sum := sha256.Sum256(body)
		if !bytes.Equal(sum[:], trailer) {
			return nil, fmt.Errorf("%w: %s", ErrSnapshotIntegrity, path)
		}
		data, st.HashChecked = body, true
	}
	st.TotalSize = int64(len(data)) // the database, without the trailer, as etcdutl reports
	tmp, err := os.MkdirTemp("", "stratautl-snapshot")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	copyPath := filepath.Join(tmp, "db")
	if err := os.WriteFile(copyPath, data, 0o600); err != nil {
		return nil, err
	}
	if schema.Detect(data) == schema.FormatEtcd {
		st.Format = "etcd"
		return st, etcdStatus(copyPath, st)
	}
	st.Format = "strata"
	return st, strataStatus(copyPath, st)
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
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("open etcd snapshot: %w", err)
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
	db, err := pagestore.Open(path, nil)
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
