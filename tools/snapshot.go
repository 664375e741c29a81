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
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/schema"
)

// SnapshotStatus describes a snapshot file, as etcdutl's "snapshot status"
// does: a CRC-32C over every bucket, the highest revision, the number of
// keys live at it, the size of the database and its storage version.
type SnapshotStatus struct {
	Format    string `json:"format"` // "strata" or "etcd"
	Hash      uint32 `json:"hash"`
	Revision  int64  `json:"revision"`
	TotalKey  int    `json:"totalKey"`
	TotalSize int64  `json:"totalSize"`
	// Version is the storage version in the meta bucket, as etcdutl
	// prints it (a semantic version, "" when absent or not one).
	Version string `json:"version"`
	// HashChecked reports that the file carried the SHA-256 trailer that
	// Maintenance.Snapshot appends, and that it matched.
	HashChecked bool `json:"hashChecked"`
	// FileSize is the size of the file, trailer included.
	FileSize int64 `json:"fileSize"`
}

// ErrSnapshotIntegrity means the SHA-256 trailer of a snapshot does not
// match its contents.
var ErrSnapshotIntegrity = errors.New("snapshot: SHA-256 trailer does not match the contents")

// Status inspects a snapshot, waiting at most a second for a process
// that holds the file locked (see StatusTimeout).
func Status(path string) (*SnapshotStatus, error) { return StatusTimeout(path, time.Second) }

// StatusTimeout inspects a snapshot: a Strata page store or an etcd
// snapshot.db (bbolt), with or without the 32-byte SHA-256 trailer that
// the snapshot stream ends with (present when size % 512 == 32), which
// must match when present. The file is read in place, read-only (both
// formats ignore the trailer), so errors name it and the offset of a
// damaged page; it is never modified. A db file a running server holds
// is waited for up to lockTimeout (0: forever).
func StatusTimeout(path string, lockTimeout time.Duration) (*SnapshotStatus, error) {
	format, err := dbFileFormat(path)
	if err != nil {
		return nil, err
	}
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
	st := &SnapshotStatus{FileSize: size, Format: string(schema.FormatStrata)}
	if format == schema.FormatEtcd {
		st.Format = string(format)
	}
	if hasSHA256Trailer(size) {
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
			return nil, fmt.Errorf("%w: %s (the trailer at offset %d does not match the %d bytes before it)", ErrSnapshotIntegrity, path, body, body)
		}
		st.HashChecked = true
	}
	err = guard(path, func() error {
		if format == schema.FormatEtcd {
			return etcdStatus(path, st, lockTimeout)
		}
		err := strataStatus(path, st, lockTimeout)
		if err != nil && format == schema.FormatUnknown && errors.Is(err, pagestore.ErrCorrupt) {
			return notADatabase(path, err)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return st, nil
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

func etcdStatus(path string, st *SnapshotStatus, lockTimeout time.Duration) error {
	db, err := openBoltReadOnly(path, lockTimeout)
	if err != nil {
		return fmt.Errorf("open etcd snapshot %s: %w", path, err)
	}
	defer db.Close()
	bh := newBucketHasher()
	return db.View(func(tx *bolt.Tx) error {
		// etcdutl checks the file's structure before it reads it.
		var problems []string
		for err := range tx.Check() {
			problems = append(problems, err.Error())
		}
		if len(problems) > 0 {
			return fmt.Errorf("%s: snapshot file integrity check failed. %d errors found.\n%s", path, len(problems), strings.Join(problems, "\n"))
		}
		st.TotalSize = tx.Size()
		if m := tx.Bucket(schema.Meta); m != nil {
			st.Version = storageVersionString(m.Get(schema.MetaStorageVersion))
		}
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
				return fmt.Errorf("%s: bucket %q: %w", path, name, err)
			}
		}
		st.Hash = bh.h.Sum32()
		return nil
	})
}

func strataStatus(path string, st *SnapshotStatus, lockTimeout time.Duration) error {
	db, err := openPageStore(path, &pagestore.Options{ReadOnly: true}, lockTimeout)
	if err != nil {
		return fmt.Errorf("open Strata snapshot: %w", err)
	}
	defer db.Close()
	bh := newBucketHasher()
	return db.View(func(tx *pagestore.Tx) error {
		st.TotalSize = tx.Size()
		if m, err := tx.Bucket(schema.Meta); err == nil {
			v, err := m.Get(schema.MetaStorageVersion)
			if err != nil {
				return err
			}
			st.Version = storageVersionString(v)
		} else if !isBucketNotFound(err) {
			return err
		}
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
			if err != nil {
				return fmt.Errorf("%s: bucket %q: %w", path, name, err)
			}
			return nil
		})
	})
}

// storageVersionString is a stored storage version as etcdutl prints
// it: the semantic version it parses as, or "" when it is absent or
// does not parse.
func storageVersionString(v []byte) string {
	sv, ok := parseSemver(string(v))
	if !ok {
		return ""
	}
	return sv.String()
}
