package raft

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	etcdraft "go.etcd.io/raft/v3"

	"github.com/strata-db/strata/wal"
)

// smallSegments gives a test WAL several segments without 64 MiB files.
var smallSegments = &wal.Options{SegmentSize: 64 << 10, NoZeroFill: true, MaxWALs: -1}

func startNodeWAL(dir string, sm StateMachine) (*Node, error) {
	return Start(Config{
		ID: 1, ClusterID: 7, Peers: []etcdraft.Peer{{ID: 1}},
		WALDir: filepath.Join(dir, "wal"), StatePath: filepath.Join(dir, "sm"), WAL: smallSegments,
		TickInterval: 10 * time.Millisecond, ElectionTicks: 10, HeartbeatTicks: 1, StateMachine: sm,
	})
}

// runAndStop starts a member on dir, applies n proposals of size bytes,
// and stops it, which commits the state machine at its last applied index.
func runAndStop(t *testing.T, dir string, n, size int) *fileSM {
	t.Helper()
	sm := openFileSM(t, filepath.Join(dir, "sm"))
	node, err := startNodeWAL(dir, sm)
	if err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat("x", size)
	for i := 0; i < n; i++ {
		proposeAndWait(t, node, sm, fmt.Sprintf("v%d-%s", i, pad))
	}
	if err := node.Stop(); err != nil {
		t.Fatal(err)
	}
	return openFileSM(t, filepath.Join(dir, "sm"))
}

// walPositions lists where each entry index was written, in log order.
func walPositions(t *testing.T, walDir string) (idx []uint64, pos []wal.Position) {
	t.Helper()
	_, err := wal.Iterate(nil, walDir, func(p wal.Position, rec wal.Record) error {
		if rec.Type == wal.TypeEntry {
			e, err := wal.DecodeEntry(rec)
			if err != nil {
				return err
			}
			idx, pos = append(idx, e.GetIndex()), append(pos, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return idx, pos
}

// lastWALIndex is the last entry index a reader of walDir finds (whole
// units only, as Open keeps them).
func lastWALIndex(t *testing.T, walDir string) uint64 {
	idx, _ := walPositions(t, walDir)
	if len(idx) == 0 {
		return 0
	}
	return idx[len(idx)-1]
}

// truncateAtEntry cuts the file holding entry index at that entry's
// record, as an operator's truncate or a disk losing the end of a file
// would, and removes every later segment.
func truncateAtEntry(t *testing.T, walDir string, index uint64) {
	t.Helper()
	idx, pos := walPositions(t, walDir)
	i := sort.Search(len(idx), func(i int) bool { return idx[i] >= index })
	if i == len(idx) || idx[i] != index {
		t.Fatalf("entry %d not in the WAL", index)
	}
	p := pos[i]
	if err := os.Truncate(p.File, p.Offset); err != nil {
		t.Fatal(err)
	}
	segs, _ := filepath.Glob(filepath.Join(walDir, "*.wal"))
	for _, s := range segs {
		if s > p.File {
			if err := os.Remove(s); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func wantWALBehind(t *testing.T, err error, walDir string, walLast, ci uint64) {
	t.Helper()
	var wb *WALBehindError
	if !errors.Is(err, ErrWALBehind) || !errors.As(err, &wb) {
		t.Fatalf("Start: %v, want ErrWALBehind", err)
	}
	if wb.WALLastIndex != walLast || wb.ConsistentIndex != ci {
		t.Fatalf("error says WAL last %d, consistent index %d; want %d and %d", wb.WALLastIndex, wb.ConsistentIndex, walLast, ci)
	}
	msg := err.Error()
	facts := fmt.Sprintf("ends at index %d", walLast)
	if walLast == 0 {
		facts = "holds no WAL"
	}
	for _, want := range []string{
		walDir, filepath.Join(filepath.Dir(walDir), "sm"), facts, fmt.Sprintf("up to index %d", ci),
		"stratautl snapshot restore", "etcdctl member remove", "--wal-dir",
	} {
		if !strings.Contains(msg, want) {
			t.Fatalf("error lacks %q:\n%s", want, msg)
		}
	}
}

// TestStartRefusesWALBehindStateMachine builds the bad states for real: a
// member runs, applies and commits, stops; then its WAL loses records
// (the end of its last segment, whole trailing segments, or the whole
// directory) and it is started again on the same state machine.
func TestStartRefusesWALBehindStateMachine(t *testing.T) {
	t.Run("truncated-segment", func(t *testing.T) {
		dir := t.TempDir()
		sm := runAndStop(t, dir, 40, 10)
		walDir := filepath.Join(dir, "wal")
		if sm.ci != lastWALIndex(t, walDir) {
			t.Fatalf("after a clean stop the state machine is at %d, the WAL at %d", sm.ci, lastWALIndex(t, walDir))
		}
		truncateAtEntry(t, walDir, sm.ci-5)
		last := lastWALIndex(t, walDir)
		if last >= sm.ci {
			t.Fatalf("truncation left the WAL at %d", last)
		}
		_, err := startNodeWAL(dir, sm)
		wantWALBehind(t, err, walDir, last, sm.ci)
		// Refused again on a second try: the refusal changed nothing.
		_, err = startNodeWAL(dir, openFileSM(t, filepath.Join(dir, "sm")))
		wantWALBehind(t, err, walDir, last, sm.ci)
	})
	t.Run("deleted-segments", func(t *testing.T) {
		dir := t.TempDir()
		sm := runAndStop(t, dir, 300, 2000) // ~600 KiB: several 64 KiB segments
		walDir := filepath.Join(dir, "wal")
		segs, _ := filepath.Glob(filepath.Join(walDir, "*.wal"))
		if len(segs) < 4 {
			t.Fatalf("want several segments, have %d", len(segs))
		}
		for _, s := range segs[len(segs)-2:] {
			if err := os.Remove(s); err != nil {
				t.Fatal(err)
			}
		}
		last := lastWALIndex(t, walDir)
		_, err := startNodeWAL(dir, sm)
		wantWALBehind(t, err, walDir, last, sm.ci)
	})
	t.Run("no-wal", func(t *testing.T) {
		dir := t.TempDir()
		sm := runAndStop(t, dir, 5, 10)
		walDir := filepath.Join(dir, "wal")
		if err := os.RemoveAll(walDir); err != nil {
			t.Fatal(err)
		}
		_, err := startNodeWAL(dir, sm)
		wantWALBehind(t, err, walDir, 0, sm.ci)
		var wb *WALBehindError
		if errors.As(err, &wb); !wb.NoWAL || !strings.Contains(err.Error(), "holds no WAL") {
			t.Fatalf("no-WAL refusal: %v", err)
		}
		if wal.Exist(nil, walDir) {
			t.Fatalf("the refused start created a WAL in %s", walDir)
		}
	})
}

// TestStartAcceptsLegitimateWALStates: the states a correct member can be
// in must all still start and serve.
func TestStartAcceptsLegitimateWALStates(t *testing.T) {
	restart := func(t *testing.T, dir string) {
		t.Helper()
		sm := openFileSM(t, filepath.Join(dir, "sm"))
		n, err := startNodeWAL(dir, sm)
		if err != nil {
			t.Fatalf("restart: %v", err)
		}
		defer n.Stop()
		proposeAndWait(t, n, sm, "after-restart")
	}
	t.Run("fresh-then-restart", func(t *testing.T) {
		dir := t.TempDir()
		runAndStop(t, dir, 1, 1)
		restart(t, dir)
	})
	t.Run("torn-tail-beyond-state-machine", func(t *testing.T) {
		// The last entries were being written when the process died and
		// the state machine had not committed them: Open truncates them,
		// and the consistent index is still within the WAL.
		dir := t.TempDir()
		sm := runAndStop(t, dir, 30, 10)
		walDir := filepath.Join(dir, "wal")
		idx, pos := walPositions(t, walDir)
		p := pos[len(pos)-1]
		if err := os.Truncate(p.File, p.Offset+20); err != nil { // mid-record
			t.Fatal(err)
		}
		setConsistentIndex(t, sm, idx[len(idx)-1]-3)
		restart(t, dir)
	})
	t.Run("snapshot-marker-last", func(t *testing.T) {
		// A restored data dir: the WAL ends with a snapshot marker, no
		// entry after it, and the state machine sits exactly at it.
		dir := t.TempDir()
		walDir := filepath.Join(dir, "wal")
		index, _, err := CreateRestoredWAL(walDir, 1, 7, []etcdraft.Peer{{ID: 1}}, smallSegments)
		if err != nil {
			t.Fatal(err)
		}
		sm := openFileSM(t, filepath.Join(dir, "sm"))
		setConsistentIndex(t, sm, index)
		restart(t, dir)
	})
}

// setConsistentIndex rewrites the test state machine's file with index
// as its consistent index, as if its last commit had been at index.
func setConsistentIndex(t *testing.T, sm *fileSM, index uint64) {
	t.Helper()
	b, err := os.ReadFile(sm.path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if len(b) < 8 {
		b = make([]byte, 8)
	}
	binary.BigEndian.PutUint64(b, index)
	if err := os.WriteFile(sm.path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
