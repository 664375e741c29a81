package wal

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/vfs"
)

// testOpts uses small segments so tests cross segment boundaries and
// preallocation stays cheap.
func testOpts(segSize int64) *Options {
	return &Options{SegmentSize: segSize}
}

// entryData is the deterministic payload of entry idx, so a reader can
// check every byte it gets back.
func entryData(idx uint64, size int) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(idx*31 + uint64(i)*7)
	}
	return b
}

func mkEntry(idx, term uint64, size int) *raftpb.Entry {
	return &raftpb.Entry{Index: proto.Uint64(idx), Term: proto.Uint64(term), Type: raftpb.EntryNormal.Enum(), Data: entryData(idx, size)}
}

func mkState(term, commit uint64) *raftpb.HardState {
	return &raftpb.HardState{Term: proto.Uint64(term), Vote: proto.Uint64(1), Commit: proto.Uint64(commit)}
}

func mustCreate(t testing.TB, dir string, opts *Options) *WAL {
	t.Helper()
	w, err := Create(dir, []byte("meta"), opts)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// checkEntries verifies that ents are exactly indexes from..to with the
// payloads entryData makes.
func checkEntries(t testing.TB, ents []*raftpb.Entry, from, to uint64, size int) {
	t.Helper()
	if uint64(len(ents)) != to-from+1 && !(to < from && len(ents) == 0) {
		t.Fatalf("got %d entries, want %d..%d", len(ents), from, to)
	}
	for i, e := range ents {
		want := from + uint64(i)
		if e.GetIndex() != want {
			t.Fatalf("entry %d has index %d, want %d", i, e.GetIndex(), want)
		}
		if !bytes.Equal(e.GetData(), entryData(want, size)) {
			t.Fatalf("entry %d: payload differs", want)
		}
	}
}

func TestCreateSaveReopen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "wal")
	w := mustCreate(t, dir, testOpts(8<<10))
	const n = 500
	for i := uint64(1); i <= n; i++ {
		size := 100
		if i%50 == 0 {
			size = 20000 // compressible, larger than a segment
		}
		if err := w.Save(mkState(1, i-1), []*raftpb.Entry{mkEntry(i, 1, size)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if len(listDir(t, dir)) < 5 {
		t.Fatalf("expected several segments, got %v", listDir(t, dir))
	}

	w, err := Open(dir, Snapshot{}, testOpts(8<<10))
	if err != nil {
		t.Fatal(err)
	}
	meta, st, ents, err := w.ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if string(meta) != "meta" {
		t.Fatalf("metadata %q", meta)
	}
	if st.GetCommit() != n-1 || st.GetTerm() != 1 {
		t.Fatalf("hard state %v", st)
	}
	if len(ents) != n {
		t.Fatalf("got %d entries", len(ents))
	}
	for i, e := range ents {
		idx := uint64(i + 1)
		size := 100
		if idx%50 == 0 {
			size = 20000
		}
		if e.GetIndex() != idx || !bytes.Equal(e.GetData(), entryData(idx, size)) {
			t.Fatalf("entry %d wrong", idx)
		}
	}
	// Appends continue after reopen.
	if err := w.Save(mkState(2, n), []*raftpb.Entry{mkEntry(n+1, 2, 10)}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	w, err = Open(dir, Snapshot{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, st, ents, _ = w.ReadAll()
	w.Close()
	if len(ents) != n+1 || st.GetTerm() != 2 {
		t.Fatalf("after second reopen: %d entries, state %v", len(ents), st)
	}
}

func listDir(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func TestLockExcludesSecondOpen(t *testing.T) {
	dir := t.TempDir()
	w := mustCreate(t, dir, testOpts(16<<10))
	defer w.Close()
	if _, err := Open(dir, Snapshot{}, nil); err == nil {
		t.Fatal("second Open of a locked WAL succeeded")
	}
	if _, err := Create(dir, nil, nil); !errors.Is(err, ErrExist) {
		t.Fatalf("Create over an existing WAL: %v", err)
	}
}

func TestOverwrittenTailReplacesEntries(t *testing.T) {
	dir := t.TempDir()
	w := mustCreate(t, dir, testOpts(16<<10))
	for i := uint64(1); i <= 10; i++ {
		if err := w.Save(mkState(1, 0), []*raftpb.Entry{mkEntry(i, 1, 8)}); err != nil {
			t.Fatal(err)
		}
	}
	// A new leader at term 2 overwrites from index 6.
	ents := []*raftpb.Entry{mkEntry(6, 2, 8), mkEntry(7, 2, 8)}
	if err := w.Save(mkState(2, 5), ents); err != nil {
		t.Fatal(err)
	}
	w.Close()
	w, err := Open(dir, Snapshot{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	_, _, got, _ := w.ReadAll()
	if len(got) != 7 || got[5].GetTerm() != 2 || got[6].GetIndex() != 7 {
		t.Fatalf("got %d entries, last %v", len(got), got[len(got)-1])
	}
}

func TestSnapshotReadAndPurge(t *testing.T) {
	dir := t.TempDir()
	opts := &Options{SegmentSize: 4 << 10, MaxWALs: 2}
	w := mustCreate(t, dir, opts)
	for i := uint64(1); i <= 300; i++ {
		if err := w.Save(mkState(1, i), []*raftpb.Entry{mkEntry(i, 1, 64)}); err != nil {
			t.Fatal(err)
		}
		if i == 200 {
			if err := w.SaveSnapshot(Snapshot{Index: 200, Term: 1}); err != nil {
				t.Fatal(err)
			}
		}
	}
	before := len(w.Segments())
	removed, err := w.Purge(200)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) == 0 || len(w.Segments()) != before-len(removed) {
		t.Fatalf("purge removed %d of %d segments", len(removed), before)
	}
	w.Close()

	w, err = Open(dir, Snapshot{Index: 200, Term: 1}, opts)
	if err != nil {
		t.Fatalf("open at snapshot after purge: %v", err)
	}
	_, st, ents, _ := w.ReadAll()
	w.Close()
	checkEntries(t, ents, 201, 300, 64)
	if st.GetCommit() != 300 {
		t.Fatalf("state %v", st)
	}
	if _, err := Open(dir, Snapshot{Index: 200, Term: 7}, opts); !errors.Is(err, ErrSnapshotMismatch) {
		t.Fatalf("open with wrong term: %v", err)
	}
	if _, err := Open(dir, Snapshot{Index: 250, Term: 1}, opts); !errors.Is(err, ErrSnapshotNotFound) {
		t.Fatalf("open at unrecorded snapshot: %v", err)
	}
}

func TestPurgeKeepsMaxWALs(t *testing.T) {
	dir := t.TempDir()
	opts := &Options{SegmentSize: 4 << 10, MaxWALs: 5}
	w := mustCreate(t, dir, opts)
	defer w.Close()
	for i := uint64(1); i <= 400; i++ {
		if err := w.Save(mkState(1, i), []*raftpb.Entry{mkEntry(i, 1, 64)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Purge(400); err != nil {
		t.Fatal(err)
	}
	if n := len(w.Segments()); n != 5 {
		t.Fatalf("%d segments after purge, want 5", n)
	}
}

func TestIterateListsUnits(t *testing.T) {
	dir := t.TempDir()
	w := mustCreate(t, dir, testOpts(8<<10))
	for i := uint64(1); i <= 50; i++ {
		if err := w.Save(mkState(1, i), []*raftpb.Entry{mkEntry(i, 1, 32)}); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	var types []RecordType
	last := uint64(0)
	torn, err := Iterate(nil, dir, func(pos Position, rec Record) error {
		types = append(types, rec.Type)
		if rec.Type == TypeEntry {
			e, err := DecodeEntry(rec)
			if err != nil {
				return err
			}
			if e.GetIndex() != last+1 {
				return fmt.Errorf("index %d after %d", e.GetIndex(), last)
			}
			last = e.GetIndex()
		}
		return nil
	})
	if err != nil || torn != nil {
		t.Fatalf("iterate: %v torn=%v", err, torn)
	}
	if last != 50 {
		t.Fatalf("last index %d", last)
	}
}

// TestLastSnapshot finds the newest marker across segments written after
// it without one, without reading the segments before the marker's (a
// damaged one there goes unread, as Open does not read it either), and
// returns the zero snapshot for a log with no marker.
func TestLastSnapshot(t *testing.T) {
	dir := t.TempDir()
	w := mustCreate(t, dir, testOpts(4<<10))
	for i := uint64(1); i <= 200; i++ {
		if err := w.Save(mkState(3, i), []*raftpb.Entry{mkEntry(i, 3, 32)}); err != nil {
			t.Fatal(err)
		}
		if i%30 == 0 && i <= 90 {
			cs := &raftpb.ConfState{Voters: []uint64{1, 2, 3}}
			if err := w.SaveSnapshot(Snapshot{Index: i, Term: 3, ConfState: cs}); err != nil {
				t.Fatal(err)
			}
		}
	}
	w.Close()
	check := func(what string) {
		t.Helper()
		s, err := LastSnapshot(nil, dir)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if s.Index != 90 || s.Term != 3 || len(s.ConfState.GetVoters()) != 3 {
			t.Fatalf("%s: last snapshot %+v", what, s)
		}
	}
	check("intact log")
	segs, err := listSegments(vfs.Default, dir)
	if err != nil {
		t.Fatal(err)
	}
	var markerSegs []int
	for i, seg := range segs {
		b, err := os.ReadFile(seg.path)
		if err != nil {
			t.Fatal(err)
		}
		src := newSegmentSource(bytes.NewReader(b), seg.path, int64(len(b)), scanChunk, nil)
		if _, err := scanSegment(src, seg, i == len(segs)-1, func(_ int64, rec Record) error {
			if rec.Type == TypeSnapshot {
				markerSegs = append(markerSegs, i)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(markerSegs); n != 3 || markerSegs[2] >= len(segs)-2 || markerSegs[2] == 0 {
		t.Fatalf("markers in segments %v of %d: want three, the last not in the first segment and two segments or more after it", markerSegs, len(segs))
	}
	// Damage the second record of the segment before the last marker's.
	damaged := segs[markerSegs[2]-1].path
	b, err := os.ReadFile(damaged)
	if err != nil {
		t.Fatal(err)
	}
	first, err := decodeRecord(b)
	if err != nil {
		t.Fatal(err)
	}
	b[first.StoredSize+headerSize] ^= 0xff
	if err := os.WriteFile(damaged, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Iterate(nil, dir, func(Position, Record) error { return nil }); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Iterate over the damaged log: %v, want ErrCorrupt", err)
	}
	check("a segment before the marker's damaged")

	empty := t.TempDir()
	w = mustCreate(t, empty, testOpts(4<<10))
	for i := uint64(1); i <= 50; i++ {
		if err := w.Save(mkState(3, i), []*raftpb.Entry{mkEntry(i, 3, 32)}); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	if s, err := LastSnapshot(nil, empty); err != nil || s.Index != 0 || s.Term != 0 {
		t.Fatalf("log without a marker: %+v, %v", s, err)
	}
}

// TestReadMetadata reads the metadata from the first segment's header,
// short or longer than the first read.
func TestReadMetadata(t *testing.T) {
	for _, n := range []int{0, 16, 4000, 9000} {
		dir := t.TempDir()
		meta := bytes.Repeat([]byte{0xa5}, n)
		w, err := Create(dir, meta, testOpts(64<<10))
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Save(mkState(1, 1), []*raftpb.Entry{mkEntry(1, 1, 32)}); err != nil {
			t.Fatal(err)
		}
		w.Close()
		got, err := ReadMetadata(nil, dir)
		if err != nil || !bytes.Equal(got, meta) {
			t.Fatalf("%d bytes of metadata: read %d bytes, %v", n, len(got), err)
		}
	}
}

func TestGatherWait(t *testing.T) {
	for _, c := range []struct{ last, window, want time.Duration }{
		{4 * time.Millisecond, 0, time.Millisecond},
		{4 * time.Millisecond, 500 * time.Microsecond, 500 * time.Microsecond},
		{4 * time.Millisecond, 2 * time.Millisecond, time.Millisecond},
		{0, time.Millisecond, 0},
	} {
		if got := gatherWait(c.last, c.window); got != c.want {
			t.Errorf("gatherWait(%v, %v) = %v, want %v", c.last, c.window, got, c.want)
		}
	}
}
