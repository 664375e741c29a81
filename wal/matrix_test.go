package wal

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/internal/testseed"
	"github.com/strata-db/strata/vfs"
)

// TestCorruptionMatrix damages the WAL: every record type
// (segment headers, entries plain and compressed, hard states, snapshot
// markers), in every segment, is damaged by bit flips in its header and
// payload, a zeroed 512-byte sector at it, and truncations at and inside
// it. Every Save was synced, so every record is acknowledged data. Each
// case must end as:
//
//   - refused: Open or ReadAll fails with ErrCorrupt naming the file and
//     the offset;
//   - a repaired torn tail: the damage is in the last segment with no
//     whole record after it, and ReadAll returns exactly the entries
//     before the damaged record (what a crash mid-write looks like, and
//     what etcd repairs too);
//   - unharmed: ReadAll returns every entry.
//
// Anything else (entries lost, reordered or changed without an error) is
// a silent corruption.
func TestCorruptionMatrix(t *testing.T) {
	seed := testseed.Seed(t)
	rng := rand.New(rand.NewPCG(seed, seed^0x2545f491))
	src := t.TempDir()
	opts := &Options{SegmentSize: 6 << 10, CompressThreshold: 1024}
	w := mustCreate(t, src, opts)
	var want []*raftpb.Entry
	for i := uint64(1); i <= 120; i++ {
		size := 60
		if i%7 == 0 {
			size = 3000 // compressed
		}
		e := mkEntry(i, 1+i/50, size)
		want = append(want, e)
		if err := w.Save(mkState(1+i/50, i-1), []*raftpb.Entry{e}); err != nil {
			t.Fatal(err)
		}
		if i%25 == 0 {
			if err := w.SaveSnapshot(Snapshot{Index: i - 5, Term: 1 + (i-5)/50, ConfState: &raftpb.ConfState{Voters: []uint64{1}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	w.Close()
	positions := recordPositions(t, src)
	segs, _ := listSegments(vfs.Default, src)
	last := segs[len(segs)-1].path
	// Which entries each record ends: the entry records' indexes in order.
	kinds := map[string][]recPos{}
	for _, p := range positions {
		data, err := os.ReadFile(p.File)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := decodeRecord(data[p.Offset:])
		if err != nil {
			t.Fatal(err)
		}
		kind := map[RecordType]string{typeSegment: "segment-header", TypeEntry: "entry", TypeState: "state", TypeSnapshot: "snapshot-marker"}[rec.Type]
		if rec.Type == TypeEntry {
			var e raftpb.Entry
			if proto.Unmarshal(rec.Data, &e) == nil && len(e.Data) >= opts.CompressThreshold {
				kind = "entry-compressed" // stored with S2 (above the threshold)
			}
		}
		kinds[kind] = append(kinds[kind], p)
	}

	type outcome struct{ refused, repaired, unharmed int }
	results := map[string]*outcome{}
	var silent []string
	cases := 0
	try := func(kind string, p recPos, what string, damage func(path string)) {
		cases++
		dir := copyDir(t, src)
		path := filepath.Join(dir, filepath.Base(p.File))
		damage(path)
		o := results[kind]
		if o == nil {
			o = &outcome{}
			results[kind] = o
		}
		got, err := readAllEntries(dir, opts)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), filepath.Base(p.File)) || !strings.Contains(err.Error(), "offset") {
				t.Errorf("%s %s: refused without naming the file and offset: %v", kind, what, err)
			}
			o.refused++
			return
		}
		if sameEntries(got, want) {
			o.unharmed++
			return
		}
		// A repaired torn tail: a prefix, cut at a record of the last
		// segment that nothing whole follows.
		if p.File == last && isPrefix(got, want) && noWholeRecordAfter(t, path, p.Offset) {
			o.repaired++
			return
		}
		silent = append(silent, fmt.Sprintf("%s %s in %s: %d of %d entries back, no error", kind, what, filepath.Base(p.File), len(got), len(want)))
	}
	var names []string
	for k := range kinds {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, kind := range names {
		ps := kinds[kind]
		if len(ps) > 15 {
			// Keep the first and the last, and a sample between.
			mid := ps[1 : len(ps)-1]
			rng.Shuffle(len(mid), func(i, j int) { mid[i], mid[j] = mid[j], mid[i] })
			ps = append([]recPos{ps[0], ps[len(ps)-1]}, mid[:13]...)
		}
		for _, p := range ps {
			for _, at := range []int64{0, 5, headerSize, int64(p.unpadded) - 1, int64(rng.IntN(p.unpadded))} {
				bit := int64(rng.IntN(8))
				try(kind, p, fmt.Sprintf("bit %d of byte %d", bit, p.Offset+at), func(path string) { flipBit(t, path, (p.Offset+at)*8+bit) })
			}
			try(kind, p, fmt.Sprintf("zeroed sector at %d", p.Offset), func(path string) { zeroRange(t, path, p.Offset, 512) })
			for _, cut := range []int64{p.Offset, p.Offset + int64(p.unpadded)/2} {
				try(kind, p, fmt.Sprintf("truncated at %d", cut), func(path string) {
					if err := os.Truncate(path, cut); err != nil {
						t.Fatal(err)
					}
				})
			}
		}
	}
	var lines []string
	for _, k := range names {
		o := results[k]
		lines = append(lines, fmt.Sprintf("%s (%d records): refused %d, repaired torn tail %d, unharmed %d", k, len(kinds[k]), o.refused, o.repaired, o.unharmed))
	}
	t.Logf("CORRUPTION-MATRIX wal: %d cases over %d records in %d segments, %d silent\n  %s", cases, len(positions), len(segs), len(silent), strings.Join(lines, "\n  "))
	for _, s := range silent {
		t.Errorf("silent corruption: %s", s)
	}
	for _, k := range []string{"segment-header", "entry", "entry-compressed", "state", "snapshot-marker"} {
		if results[k] == nil {
			t.Errorf("no %s record was damaged: the matrix missed that type", k)
		}
	}
}

func readAllEntries(dir string, opts *Options) ([]*raftpb.Entry, error) {
	w, err := Open(dir, Snapshot{}, opts)
	if err != nil {
		return nil, err
	}
	defer w.Close()
	_, _, ents, err := w.ReadAll()
	return ents, err
}

func sameEntries(a, b []*raftpb.Entry) bool {
	return len(a) == len(b) && isPrefix(a, b)
}

// isPrefix reports whether a is b's first len(a) entries.
func isPrefix(a, b []*raftpb.Entry) bool {
	if len(a) > len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// noWholeRecordAfter reports whether no decodable record starts after off
// in the damaged file (so the damage looks like a torn write).
func noWholeRecordAfter(t testing.TB, path string, off int64) bool {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for o := off + 8; o+8 <= int64(len(data)); o += 8 {
		if _, err := decodeRecord(data[o:]); err == nil {
			return false
		}
	}
	return true
}

func zeroRange(t testing.TB, path string, off, n int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	n = min(n, st.Size()-off)
	if n <= 0 {
		return
	}
	if _, err := f.WriteAt(make([]byte, n), off); err != nil {
		t.Fatal(err)
	}
}
