package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/strata-db/strata/vfs"
)

// copyDir copies the regular files of src into a new temporary directory.
func copyDir(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() || e.Name() == lockName {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

type recPos struct {
	Position
	size     int // stored size, padding included
	unpadded int // header plus payload, without padding
}

// recordPositions lists every record of dir, segment headers included.
func recordPositions(t testing.TB, dir string) []recPos {
	t.Helper()
	segs, err := listSegments(vfs.Default, dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []recPos
	for _, s := range segs {
		data, err := os.ReadFile(s.path)
		if err != nil {
			t.Fatal(err)
		}
		off := 0
		for off < len(data) {
			rec, err := decodeRecord(data[off:])
			if err != nil {
				break
			}
			n := int(binary.LittleEndian.Uint32(data[off:]))
			out = append(out, recPos{Position{s.path, int64(off)}, rec.StoredSize, headerSize + n})
			off += rec.StoredSize
		}
	}
	return out
}

// TestTornTail tears the last segment at every byte offset inside its last
// three records, three ways: truncated, zeroed (a zero-filled segment whose
// pages never reached disk), and overwritten with junk. Every record that
// ended before the tear must come back, nothing after it, and appends must
// work afterwards.
func TestTornTail(t *testing.T) {
	src := t.TempDir()
	opts := testOpts(64 << 10)
	w := mustCreate(t, src, opts)
	const n = 40
	for i := uint64(1); i <= n; i++ {
		// Entries only: each Save is a one-record unit.
		if err := w.Save(nil, []*raftpb.Entry{mkEntry(i, 1, 60+int(i))}); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	pos := recordPositions(t, src)
	last3 := pos[len(pos)-3:]
	seg := last3[0].File
	if last3[2].File != seg {
		t.Fatal("last three records span segments; enlarge the segment")
	}
	begin := last3[0].Offset
	end := last3[2].Offset + int64(last3[2].size)
	rng := rand.New(rand.NewSource(1))
	cases := 0
	for cut := begin; cut < end; cut++ {
		for _, mode := range []string{"truncate", "zero", "junk"} {
			// Entries whose record ends at or before cut survive. Zeroing
			// only the padding leaves a record intact.
			survivors := uint64(n - 3)
			for i, p := range last3 {
				end := p.Offset + int64(p.size)
				if mode == "zero" {
					end = p.Offset + int64(p.unpadded)
				}
				if end <= cut {
					survivors = uint64(n-3) + uint64(i) + 1
				}
			}
			dir := copyDir(t, src)
			path := filepath.Join(dir, filepath.Base(seg))
			tear(t, path, cut, end, mode, rng)
			w, err := Open(dir, Snapshot{}, opts)
			if err != nil {
				t.Fatalf("%s at %d: open: %v", mode, cut, err)
			}
			_, _, ents, _ := w.ReadAll()
			if uint64(len(ents)) != survivors {
				t.Fatalf("%s at %d: %d entries survive, want %d", mode, cut, len(ents), survivors)
			}
			for i, e := range ents {
				if e.GetIndex() != uint64(i+1) || len(e.GetData()) != 60+i+1 {
					t.Fatalf("%s at %d: entry %d wrong", mode, cut, i+1)
				}
			}
			next := survivors + 1
			if err := w.Save(nil, []*raftpb.Entry{mkEntry(next, 2, 10)}); err != nil {
				t.Fatalf("%s at %d: append after repair: %v", mode, cut, err)
			}
			w.Close()
			w, err = Open(dir, Snapshot{}, opts)
			if err != nil {
				t.Fatalf("%s at %d: reopen after append: %v", mode, cut, err)
			}
			_, _, ents, _ = w.ReadAll()
			w.Close()
			if uint64(len(ents)) != next || ents[len(ents)-1].GetTerm() != 2 {
				t.Fatalf("%s at %d: after append got %d entries", mode, cut, len(ents))
			}
			cases++
		}
	}
	t.Logf("%d torn-tail cases over bytes [%d,%d) of %s", cases, begin, end, filepath.Base(seg))
}

func tear(t testing.TB, path string, cut, end int64, mode string, rng *rand.Rand) {
	t.Helper()
	switch mode {
	case "truncate":
		if err := os.Truncate(path, cut); err != nil {
			t.Fatal(err)
		}
		return
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, end-cut)
	if mode == "junk" {
		rng.Read(b)
	}
	if _, err := f.WriteAt(b, cut); err != nil {
		t.Fatal(err)
	}
}

// TestMidLogCorruption flips one bit in every record of a middle segment.
// Each case must refuse with ErrCorrupt naming the file and the record's
// offset; a single successful open would be a silent skip.
func TestMidLogCorruption(t *testing.T) {
	src := t.TempDir()
	opts := testOpts(4 << 10)
	w := mustCreate(t, src, opts)
	for i := uint64(1); i <= 200; i++ {
		if err := w.Save(mkState(1, i-1), []*raftpb.Entry{mkEntry(i, 1, 40)}); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	segs, _ := listSegments(vfs.Default, src)
	if len(segs) < 5 {
		t.Fatalf("only %d segments", len(segs))
	}
	middle := segs[len(segs)/2].path
	var targets []recPos
	for _, p := range recordPositions(t, src) {
		if p.File == middle {
			targets = append(targets, p)
		}
	}
	seed := int64(len(targets))
	rng := rand.New(rand.NewSource(seed))
	silent := 0
	for _, p := range targets {
		dir := copyDir(t, src)
		path := filepath.Join(dir, filepath.Base(middle))
		bit := rng.Int63n(int64(p.size) * 8)
		flipBit(t, path, p.Offset*8+bit)
		w, err := Open(dir, Snapshot{}, opts)
		if err == nil {
			silent++
			w.Close()
			t.Errorf("flip of bit %d in record at offset %d: open succeeded", bit, p.Offset)
			continue
		}
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("flip at offset %d: error %v does not match ErrCorrupt", p.Offset, err)
		}
		want := fmt.Sprintf("%s at offset %d", path, p.Offset)
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
		// Iterate, which the verify tool uses, must agree.
		if _, err := Iterate(nil, dir, func(Position, Record) error { return nil }); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Iterate after flip at %d: %v", p.Offset, err)
		}
	}
	t.Logf("%d records flipped in %s, %d silent skips", len(targets), filepath.Base(middle), silent)
}

func flipBit(t testing.TB, path string, bit int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, bit/8); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 1 << (bit % 8)
	if _, err := f.WriteAt(b, bit/8); err != nil {
		t.Fatal(err)
	}
}

// TestCorruptionInLastSegmentBeforeDurableBatches: a bit flip in an old,
// fdatasync'd record of the last segment is followed by records of later
// batches, so it cannot be a torn write and must be refused.
func TestCorruptionInLastSegmentBeforeDurableBatches(t *testing.T) {
	dir := t.TempDir()
	w := mustCreate(t, dir, testOpts(1<<20))
	for i := uint64(1); i <= 20; i++ {
		if err := w.Save(nil, []*raftpb.Entry{mkEntry(i, 1, 50)}); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	pos := recordPositions(t, dir)
	p := pos[5]
	flipBit(t, p.File, (p.Offset+headerSize+3)*8)
	if _, err := Open(dir, Snapshot{}, nil); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("open: %v, want ErrCorrupt", err)
	}
}

// saveUntilError appends one entry per Save until one fails and returns
// the last acknowledged index and the error.
func saveUntilError(t testing.TB, w *WAL, max uint64) (uint64, error) {
	for i := uint64(1); i <= max; i++ {
		if err := w.Save(mkState(1, i-1), []*raftpb.Entry{mkEntry(i, 1, 300)}); err != nil {
			return i - 1, err
		}
	}
	t.Fatalf("no failure after %d saves", max)
	return 0, nil
}

func TestInjectedFailures(t *testing.T) {
	isSeg := func(p string) bool { return strings.HasSuffix(p, ".wal") }
	cases := []struct {
		name string
		hook func() vfs.Hook
		want error
	}{
		{"enospc-short-write", func() vfs.Hook {
			n := 0
			return func(ev vfs.Event) *vfs.Fault {
				if ev.Op == vfs.OpWrite && isSeg(ev.Path) {
					if n++; n == 37 {
						return &vfs.Fault{Err: vfs.ENOSPC, Written: ev.Len / 2}
					}
				}
				return nil
			}
		}, syscall.ENOSPC},
		{"fsync-eio", func() vfs.Hook {
			n := 0
			return func(ev vfs.Event) *vfs.Fault {
				if ev.Op == vfs.OpSync && isSeg(ev.Path) {
					if n++; n == 23 {
						return &vfs.Fault{Err: vfs.EIO}
					}
				}
				return nil
			}
		}, syscall.EIO},
		{"torn-write-then-crash", func() vfs.Hook {
			n := 0
			return func(ev vfs.Event) *vfs.Fault {
				if ev.Op == vfs.OpWrite && isSeg(ev.Path) {
					if n++; n == 51 {
						return &vfs.Fault{Written: ev.Len/2 + 3, Crash: true}
					}
				}
				return nil
			}
		}, vfs.ErrCrashed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			ffs := vfs.NewFaultFS(vfs.Default, nil)
			// Whole segments: the hooks count the writer's writes and
			// syncs (growth failures have their own tests).
			opts := &Options{FS: ffs, SegmentSize: 16 << 10, wholeSegments: true}
			w := mustCreate(t, dir, opts)
			ffs.SetHook(tc.hook())
			acked, err := saveUntilError(t, w, 10000)
			if !errors.Is(err, ErrFailed) || !errors.Is(err, tc.want) {
				t.Fatalf("append error %v, want ErrFailed wrapping %v", err, tc.want)
			}
			var ioErr *IOError
			if !errors.As(err, &ioErr) || !strings.HasSuffix(ioErr.File, ".wal") {
				t.Fatalf("append error %v does not name the segment file", err)
			}
			if acked == 0 {
				t.Fatal("failure injected before any append succeeded")
			}
			// The WAL refuses further appends until reopened.
			if err := w.Save(mkState(1, 0), []*raftpb.Entry{mkEntry(acked+1, 1, 10)}); !errors.Is(err, ErrFailed) {
				t.Fatalf("append after failure: %v", err)
			}
			w.Close()
			w2, err := Open(dir, Snapshot{}, &Options{SegmentSize: 16 << 10})
			if err != nil {
				t.Fatalf("reopen: %v", err)
			}
			_, _, ents, _ := w2.ReadAll()
			if uint64(len(ents)) < acked {
				t.Fatalf("reopen found %d entries, %d were acknowledged", len(ents), acked)
			}
			checkEntries(t, ents[:acked], 1, acked, 300)
			if err := w2.Save(nil, []*raftpb.Entry{mkEntry(uint64(len(ents))+1, 2, 10)}); err != nil {
				t.Fatalf("append after reopen: %v", err)
			}
			w2.Close()
			t.Logf("%d appends acknowledged before the fault; %d entries recovered", acked, len(ents))
		})
	}
}
