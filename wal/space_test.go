package wal

import (
	"bytes"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/strata-db/strata/internal/poll"
	"github.com/strata-db/strata/vfs"
)

// saveOne appends entry idx+1 (1000 bytes) to w with the hard state
// committing idx, failing the test on an error, and returns idx+1.
func saveOne(t *testing.T, w *WAL, idx uint64) uint64 {
	t.Helper()
	idx++
	if err := w.Save(mkState(1, idx-1), []*raftpb.Entry{mkEntry(idx, 1, 1000)}); err != nil {
		t.Fatal(err)
	}
	return idx
}

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

// TestSpareSegmentENOSPCKeepsAppending: when
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

// TestCreateOnSmallDisk: a disk without room for a
// full segment still gets a WAL, with smaller segments (logged once), and
// full-size segments come back once space allows.
func TestCreateOnSmallDisk(t *testing.T) {
	shortBackoff(t, time.Millisecond, 10*time.Millisecond)
	dir := t.TempDir()
	const seg = 8 << 20
	var room atomic.Int64 // the most one file may hold; the disk's free space
	room.Store(3 << 20)
	ffs := vfs.NewFaultFS(vfs.Default, func(ev vfs.Event) *vfs.Fault {
		// Segments take their blocks by preallocation (a spare's first
		// chunk, then the growth of the segment being written); a spare's
		// zero fill writes only what was preallocated.
		if (ev.Op == vfs.OpPreallocate || (strings.HasSuffix(ev.Path, tmpSuffix) && ev.Op == vfs.OpWrite)) &&
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
	if sizes := segmentSizes(t, dir); len(sizes) != 1 || sizes[0] != growChunk(seg) {
		t.Fatalf("first segment sizes %v, want one of %d bytes (a chunk; the segment grows as it fills)", sizes, growChunk(seg))
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
	// Each segment grows until the disk refuses and the log moves on: at
	// 3 MiB, or earlier when appends outran the growth (they extend the
	// file themselves, and the next piece then ends past 3 MiB).
	sizes := segmentSizes(t, dir)
	if len(sizes) < 3 {
		t.Fatalf("segment sizes %v, want the log cut into segments of about 3 MiB", sizes)
	}
	for _, s := range sizes[:len(sizes)-1] {
		if s >= seg {
			t.Fatalf("segment sizes %v, want every finished segment cut short at about 3 MiB", sizes)
		}
	}
	if n := logs.count("no room for a full segment"); n != 1 {
		t.Fatalf("small segments logged %d times, want once:\n%s", n, logs)
	}
	room.Store(1 << 62)
	poll.Until(t, "a full-size segment once space returned", func() bool {
		save()
		s := segmentSizes(t, dir)
		return s[len(s)-1] == seg && logs.count("back to full-size segments") > 0
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
	save := func() { idx = saveOne(t, w, idx) }
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

// allocated returns the bytes of disk the files in dir hold.
func allocated(t *testing.T, dir string) int64 {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range ents {
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(dir, e.Name()), &st); err != nil {
			t.Fatal(err)
		}
		n += st.Blocks * 512
	}
	return n
}

// TestSegmentsGrowWithTheLog: a new WAL takes one chunk of disk, not a
// whole segment, and its first segment grows a chunk at a time ahead of
// the writer: what the log holds is always allocated (appends are
// overwrites), and the disk used stays within two chunks of it. The next
// segment is allocated whole before the log moves to it (space reserved
// for a disk that fills). Everything reads back.
func TestSegmentsGrowWithTheLog(t *testing.T) {
	dir := t.TempDir()
	const seg = 1 << 20
	chunk := growChunk(seg)
	w := mustCreate(t, dir, &Options{SegmentSize: seg})
	defer w.Close()
	if got := allocated(t, dir); got > chunk {
		t.Fatalf("a new WAL holds %d bytes of disk, want at most one chunk (%d)", got, chunk)
	}
	idx := uint64(0)
	save := func() { idx = saveOne(t, w, idx) }
	for len(segmentSizes(t, dir)) == 1 {
		save()
		if idx%50 != 0 {
			continue
		}
		// Save returned, so the syncer is between batches and its
		// offset is stable.
		off := w.curOff
		poll.Until(t, fmt.Sprintf("the segment allocated past %d bytes", off), func() bool {
			return segmentSizes(t, dir)[0] >= off
		})
		got := allocated(t, dir)
		// At most one and a half chunks ahead, plus a margin for the file
		// system's own allocation (a partial last block, speculative
		// preallocation): far below a whole segment.
		limit := off + 2*chunk
		if tmpFiles(t, dir) > 0 { // checked after: a spare prepared in between only loosens the bound
			limit += seg // the next segment, whole, once three quarters are full
		}
		if got > limit {
			t.Fatalf("after %d entries (%d bytes in the first segment): %d bytes of disk, want at most %d", idx, off, got, limit)
		}
	}
	for len(segmentSizes(t, dir)) < 3 {
		save()
	}
	sizes := segmentSizes(t, dir)
	if sizes[1] != seg || sizes[2] != seg {
		t.Fatalf("segment sizes %v, want the segments after the first allocated whole (%d bytes)", sizes, seg)
	}
	if sizes[0] > seg || sizes[0] < seg-seg/4 {
		t.Fatalf("segment sizes %v, want the first grown to about %d bytes before the cut", sizes, seg)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	reopenAndCheck(t, dir, seg, idx)
	t.Logf("%d entries; segment sizes %v; %d bytes of disk", idx, sizes, allocated(t, dir))
}

// TestGrowthNeverOverwritesRecords: the preallocator zero-fills the
// segment being written while the writer appends, and a slow disk lets
// the writer catch up with the piece being filled (here: each piece is
// held until the writer waits for the preallocator). It must wait for the
// piece rather than have its records zeroed after the fact: every entry
// reads back, after a reopen that grows the last segment on.
func TestGrowthNeverOverwritesRecords(t *testing.T) {
	dir := t.TempDir()
	const seg = 64 << 10 // 8 KiB chunks: the writer keeps catching up
	// Each growth piece is held before its preallocation until the writer
	// waits for the preallocator (or the saves are done), so the writer
	// reaches every piece it can while the piece is being filled.
	hfs := &holdFS{FS: vfs.Default, release: make(chan struct{}, 1), done: make(chan struct{})}
	var pieceWaits atomic.Int64
	onWait := func(onPiece bool) {
		if onPiece {
			pieceWaits.Add(1)
		}
		select {
		case hfs.release <- struct{}{}:
		default:
		}
	}
	idx := uint64(0)
	for round := 0; round < 2; round++ {
		var w *WAL
		// Every segment grows (by default only a new log's first does).
		if round == 0 {
			w = mustCreate(t, dir, &Options{FS: hfs, SegmentSize: seg, growAll: true, onWriterWait: onWait})
		} else {
			var err error
			if w, err = Open(dir, Snapshot{}, &Options{FS: hfs, SegmentSize: seg, growAll: true, onWriterWait: onWait}); err != nil {
				t.Fatal(err)
			}
			if _, _, ents, err := w.ReadAll(); err != nil || uint64(len(ents)) != idx {
				t.Fatalf("reopen: %d entries, %v; want %d", len(ents), err, idx)
			}
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		errs := make(chan error, 8)
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 150; i++ {
					mu.Lock() // entries must be saved in index order
					idx++
					err := w.Save(mkState(1, idx-1), []*raftpb.Entry{mkEntry(idx, 1, 1000)})
					mu.Unlock()
					if err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		hfs.finish() // a piece still held goes on, before Close waits for it
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		hfs.mu.Lock()
		hfs.done = make(chan struct{}) // for the next round
		hfs.mu.Unlock()
	}
	if hfs.held.Load() == 0 || pieceWaits.Load() == 0 {
		t.Fatalf("%d growth pieces held, the writer waited for %d: the test did not make the writer catch up", hfs.held.Load(), pieceWaits.Load())
	}
	reopenAndCheck(t, dir, seg, idx)
	t.Logf("%d entries over segments %v; %d growth pieces held, the writer waited for a piece %d times",
		idx, segmentSizes(t, dir), hfs.held.Load(), pieceWaits.Load())
}

// TestCutStopsGrowth: at a cut, the segment's growth is stopped and
// waited for before its final fdatasync, so no growth piece is still
// pending when the next segment is renamed into place (nothing writes to
// a segment the log has moved past). Growth pieces are held until the
// writer waits for the preallocator, and entry sizes vary (seeded), so
// cuts keep coming while the last piece of a segment is held.
func TestCutStopsGrowth(t *testing.T) {
	seed := time.Now().UnixNano()
	if v := os.Getenv("STRATA_WAL_SEED"); v != "" {
		fmt.Sscan(v, &seed)
	}
	t.Logf("seed %d (STRATA_WAL_SEED=%d replays it)", seed, seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	hfs := &holdFS{FS: vfs.Default, release: make(chan struct{}, 1), done: make(chan struct{})}
	var cutWaits atomic.Int64
	onWait := func(onPiece bool) {
		if !onPiece {
			cutWaits.Add(1)
		}
		select {
		case hfs.release <- struct{}{}:
		default:
		}
	}
	dir := t.TempDir()
	w := mustCreate(t, dir, &Options{FS: hfs, SegmentSize: 64 << 10, growAll: true, onWriterWait: onWait})
	data := make([][]byte, 601)
	for idx := uint64(1); idx <= 600; idx++ {
		// Incompressible, and often more than the segment has left.
		data[idx] = make([]byte, 500+rng.IntN(15000))
		for i := range data[idx] {
			data[idx][i] = byte(rng.Uint32())
		}
		e := mkEntry(idx, 1, 0)
		e.Data = data[idx]
		if err := w.Save(mkState(1, idx-1), []*raftpb.Entry{e}); err != nil {
			t.Fatal(err)
		}
	}
	hfs.finish()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if n := hfs.pendingAtRename.Load(); n != 0 {
		t.Fatalf("%d segments were installed while the previous segment's growth was still pending", n)
	}
	if hfs.renames.Load() < 10 || cutWaits.Load() == 0 {
		t.Fatalf("%d segments installed, %d waits outside a piece: the test did not cut while growing", hfs.renames.Load(), cutWaits.Load())
	}
	r, err := Open(dir, Snapshot{}, &Options{SegmentSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	_, _, ents, err := r.ReadAll()
	if err != nil || len(ents) != 600 {
		t.Fatalf("read back %d entries, %v; want 600", len(ents), err)
	}
	for i, e := range ents {
		if idx := uint64(i + 1); e.GetIndex() != idx || !bytes.Equal(e.Data, data[idx]) {
			t.Fatalf("entry %d (index %d) differs", idx, e.GetIndex())
		}
	}
	t.Logf("%d segments installed, %d growth pieces held; the writer waited for growth outside a piece %d times",
		hfs.renames.Load(), hfs.held.Load(), cutWaits.Load())
}

// holdFS holds each preallocation of an installed segment (a growth
// piece: spares are prepared under tmpSuffix names) until release
// receives or done is closed. It counts the segment installs (renames of
// a prepared file) made while a piece was held.
type holdFS struct {
	vfs.FS
	release chan struct{}
	mu      sync.Mutex
	done    chan struct{}
	held    atomic.Int64
	// waiting: pieces held now; renames, pendingAtRename: segment installs,
	// and those made while waiting > 0.
	waiting, renames, pendingAtRename atomic.Int64
}

func (h *holdFS) Rename(from, to string) error {
	if strings.HasSuffix(from, tmpSuffix) {
		h.renames.Add(1)
		if h.waiting.Load() > 0 {
			h.pendingAtRename.Add(1)
		}
	}
	return h.FS.Rename(from, to)
}

func (h *holdFS) finish() {
	h.mu.Lock()
	close(h.done)
	h.mu.Unlock()
}

func (h *holdFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := h.FS.OpenFile(name, flag, perm)
	if err != nil || strings.HasSuffix(name, tmpSuffix) {
		return f, err
	}
	return &holdFile{File: f, h: h}, nil
}

type holdFile struct {
	vfs.File
	h *holdFS
}

func (f *holdFile) Preallocate(off, n int64) error {
	f.h.held.Add(1)
	f.h.waiting.Add(1)
	f.h.mu.Lock()
	done := f.h.done
	f.h.mu.Unlock()
	select {
	case <-f.h.release:
	case <-done:
	}
	f.h.waiting.Add(-1)
	return f.File.Preallocate(off, n)
}

// TestGrowthFailureCutsTheSegment: when the segment being written cannot
// grow (EIO on its preallocation or its zero fill), no append fails: the
// log moves to the next segment where the current one ends, the failure
// is logged, and everything reads back. (A failed fdatasync of the growth
// takes the same path; a hook cannot tell it from the writer's.)
func TestGrowthFailureCutsTheSegment(t *testing.T) {
	for _, op := range []vfs.Op{vfs.OpPreallocate, vfs.OpWrite} {
		t.Run(op.String(), func(t *testing.T) {
			dir := t.TempDir()
			const seg = 256 << 10
			chunk := growChunk(seg)
			var failed atomic.Int32
			ffs := vfs.NewFaultFS(vfs.Default, func(ev vfs.Event) *vfs.Fault {
				// Growth is the only preallocation of an installed segment
				// at or past its first chunk; its zero fill is told from the
				// writer's writes by size (the writer's are a few KiB here).
				if strings.HasSuffix(ev.Path, tmpSuffix) || ev.Op != op {
					return nil
				}
				switch {
				case op == vfs.OpPreallocate && ev.Off >= chunk,
					op == vfs.OpWrite && ev.Off >= chunk && int64(ev.Len) == min(chunk, growZeros):
					failed.Add(1)
					return &vfs.Fault{Err: vfs.EIO}
				}
				return nil
			})
			logs := &logBuffer{}
			w := mustCreate(t, dir, &Options{FS: ffs, SegmentSize: seg, Logger: logs.logger(), growAll: true})
			idx := uint64(0)
			for idx < 2000 { // about 2 MB: segments cut at their first chunk
				idx++
				if err := w.Save(mkState(1, idx-1), []*raftpb.Entry{mkEntry(idx, 1, 1000)}); err != nil {
					t.Fatalf("append %d while the segment cannot grow: %v", idx, err)
				}
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			sizes := segmentSizes(t, dir)
			if failed.Load() == 0 || len(sizes) < 4 {
				t.Fatalf("%d growth failures injected; segment sizes %v, want segments cut short", failed.Load(), sizes)
			}
			for _, s := range sizes[:len(sizes)-1] {
				if s >= seg {
					t.Fatalf("segment sizes %v: a segment that could not grow was not cut short", sizes)
				}
			}
			if n := logs.count("cannot grow the WAL segment"); n == 0 {
				t.Fatalf("growth failure not logged:\n%s", logs)
			}
			reopenAndCheck(t, dir, seg, idx)
			t.Logf("%d entries; %d growth failures; segment sizes %v", idx, failed.Load(), sizes)
		})
	}
}
