package wal

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/strata-db/strata/internal/poll"
	"github.com/strata-db/strata/vfs"
)

// logBuffer collects a logger's records for assertions.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func (l *logBuffer) count(msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.buf.String(), msg)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// shortBackoff makes preallocation retries fast for the test.
func shortBackoff(t *testing.T, lo, hi time.Duration) {
	oldLo, oldHi := preallocBackoffMin, preallocBackoffMax
	preallocBackoffMin, preallocBackoffMax = lo, hi
	t.Cleanup(func() { preallocBackoffMin, preallocBackoffMax = oldLo, oldHi })
}

// segmentSizes lists the sizes of dir's segment files in log order.
func segmentSizes(t *testing.T, dir string) []int64 {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if _, _, ok := parseSegmentName(e.Name()); ok {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	var sizes []int64
	for _, n := range names {
		st, err := os.Stat(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, st.Size())
	}
	return sizes
}

func tmpFiles(t *testing.T, dir string) int {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), tmpSuffix) {
			n++
		}
	}
	return n
}

// spareFilled reports whether a temporary segment file has reached size
// bytes: its preparation has nothing left to do but the fdatasync.
func spareFilled(t *testing.T, dir string, size int64) bool {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if st, err := e.Info(); err == nil && strings.HasSuffix(e.Name(), tmpSuffix) && st.Size() == size {
			return true
		}
	}
	return false
}

// TestSpareSegmentENOSPCKeepsAppending is issue 17 item 3 at the WAL: when
// the disk has no room for the next segment, appends go on into the
// current segment past its size (no write has failed), preallocation is
// retried with backoff and logged once, and once space returns the log
// moves to a new segment by itself. Everything appended reads back.
func TestSpareSegmentENOSPCKeepsAppending(t *testing.T) {
	const lo, hi = 2 * time.Millisecond, 40 * time.Millisecond
	shortBackoff(t, lo, hi)
	dir := t.TempDir()
	const seg = 64 << 10
	var full atomic.Bool
	var attemptsMu sync.Mutex
	var attempts []time.Time // failed preparations (opens of a temporary file while full)
	ffs := vfs.NewFaultFS(vfs.Default, func(ev vfs.Event) *vfs.Fault {
		if !full.Load() || !strings.HasSuffix(ev.Path, tmpSuffix) {
			return nil
		}
		switch ev.Op {
		case vfs.OpOpen:
			attemptsMu.Lock()
			attempts = append(attempts, time.Now())
			attemptsMu.Unlock()
		case vfs.OpPreallocate:
			// A full disk refuses the reservation. (Writing the head into
			// the spare taken before the disk filled needs no new blocks.)
			return &vfs.Fault{Err: vfs.ENOSPC}
		}
		return nil
	})
	logs := &logBuffer{}
	w := mustCreate(t, dir, &Options{FS: ffs, SegmentSize: seg, Logger: logs.logger()})
	defer w.Close()

	idx := uint64(0)
	save := func() {
		t.Helper()
		idx++
		if err := w.Save(mkState(1, idx-1), []*raftpb.Entry{mkEntry(idx, 1, 1000)}); err != nil {
			t.Fatalf("append %d with the WAL disk full: %v", idx, err)
		}
	}
	// The first segment fills to three quarters, so the spare is prepared
	// before the disk fills.
	for w.curOff < seg-seg/4 {
		save()
	}
	poll.Until(t, "the spare segment", func() bool { return spareFilled(t, dir, seg) })
	full.Store(true)
	for written := 0; written < 4*seg; written += 1000 {
		save()
	}
	sizes := segmentSizes(t, dir)
	if len(sizes) != 2 || sizes[1] < 2*seg {
		t.Fatalf("segment sizes %v with the disk full, want the spare's cut and then one segment grown past %d bytes", sizes, seg)
	}
	poll.Until(t, "five failed preparations", func() bool {
		attemptsMu.Lock()
		defer attemptsMu.Unlock()
		return len(attempts) >= 5
	})
	if n := logs.count("cannot preallocate the next WAL segment"); n != 1 {
		t.Fatalf("preallocation failure logged %d times, want once:\n%s", n, logs)
	}
	// Backoff, not a hot loop: each retry waits at least as long as the
	// schedule says (a lower bound, which no scheduling delay can break).
	attemptsMu.Lock()
	for i := 1; i < 5; i++ {
		want := min(lo<<(i-1), hi)
		if gap := attempts[i].Sub(attempts[i-1]); gap < want {
			t.Errorf("retry %d came %v after the previous attempt, want >= %v", i, gap, want)
		}
	}
	attemptsMu.Unlock()

	// Space returns: a later append moves the log to a new segment.
	full.Store(false)
	poll.Until(t, "a new segment once space returned", func() bool {
		save()
		return len(segmentSizes(t, dir)) == 3
	})
	if n := logs.count("preallocated the next WAL segment again"); n != 1 {
		t.Fatalf("recovery logged %d times, want once:\n%s", n, logs)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if n := tmpFiles(t, dir); n != 0 {
		t.Fatalf("%d temporary segment files left after Close", n)
	}
	reopenAndCheck(t, dir, seg, idx)
	t.Logf("%d entries appended, %d with no spare; segment sizes %v", idx, 4*seg/1000, segmentSizes(t, dir))
}

// TestCreateOnSmallDisk is issue 17 item 4: a disk without room for a
// full segment still gets a WAL, with smaller segments (logged once), and
// full-size segments come back once space allows.
func TestCreateOnSmallDisk(t *testing.T) {
	shortBackoff(t, time.Millisecond, 10*time.Millisecond)
	dir := t.TempDir()
	const seg = 8 << 20
	var room atomic.Int64 // the most one file may hold; the disk's free space
	room.Store(3 << 20)
	ffs := vfs.NewFaultFS(vfs.Default, func(ev vfs.Event) *vfs.Fault {
		if strings.HasSuffix(ev.Path, tmpSuffix) && (ev.Op == vfs.OpPreallocate || ev.Op == vfs.OpWrite) &&
			ev.Off+int64(ev.Len) > room.Load() {
			return &vfs.Fault{Err: vfs.ENOSPC}
		}
		return nil
	})
	logs := &logBuffer{}
	w, err := Create(dir, []byte("meta"), &Options{FS: ffs, SegmentSize: seg, Logger: logs.logger()})
	if err != nil {
		t.Fatalf("create on a disk with 3 MiB free: %v", err)
	}
	defer w.Close()
	if sizes := segmentSizes(t, dir); len(sizes) != 1 || sizes[0] != 2<<20 {
		t.Fatalf("first segment sizes %v, want one of 2 MiB (8 and 4 MiB do not fit)", sizes)
	}
	idx := uint64(0)
	save := func() {
		t.Helper()
		ents := make([]*raftpb.Entry, 50)
		for i := range ents {
			idx++
			ents[i] = mkEntry(idx, 1, 1000)
		}
		if err := w.Save(mkState(1, idx), ents); err != nil {
			t.Fatalf("append up to %d: %v", idx, err)
		}
	}
	for idx < 12000 { // about 12 MB: six small segments
		save()
	}
	sizes := segmentSizes(t, dir)
	if len(sizes) < 5 {
		t.Fatalf("segment sizes %v, want the log cut into 2 MiB segments", sizes)
	}
	for _, s := range sizes {
		if s != 2<<20 {
			t.Fatalf("segment sizes %v, want every segment 2 MiB", sizes)
		}
	}
	if n := logs.count("no room for a full segment"); n != 1 {
		t.Fatalf("small segments logged %d times, want once:\n%s", n, logs)
	}
	room.Store(1 << 62)
	poll.Until(t, "a full-size segment once space returned", func() bool {
		save()
		s := segmentSizes(t, dir)
		return s[len(s)-1] == seg
	})
	if n := logs.count("back to full-size segments"); n != 1 {
		t.Fatalf("full-size segments logged %d times, want once:\n%s", n, logs)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	reopenAndCheck(t, dir, seg, idx)
	t.Logf("%d entries; segment sizes %v", idx, segmentSizes(t, dir))
}

// TestSpareOnlyWhenNearlyFull: the preallocator prepares no segment
// beyond the first until the current one is three quarters full, then
// exactly one (a new WAL used to take two segments of disk at once, and
// before that three), and none again until the next segment is three
// quarters full. The log reads back across the cut.
func TestSpareOnlyWhenNearlyFull(t *testing.T) {
	dir := t.TempDir()
	var opens atomic.Int32
	ffs := vfs.NewFaultFS(vfs.Default, func(ev vfs.Event) *vfs.Fault {
		if ev.Op == vfs.OpOpen && strings.HasSuffix(ev.Path, tmpSuffix) {
			opens.Add(1)
		}
		return nil
	})
	const seg = 1 << 20
	w := mustCreate(t, dir, &Options{FS: ffs, SegmentSize: seg})
	defer w.Close()
	// Only the writer sets wanted, so these checks need no waiting: while
	// it is clear the preallocator cannot have started a file.
	spare := func() (wanted, ready bool) {
		w.pre.mu.Lock()
		defer w.pre.mu.Unlock()
		return w.pre.wanted, w.pre.ready != nil
	}
	idx := uint64(0)
	save := func() {
		t.Helper()
		idx++
		if err := w.Save(mkState(1, idx-1), []*raftpb.Entry{mkEntry(idx, 1, 1000)}); err != nil {
			t.Fatal(err)
		}
	}
	check := func(when string, wantWanted bool, wantOpens int32) {
		t.Helper()
		if wanted, _ := spare(); wanted != wantWanted {
			t.Fatalf("%s: spare wanted = %v, want %v", when, wanted, wantWanted)
		}
		if n := opens.Load(); n != wantOpens {
			t.Fatalf("%s: %d segment files prepared, want %d", when, n, wantOpens)
		}
	}
	check("after Create", false, 1)
	for w.curOff+1100 < seg-seg/4 {
		save()
	}
	check(fmt.Sprintf("at %d of %d bytes", w.curOff, seg), false, 1)
	save()
	poll.Until(t, "the spare, once the segment is three quarters full", func() bool {
		_, ready := spare()
		return ready
	})
	check("with the spare ready", true, 2)
	if n := tmpFiles(t, dir); n != 1 {
		t.Fatalf("%d spare files, want 1", n)
	}
	for len(segmentSizes(t, dir)) < 2 {
		save()
	}
	check("after the cut to the spare", false, 2)
	if n := tmpFiles(t, dir); n != 0 {
		t.Fatalf("%d spare files right after the cut, want 0", n)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	reopenAndCheck(t, dir, seg, idx)
}

// reopenAndCheck opens the closed log in dir and checks that it holds
// entries 1..n of 1000 bytes.
func reopenAndCheck(t *testing.T, dir string, seg int64, n uint64) {
	t.Helper()
	w, err := Open(dir, Snapshot{}, &Options{SegmentSize: seg})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	_, _, ents, _ := w.ReadAll()
	checkEntries(t, ents, 1, n, 1000)
}
