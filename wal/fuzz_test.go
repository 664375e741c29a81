package wal

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

// FuzzDecodeRecord feeds arbitrary bytes to the record decoder and to the
// segment scanner. Neither may panic, allocate beyond MaxRecordSize, or
// accept a record that does not re-encode to the same bytes.
func FuzzDecodeRecord(f *testing.F) {
	valid := appendRecord(nil, TypeEntry, 7, []byte("hello, wal"), -1, true)
	big := make([]byte, 9000)
	for i := range big {
		big[i] = byte(i % 7)
	}
	compressed := appendRecord(nil, TypeEntry, 9, big, 4096, true)
	f.Add(valid)
	f.Add(compressed)
	f.Add(valid[:len(valid)-3])           // truncated payload
	f.Add(valid[:12])                     // truncated header
	f.Add(compressed[:len(compressed)/2]) // truncated compressed payload
	huge := append([]byte(nil), valid...) // length field far past the data
	binary.LittleEndian.PutUint32(huge, 0xfffffff0)
	f.Add(huge)
	limit := append([]byte(nil), valid...) // just above MaxRecordSize
	binary.LittleEndian.PutUint32(limit, MaxRecordSize+1)
	f.Add(limit)
	for _, bit := range []int{0, 33, 70, 130, 200} { // flipped bits
		b := append([]byte(nil), valid...)
		b[bit/8] ^= 1 << (bit % 8)
		f.Add(b)
	}
	seg := segmentHeader{seq: 0, firstIndex: 0, metadata: []byte("m")}
	f.Add(append(appendRecord(nil, typeSegment, 0, seg.marshal(), -1, true), valid...))

	f.Fuzz(func(t *testing.T, data []byte) {
		rec, err := decodeRecord(data)
		if err == nil {
			if rec.StoredSize > len(data) || len(rec.Data) > MaxRecordSize {
				t.Fatalf("accepted record claims %d bytes of %d, payload %d", rec.StoredSize, len(data), len(rec.Data))
			}
			if !rec.Compressed {
				again := appendRecord(nil, rec.Type, rec.Batch, rec.Data, -1, rec.unitEnd)
				if string(again) != string(data[:rec.StoredSize]) {
					t.Fatalf("accepted record does not re-encode identically")
				}
			}
		}
		// The scanner, as last and as middle segment, must only return
		// errors, never panic, and read the same through any window.
		info := segmentInfo{seq: 0, firstIndex: 0, path: "fuzz.wal"}
		for _, last := range []bool{true, false} {
			whole := scanTranscript(data, info, last, len(data))
			if small := scanTranscript(data, info, last, 16); small != whole {
				t.Fatalf("last=%v: a 16-byte window reads\n%s\nthe whole segment reads\n%s", last, small, whole)
			}
		}
	})
}

// walImage writes a small WAL (4 KiB segments, so several of them, with a
// snapshot marker) and returns its directory's files by name.
func walImage(tb testing.TB) (names []string, files [][]byte) {
	tb.Helper()
	dir := tb.TempDir()
	opts := &Options{SegmentSize: 4 << 10, NoZeroFill: true}
	w, err := Create(dir, []byte("member metadata"), opts)
	if err != nil {
		tb.Fatal(err)
	}
	for i := uint64(1); i <= 40; i++ {
		if err := w.Save(mkState(2, i), []*raftpb.Entry{mkEntry(i, 2, 100+int(i)*7)}); err != nil {
			tb.Fatal(err)
		}
		if i == 20 {
			if err := w.SaveSnapshot(Snapshot{Index: 20, Term: 2}); err != nil {
				tb.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	des, err := os.ReadDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	for _, de := range des {
		if !strings.HasSuffix(de.Name(), ".wal") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, de.Name()))
		if err != nil {
			tb.Fatal(err)
		}
		names, files = append(names, de.Name()), append(files, b)
	}
	if len(files) < 3 {
		tb.Fatalf("the seed WAL has %d segments, want at least 3", len(files))
	}
	return names, files
}

// FuzzOpenDir opens WAL directories whose segments the fuzzer made (the
// first two of a real WAL's, replaced or damaged; the rest as written),
// from no snapshot or from the snapshot at index 20, as a member does at
// start and as stratautl wal inspects them. Nothing may panic; corruption
// must name its file; and what Open accepts must read back as entries
// with consecutive indexes after the snapshot.
func FuzzOpenDir(f *testing.F) {
	names, files := walImage(f)
	f.Add(files[0], files[1], false)
	f.Add(files[0], files[1], true)
	f.Add(files[0][:len(files[0])/2], files[1], true)
	f.Add(files[0], files[1][:len(files[1])-5], false)
	f.Add(files[1], files[0], false)

	f.Fuzz(func(t *testing.T, seg0, seg1 []byte, fromSnap bool) {
		if len(seg0)+len(seg1) > 1<<20 {
			return
		}
		dir := t.TempDir()
		for i, name := range names {
			b := files[i]
			switch i {
			case 0:
				b = seg0
			case 1:
				b = seg1
			}
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		named := func(what string, err error) {
			t.Helper()
			if err != nil && errors.Is(err, ErrCorrupt) && !strings.Contains(err.Error(), dir) {
				t.Fatalf("%s: corruption error does not name the file: %v", what, err)
			}
		}
		_, err := Iterate(nil, dir, func(Position, Record) error { return nil })
		named("iterate", err)
		_, err = LastSnapshot(nil, dir)
		named("last snapshot", err)
		_, err = ReadMetadata(nil, dir)
		named("metadata", err)

		snap := Snapshot{}
		if fromSnap {
			snap = Snapshot{Index: 20, Term: 2}
		}
		w, err := Open(dir, snap, &Options{SegmentSize: 4 << 10, NoZeroFill: true})
		if err != nil {
			named("open", err)
			return
		}
		_, _, ents, err := w.ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		next := snap.Index + 1
		for _, e := range ents {
			if e.GetIndex() != next {
				t.Fatalf("open accepted entries out of sequence: index %d where %d was due", e.GetIndex(), next)
			}
			next++
		}
		if err := w.Save(mkState(3, next-1), []*raftpb.Entry{mkEntry(next, 3, 50)}); err != nil {
			t.Fatalf("append after open: %v", err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	})
}
