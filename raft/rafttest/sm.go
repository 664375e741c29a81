package rafttest

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/strata-db/strata/mvcc"
	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/raft"
	"github.com/strata-db/strata/vfs"
)

// PageSM is a small state machine on the real storage engine: each entry
// with data is one write transaction of an mvcc.Backend over a page store
// (bucket "data": index -> data), committed in batches and gated on the
// persisted index as the server's applier is. Its images are page-store
// images (mvcc.Image), and Restore renames a received one over its file.
// It also keeps its contents in memory, rebuilt from the page store on
// open and restore, so tests can compare members.
type PageSM struct {
	path string
	fs   vfs.FS

	// mu guards db and be, which Restore replaces (holding it
	// exclusively); Apply and Persisted hold it shared.
	mu      sync.RWMutex
	db      *pagestore.DB
	be      *mvcc.Backend
	durable atomic.Uint64 // the last Persisted index, carried over by Restore
	// beClosed: a failed Restore closed be and could not replace it.
	beClosed bool

	// cmu guards the in-memory contents.
	cmu      sync.Mutex
	contents map[uint64]string
	byData   map[string]uint64
	applied  uint64
	notify   chan struct{} // closed and replaced after each applied batch
	dups     int           // entries at or below the applied index delivered again past the consistent index
	restores int

	// Entries applied before the local WAL held them (index above the
	// last Persisted), split by whether this member led at the time:
	// evidence that a test exercised the case the WAL gate is for.
	EarlyFollower, EarlyLeader atomic.Int64
	isLeader                   atomic.Pointer[func() bool]

	// persisted reports the node's persisted index; every page-store
	// commit is checked against it (checkCommit).
	persisted atomic.Pointer[func() uint64]
	vmu       sync.Mutex
	violation error // the first commit found past the WAL
	commits   atomic.Int64
}

// SetPersistedCheck makes every page-store commit check that its
// consistent index is not past persisted().
func (s *PageSM) SetPersistedCheck(persisted func() uint64) { s.persisted.Store(&persisted) }

// checkCommit runs after each backend commit (BackendConfig.OnCommit):
// the consistent index the page store now holds must be at or below the
// index the WAL holds, read afterwards (it only goes down to replace an
// uncommitted tail, never below what was applied).
func (s *PageSM) checkCommit(db *pagestore.DB) {
	s.commits.Add(1)
	f := s.persisted.Load()
	if f == nil {
		return
	}
	var ci uint64
	if err := db.View(func(tx *pagestore.Tx) error {
		var err error
		ci, _, err = mvcc.ReadConsistentIndex(tx)
		return err
	}); err != nil {
		return
	}
	if p := (*f)(); ci > p {
		s.vmu.Lock()
		if s.violation == nil {
			s.violation = fmt.Errorf("a page-store commit recorded consistent index %d while the WAL held only up to %d", ci, p)
		}
		s.vmu.Unlock()
	}
}

// Violation returns the first commit found past the WAL, if any.
func (s *PageSM) Violation() error {
	s.vmu.Lock()
	defer s.vmu.Unlock()
	return s.violation
}

// Commits counts the page-store commits checked.
func (s *PageSM) Commits() int64 { return s.commits.Load() }

// SetLeaderCheck tells the state machine how to tell it leads.
func (s *PageSM) SetLeaderCheck(f func() bool) { s.isLeader.Store(&f) }

var dataBucket = []byte("data")

// OpenPageSM opens (or creates) the page store at path on fs.
func OpenPageSM(path string, fs vfs.FS) (*PageSM, error) {
	s := &PageSM{path: path, fs: fs}
	if err := s.open(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *PageSM) open() error {
	db, err := pagestore.Open(s.path, &pagestore.Options{FS: s.fs})
	if err != nil {
		return err
	}
	// A 1 ms batch interval: commits race the WAL as often as possible.
	be, err := mvcc.NewBackend(db, mvcc.BackendConfig{BatchInterval: time.Millisecond,
		OnCommit: func(time.Duration) { s.checkCommit(db) }})
	if err != nil {
		db.Close()
		return err
	}
	contents := map[uint64]string{}
	err = db.View(func(tx *pagestore.Tx) error {
		b, err := tx.Bucket(dataBucket)
		if err != nil {
			return nil // nothing applied with data yet
		}
		return b.ForEach(func(k, v []byte) error {
			contents[binary.BigEndian.Uint64(k)] = string(v)
			return nil
		})
	})
	if err != nil {
		be.Close()
		db.Close()
		return err
	}
	s.db, s.be = db, be
	byData := make(map[string]uint64, len(contents))
	for i, v := range contents {
		byData[v] = i
	}
	s.cmu.Lock()
	s.contents, s.byData, s.applied = contents, byData, be.ConsistentIndex()
	if s.notify == nil {
		s.notify = make(chan struct{})
	}
	s.cmu.Unlock()
	return nil
}

// Close closes the backend (committing what the WAL allows) and the page
// store.
func (s *PageSM) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	if !s.beClosed {
		err = s.be.Close()
	}
	if cerr := s.db.Close(); err == nil {
		err = cerr
	}
	return err
}

func (s *PageSM) backend() *mvcc.Backend {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.be
}

func (s *PageSM) ConsistentIndex() uint64 { return s.backend().ConsistentIndex() }
func (s *PageSM) Commit() error           { return s.backend().ForceCommit() }

func (s *PageSM) Persisted(idx uint64) {
	s.mu.RLock()
	s.durable.Store(idx)
	s.be.SetDurableIndex(idx)
	s.mu.RUnlock()
}

func (s *PageSM) Apply(ents []*raftpb.Entry) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, e := range ents {
		idx := e.GetIndex()
		s.cmu.Lock()
		skip := idx <= s.applied
		if skip && idx > s.be.ConsistentIndex() {
			s.dups++
		}
		s.cmu.Unlock()
		if skip {
			continue
		}
		if idx > s.durable.Load() {
			if f := s.isLeader.Load(); f != nil && (*f)() {
				s.EarlyLeader.Add(1)
			} else {
				s.EarlyFollower.Add(1)
			}
		}
		w := s.be.BeginWrite()
		if e.GetType() == raftpb.EntryNormal && len(e.GetData()) > 0 {
			w.Put(dataBucket, binary.BigEndian.AppendUint64(nil, idx), e.GetData())
		}
		w.End(idx, e.GetTerm())
		s.cmu.Lock()
		if e.GetType() == raftpb.EntryNormal && len(e.GetData()) > 0 {
			s.contents[idx] = string(e.GetData())
			s.byData[string(e.GetData())] = idx
		}
		s.applied = idx
		s.cmu.Unlock()
	}
	s.cmu.Lock()
	close(s.notify)
	s.notify = make(chan struct{})
	s.cmu.Unlock()
}

// AppliedChanged returns a channel closed after the next applied batch.
func (s *PageSM) AppliedChanged() <-chan struct{} {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	return s.notify
}

// Find returns the index at which data was applied.
func (s *PageSM) Find(data []byte) (uint64, bool) {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	i, ok := s.byData[string(data)]
	return i, ok
}

func (s *PageSM) Image() (raft.Image, error) { return s.backend().Image() }

func (s *PageSM) CheckImage(path string) (uint64, error) { return mvcc.ImageIndex(path) }

// Restore: the old backend commits what it may and closes, the image is
// renamed over the page store (directory fsync'd), and the store reopens.
// The old page store closes in the background once the images read from
// it are closed.
func (s *PageSM) Restore(meta raft.SnapshotMeta, path string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	oldDB := s.db
	s.beClosed = true
	if err := s.be.Close(); err != nil {
		return err
	}
	if err := s.fs.Rename(path, s.path); err != nil {
		return err
	}
	if err := s.fs.SyncDir(filepath.Dir(s.path)); err != nil {
		return err
	}
	if err := s.open(); err != nil {
		return err
	}
	s.beClosed = false
	s.be.SetDurableIndex(s.durable.Load())
	go oldDB.Close()
	s.cmu.Lock()
	s.restores++
	s.cmu.Unlock()
	if ci := s.be.ConsistentIndex(); ci != meta.Index {
		return fmt.Errorf("rafttest: restored page store holds index %d, the snapshot is at %d", ci, meta.Index)
	}
	return nil
}

// Applied returns the last applied index.
func (s *PageSM) Applied() uint64 {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	return s.applied
}

// Restores counts the snapshots installed since the state machine was
// opened.
func (s *PageSM) Restores() int {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	return s.restores
}

// Dups counts entries delivered again past the consistent index.
func (s *PageSM) Dups() int {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	return s.dups
}

// Digest summarizes the contents up to and including index: equal
// digests mean equal data at equal indexes.
func (s *PageSM) Digest(upTo uint64) (string, int) {
	s.cmu.Lock()
	idx := make([]uint64, 0, len(s.contents))
	for i := range s.contents {
		if i <= upTo {
			idx = append(idx, i)
		}
	}
	sort.Slice(idx, func(a, b int) bool { return idx[a] < idx[b] })
	h := sha256.New()
	for _, i := range idx {
		fmt.Fprintf(h, "%d=%s;", i, s.contents[i])
	}
	s.cmu.Unlock()
	return fmt.Sprintf("%x", h.Sum(nil)[:8]), len(idx)
}

// Contents returns a copy of the contents.
func (s *PageSM) Contents() map[uint64]string {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	out := make(map[uint64]string, len(s.contents))
	for k, v := range s.contents {
		out[k] = v
	}
	return out
}
