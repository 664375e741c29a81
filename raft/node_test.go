package raft

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/strata-db/strata/internal/poll"
	"github.com/strata-db/strata/wal"
)

// fileSM is a small durable state machine: it appends applied payloads to
// a list and, on Commit, writes the list and its consistent index to a
// file, the way the page store commits data and index together, and, as
// the page store does, never past the index the WAL holds (Persisted).
type fileSM struct {
	path string

	mu      sync.Mutex
	ci      uint64 // durable consistent index
	applied uint64
	durable uint64 // from Persisted
	data    []string
	dataIdx []uint64 // the index of each data item
	dup     int      // entries delivered twice past ci (must stay 0)
}

func openFileSM(t *testing.T, path string) *fileSM {
	sm := &fileSM{path: path}
	b, err := os.ReadFile(path)
	if err == nil && len(b) >= 8 {
		sm.ci = binary.BigEndian.Uint64(b)
		sm.applied = sm.ci
		for rest := b[8:]; len(rest) >= 12; {
			n := binary.BigEndian.Uint32(rest[8:])
			sm.dataIdx = append(sm.dataIdx, binary.BigEndian.Uint64(rest))
			sm.data = append(sm.data, string(rest[12:12+n]))
			rest = rest[12+n:]
		}
	} else if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return sm
}

func (s *fileSM) ConsistentIndex() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ci
}

func (s *fileSM) Apply(ents []*raftpb.Entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range ents {
		if e.GetIndex() <= s.applied {
			if e.GetIndex() > s.ci {
				s.dup++
			}
			continue
		}
		s.applied = e.GetIndex()
		if e.GetType() == raftpb.EntryNormal && len(e.GetData()) > 0 {
			s.data = append(s.data, string(e.GetData()))
			s.dataIdx = append(s.dataIdx, e.GetIndex())
		}
	}
}

func (s *fileSM) Persisted(index uint64) {
	s.mu.Lock()
	s.durable = index
	s.mu.Unlock()
}

func (s *fileSM) Commit() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	ci := min(s.applied, s.durable)
	if ci < s.ci {
		return nil
	}
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, ci)
	for i, d := range s.data {
		if s.dataIdx[i] > ci {
			break
		}
		b = binary.BigEndian.AppendUint64(b, s.dataIdx[i])
		b = binary.BigEndian.AppendUint32(b, uint32(len(d)))
		b = append(b, d...)
	}
	tmp := s.path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, s.path); err != nil {
		return err
	}
	s.ci = ci
	return nil
}

func (s *fileSM) snapshot() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.data...)
}

func startNode(t *testing.T, dir string, sm StateMachine, snapCount uint64, opts ...func(*Config)) *Node {
	t.Helper()
	cfg := Config{
		ID: 1, ClusterID: 7, Peers: []etcdraft.Peer{{ID: 1}},
		WALDir: filepath.Join(dir, "wal"),
		// 1 MiB segments: Open reads a whole segment twice (LastSnapshot,
		// then the log), which for a 64 MiB zero-filled one took 0.5-1 s
		// on a loaded disk and made the restart bound below flaky.
		WAL:           &wal.Options{SegmentSize: 1 << 20},
		TickInterval:  10 * time.Millisecond,
		ElectionTicks: 10, HeartbeatTicks: 1, SnapshotCount: snapCount, CatchUpEntries: 5,
		StateMachine: sm,
	}
	for _, o := range opts {
		o(&cfg)
	}
	n, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// proposeAndWait proposes v and waits until it is applied, as the server
// does (it knows the entry's effect by watching the state machine).
func proposeAndWait(t *testing.T, n *Node, sm *fileSM, v string) {
	t.Helper()
	poll.UntilNil(t, fmt.Sprintf("the proposal of %q to be accepted", v), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		err := n.Propose(ctx, []byte(v))
		if err != nil && err != ErrProposalDropped { // dropped: no leader yet
			t.Fatal(err)
		}
		return err
	})
	poll.Until(t, fmt.Sprintf("%q to be applied", v), func() bool {
		d := sm.snapshot()
		return len(d) > 0 && d[len(d)-1] == v
	})
}

func TestSingleMemberProposeRestartSnapshot(t *testing.T) {
	dir := t.TempDir()
	smPath := filepath.Join(dir, "sm")
	sm := openFileSM(t, smPath)
	n := startNode(t, dir, sm, 25)
	for i := 0; i < 120; i++ {
		proposeAndWait(t, n, sm, fmt.Sprintf("v%d", i))
	}
	if st := n.Status(); st.Leader != 1 || st.Applied < 120 {
		t.Fatalf("status %+v", st)
	}
	segsBefore := len(n.WAL().Segments())
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
	_ = segsBefore

	// Restart: the log replays only past the consistent index, and the
	// member becomes leader again without waiting for an election.
	// (Checked on the decision, not on a wall-clock bound, which a loaded
	// machine can break.)
	sm2 := openFileSM(t, smPath)
	n2 := startNode(t, dir, sm2, 25)
	defer n2.Stop()
	if !n2.campaignOnStart {
		t.Fatalf("a restarted sole voter must campaign at once (restored voters %v)", n2.restoredVoters)
	}
	proposeAndWait(t, n2, sm2, "after-restart")
	got := sm2.snapshot()
	if len(got) != 121 || got[0] != "v0" || got[119] != "v119" {
		t.Fatalf("state after restart has %d entries: %v ... ", len(got), got[:3])
	}
	if sm2.dup != 0 {
		t.Fatalf("%d entries re-applied past the consistent index", sm2.dup)
	}
}

func TestReadIndexBatchesAndWaitsForApply(t *testing.T) {
	dir := t.TempDir()
	sm := openFileSM(t, filepath.Join(dir, "sm"))
	n := startNode(t, dir, sm, 0)
	defer n.Stop()
	proposeAndWait(t, n, sm, "x")
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			idx, err := n.ReadIndex(ctx)
			if err != nil {
				errs <- err
				return
			}
			if idx < 2 {
				errs <- fmt.Errorf("read index %d below the applied proposal", idx)
				return
			}
			if err := n.WaitApplied(ctx, idx); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestSoleMemberTrimsInMemoryLog: a member alone in its configuration
// drops the in-memory log its state machine holds durably, between
// snapshots too (no follower will ask for it), and still replays its WAL
// after a restart and cuts its next snapshot.
func TestSoleMemberTrimsInMemoryLog(t *testing.T) {
	dir := t.TempDir()
	smPath := filepath.Join(dir, "sm")
	sm := openFileSM(t, smPath)
	const snapEvery = 5000
	// Small Readies (about two entries each): after the restart raft
	// replays the log up to the durable index in far more batches than
	// the apply queue holds, so the apply goroutine trims while raft has
	// not yet handed out every entry below that index. The trim must not
	// cut those away from under raft (it did: "unexpected error when
	// getting unapplied entries (requested index is unavailable due to
	// compaction)").
	small := func(c *Config) { c.MaxSizePerMsg = 4 << 10 }
	n := startNode(t, dir, sm, snapEvery, small)
	proposeAndWait(t, n, sm, "first")
	const total = 3000
	pad := strings.Repeat("x", 2<<10)
	for i := 0; i < total; i++ {
		v := fmt.Sprintf("v%d", i) + pad
		if err := n.Propose(context.Background(), []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, "every proposal applied", func() bool { return len(sm.snapshot()) == total+1 })
	// The page store commits on its own; here the test commits.
	if err := sm.Commit(); err != nil {
		t.Fatal(err)
	}
	ci := sm.ConsistentIndex()
	if ci < total {
		t.Fatalf("durable index %d after %d entries", ci, total)
	}
	proposeAndWait(t, n, sm, "after-commit") // an apply batch, which trims
	first, err := n.storage.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	if first != ci+1 {
		t.Fatalf("in-memory log starts at %d; the durable index is %d, so it should start at %d", first, ci, ci+1)
	}
	if si := n.snapIndex.Load(); si != 0 {
		t.Fatalf("a snapshot at %d: the trim must not need one", si)
	}
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
	sm2 := openFileSM(t, smPath)
	n2 := startNode(t, dir, sm2, snapEvery, small)
	defer n2.Stop()
	proposeAndWait(t, n2, sm2, "after-restart")
	if got := sm2.snapshot(); len(got) != total+3 || got[1] != "v0"+pad || got[total] != fmt.Sprintf("v%d", total-1)+pad {
		t.Fatalf("state after restart has %d entries", len(got))
	}
	// The next snapshot is cut above the trimmed log.
	for i := 0; n2.snapIndex.Load() == 0; i++ {
		if i > 2*snapEvery {
			t.Fatalf("no snapshot after %d more entries", i)
		}
		if i%500 == 0 {
			if err := sm2.Commit(); err != nil {
				t.Fatal(err)
			}
		}
		proposeAndWait(t, n2, sm2, fmt.Sprintf("w%d", i))
	}
}

// TestEmptyWALBootstraps: a new member whose first start stopped right
// after creating its WAL (nothing written to it) bootstraps on the next
// start instead of restarting with no voters, which never elects.
func TestEmptyWALBootstraps(t *testing.T) {
	dir := t.TempDir()
	w, err := wal.Create(filepath.Join(dir, "wal"), encodeMetadata(1, 7), &wal.Options{SegmentSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	sm := openFileSM(t, filepath.Join(dir, "sm"))
	n := startNode(t, dir, sm, 100)
	defer n.Stop()
	proposeAndWait(t, n, sm, "after-empty-wal")
	if st := n.Status(); st.Leader != 1 || len(st.Voters) != 1 {
		t.Fatalf("status after bootstrapping over an empty WAL: %+v", st)
	}
}
