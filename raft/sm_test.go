package raft

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/strata-db/strata/mvcc"
	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/vfs"
)

// Snapshot support of the package's test state machines. The N-member
// tests (package rafttest) exercise it; the tests here run one member,
// which never sends or receives a snapshot.

// bytesImage is an image held in memory.
type bytesImage struct {
	b     []byte
	index uint64
}

func (i bytesImage) Index() uint64                      { return i.index }
func (i bytesImage) Size() int64                        { return int64(len(i.b)) }
func (i bytesImage) WriteTo(w io.Writer) (int64, error) { return bytes.NewReader(i.b).WriteTo(w) }
func (i bytesImage) Close() error                       { return nil }

// Image commits and returns the committed file.
func (s *fileSM) Image() (Image, error) {
	if err := s.Commit(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := os.ReadFile(s.path)
	if err != nil {
		return nil, err
	}
	return bytesImage{b: b, index: s.ci}, nil
}

func (s *fileSM) CheckImage(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	if len(b) < 8 {
		return 0, fmt.Errorf("image %s is %d bytes", path, len(b))
	}
	return binary.BigEndian.Uint64(b), nil
}

func (s *fileSM) Restore(meta SnapshotMeta, path string) error {
	if err := os.Rename(path, s.path); err != nil {
		return err
	}
	if err := vfs.Default.SyncDir(filepath.Dir(s.path)); err != nil {
		return err
	}
	fresh := &fileSM{path: s.path}
	b, err := os.ReadFile(s.path)
	if err != nil {
		return err
	}
	fresh.ci = binary.BigEndian.Uint64(b)
	for rest := b[8:]; len(rest) >= 12; {
		n := binary.BigEndian.Uint32(rest[8:])
		fresh.dataIdx = append(fresh.dataIdx, binary.BigEndian.Uint64(rest))
		fresh.data = append(fresh.data, string(rest[12:12+n]))
		rest = rest[12+n:]
	}
	s.mu.Lock()
	s.ci, s.applied, s.data, s.dataIdx = fresh.ci, fresh.ci, fresh.data, fresh.dataIdx
	s.mu.Unlock()
	return nil
}

// Image is a page-store image of the committed state.
func (s *pageSM) Image() (Image, error) { return s.backend().Image() }

func (s *pageSM) CheckImage(path string) (uint64, error) { return mvcc.ImageIndex(path) }

// Restore renames the image over the page store and reopens it.
func (s *pageSM) Restore(meta SnapshotMeta, path string) error {
	s.beMu.Lock()
	defer s.beMu.Unlock()
	if err := s.be.Close(); err != nil {
		return err
	}
	if err := s.db.Close(); err != nil {
		return err
	}
	if err := os.Rename(path, s.dbPath); err != nil {
		return err
	}
	if err := vfs.Default.SyncDir(filepath.Dir(s.dbPath)); err != nil {
		return err
	}
	db, err := pagestore.Open(s.dbPath, nil)
	if err != nil {
		return err
	}
	be, err := mvcc.NewBackend(db, mvcc.BackendConfig{BatchInterval: time.Millisecond})
	if err != nil {
		db.Close()
		return err
	}
	be.SetDurableIndex(s.durable)
	s.db, s.be = db, be
	s.mu.Lock()
	s.applied = be.ConsistentIndex()
	s.mu.Unlock()
	return nil
}
