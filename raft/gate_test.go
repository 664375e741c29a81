package raft

import (
	"context"
	"encoding/binary"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/internal/poll"
	"github.com/strata-db/strata/mvcc"
	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/vfs"
	"github.com/strata-db/strata/wal"
)

// pageSM applies entries to a real mvcc.Backend over a real page store,
// one write transaction per entry, as the server's applier does.
type pageSM struct {
	dbPath  string
	onApply func(idx uint64)

	// beMu guards db and be, which Restore replaces.
	beMu    sync.RWMutex
	db      *pagestore.DB
	be      *mvcc.Backend
	durable uint64 // the last Persisted index, carried over by Restore

	mu      sync.Mutex
	applied uint64
}

var gateBucket = []byte("gate")

func (s *pageSM) backend() *mvcc.Backend {
	s.beMu.RLock()
	defer s.beMu.RUnlock()
	return s.be
}

func (s *pageSM) ConsistentIndex() uint64 { return s.backend().ConsistentIndex() }
func (s *pageSM) Commit() error           { return s.backend().ForceCommit() }
func (s *pageSM) Persisted(idx uint64) {
	s.beMu.Lock()
	s.durable = idx
	s.be.SetDurableIndex(idx)
	s.beMu.Unlock()
}

func (s *pageSM) Apply(ents []*raftpb.Entry) {
	be := s.backend()
	for _, e := range ents {
		s.mu.Lock()
		skip := e.GetIndex() <= s.applied
		s.mu.Unlock()
		if skip {
			continue
		}
		w := be.BeginWrite()
		if e.GetType() == raftpb.EntryNormal && len(e.GetData()) > 0 {
			w.Put(gateBucket, binary.BigEndian.AppendUint64(nil, e.GetIndex()), e.GetData())
		}
		w.End(e.GetIndex(), e.GetTerm())
		s.mu.Lock()
		s.applied = e.GetIndex()
		s.mu.Unlock()
		if s.onApply != nil {
			s.onApply(e.GetIndex())
		}
	}
}

func (s *pageSM) appliedIndex() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applied
}

// TestFollowerNeverCommitsPastWAL: nothing durable runs ahead of the WAL.
// A follower learns in one MsgApp of entry 4 and that it is committed, so
// raft hands entry 4 to apply in the same Ready that must write it. The
// WAL write then fails (ENOSPC, injected only once apply has seen the
// entry). The page store's consistent index must not pass the WAL's last
// durable index, whatever commits meanwhile (the backend's periodic
// commit, the snapshot the entry triggers, Stop's final commit), and the
// snapshot must not be cut past the log.
func TestFollowerNeverCommitsPastWAL(t *testing.T) {
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "db")
	db, err := pagestore.Open(dbPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	be, err := mvcc.NewBackend(db, mvcc.BackendConfig{BatchInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	sawEntry4 := make(chan struct{})
	sm := &pageSM{dbPath: dbPath, db: db, be: be, onApply: func(idx uint64) {
		if idx == 4 {
			close(sawEntry4)
		}
	}}
	var armed sync.Once
	armc := make(chan struct{})
	ffs := vfs.NewFaultFS(vfs.Default, func(ev vfs.Event) *vfs.Fault {
		select {
		case <-armc:
		default:
			return nil
		}
		if ev.Op != vfs.OpWrite || !strings.HasSuffix(ev.Path, ".wal") {
			return nil
		}
		// Fail the write only after apply has the entry: the window in
		// which an unguarded commit would run ahead of the WAL.
		select {
		case <-sawEntry4:
		case <-time.After(10 * time.Second):
		}
		return &vfs.Fault{Err: vfs.ENOSPC}
	})
	walDir := filepath.Join(dir, "wal")
	n, err := Start(Config{
		ID: 2, ClusterID: 7, Peers: []etcdraft.Peer{{ID: 1}, {ID: 2}, {ID: 3}},
		WALDir: walDir, WAL: &wal.Options{FS: ffs, SegmentSize: 1 << 20},
		// The follower never campaigns (an election timeout of 1000 s); the
		// test is its leader.
		TickInterval: 10 * time.Millisecond, ElectionTicks: 100000, HeartbeatTicks: 1,
		SnapshotCount: 1, CatchUpEntries: 1, StateMachine: sm,
	})
	if err != nil {
		t.Fatal(err)
	}
	// The bootstrap membership (entries 1-3) is applied, persisted and
	// snapshotted before the fault is armed.
	poll.Until(t, "the bootstrap entries applied and snapshotted", func() bool {
		return sm.appliedIndex() == 3 && n.snapIndex.Load() == 3
	})
	armed.Do(func() { close(armc) })
	app := &raftpb.Message{
		Type: raftpb.MsgApp.Enum(), From: proto.Uint64(1), To: proto.Uint64(2),
		Term: proto.Uint64(2), LogTerm: proto.Uint64(1), Index: proto.Uint64(3), Commit: proto.Uint64(4),
		Entries: []*raftpb.Entry{{Term: proto.Uint64(2), Index: proto.Uint64(4), Type: raftpb.EntryNormal.Enum(), Data: []byte("x")}},
	}
	if err := n.Step(context.Background(), app); err != nil {
		t.Fatal(err)
	}
	select {
	case <-n.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the node did not stop after its WAL write failed")
	}
	if err := n.Err(); !errors.Is(err, wal.ErrFailed) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("node error %v, want the WAL's ENOSPC", err)
	}
	if got := sm.appliedIndex(); got != 4 {
		t.Fatalf("apply reached %d; the test needs apply to have seen entry 4 before the write failed", got)
	}
	_ = n.Stop() // commits the state machine: only what the WAL holds
	if err := be.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	snap, err := wal.LastSnapshot(nil, walDir)
	if err != nil {
		t.Fatal(err)
	}
	w, err := wal.Open(walDir, snap, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _, ents, _ := w.ReadAll()
	w.Close()
	walLast := snap.Index
	if len(ents) > 0 {
		walLast = ents[len(ents)-1].GetIndex()
	}
	db2, err := pagestore.Open(dbPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	be2, err := mvcc.NewBackend(db2, mvcc.BackendConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer be2.Close()
	if ci := be2.ConsistentIndex(); ci > walLast {
		t.Fatalf("the page store's consistent index is %d, past the WAL's last durable index %d", ci, walLast)
	}
	if snap.Index > walLast {
		t.Fatalf("snapshot marker at %d past the WAL's last index %d", snap.Index, walLast)
	}
	t.Logf("apply saw index 4; WAL holds up to %d; page store at %d; snapshot at %d", walLast, be2.ConsistentIndex(), snap.Index)
}
