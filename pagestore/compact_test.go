package pagestore

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestCompactAndWriteTo(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	db := openT(t, src, &Options{NoSync: true})
	for g := 0; g < 4; g++ {
		fillBatch(t, db, g, 20000)
	}
	// Random deletes leave half-empty leaves and free pages.
	err := db.Update(func(tx *Tx) error {
		b, _ := tx.Bucket([]byte("b"))
		for i := 0; i < 20000; i += 3 {
			if err := b.Delete(revKey(uint64(i))); err != nil {
				return err
			}
		}
		_, err := tx.CreateBucket([]byte("empty"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	want := dump(t, db)

	// WriteTo: a consistent copy taken while a writer keeps going.
	var snap bytes.Buffer
	rtx, err := db.Begin(false)
	if err != nil {
		t.Fatal(err)
	}
	fillBatch(t, db, 9, 20000) // changes every value after the snapshot began
	n, err := rtx.WriteTo(&snap)
	if err != nil || n != rtx.Size() || int64(snap.Len()) != n {
		t.Fatalf("WriteTo wrote %d (buffer %d), Size %d: %v", n, snap.Len(), rtx.Size(), err)
	}
	rtx.Rollback()
	copyPath := filepath.Join(dir, "copy")
	os.WriteFile(copyPath, snap.Bytes(), 0o600)
	cdb := openT(t, copyPath, nil)
	sameContents(t, dump(t, cdb), want)
	checkDB(t, cdb)
	cdb.Close()

	// Compact refuses while src is open (locked)...
	dst := filepath.Join(dir, "dst")
	if err := Compact(dst, src, nil); !errors.Is(err, ErrDatabaseLocked) {
		t.Fatalf("Compact of an open DB: %v, want ErrDatabaseLocked", err)
	}
	want = dump(t, db)
	db.Close()
	// ...and works once it is closed.
	var last, total int64
	calls := 0
	if err := Compact(dst, src, func(d, tot int64) { last, total = d, tot; calls++ }); err != nil {
		t.Fatal(err)
	}
	if calls == 0 || last != total {
		t.Fatalf("progress: %d calls, last %d of %d", calls, last, total)
	}
	if err := Compact(dst, src, nil); err == nil {
		t.Fatal("Compact over an existing dst succeeded")
	}
	ss, ds := fileSize(t, src), fileSize(t, dst) // before Open preallocates
	ddb := openT(t, dst, nil)
	defer ddb.Close()
	sameContents(t, dump(t, ddb), want)
	checkDB(t, ddb)
	st := ddb.Stats()
	t.Logf("compact: %d -> %d bytes (in use %d, free pages %d)", ss, ds, st.InUseBytes, st.FreePages)
	// The file grows in steps of max(1/16, 16 pages) beyond what it needs.
	if ds >= ss || float64(ds) > 1.1*float64(st.InUseBytes)+float64(16*ddb.PageSize()) {
		t.Fatalf("compacted file %d bytes, source %d, in use %d", ds, ss, st.InUseBytes)
	}
}

func fileSize(t testing.TB, p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

func TestStats(t *testing.T) {
	db := openT(t, tmpDB(t), nil)
	defer db.Close()
	s0 := db.Stats()
	fillBatch(t, db, 1, 5000)
	fillBatch(t, db, 2, 5000) // rewrites every leaf: frees pages
	s := db.Stats()
	if s.Commits != s0.Commits+2 || s.CommitTotal <= 0 || s.CommitMax <= 0 || s.LastCommit <= 0 {
		t.Fatalf("commit counters: %+v", s)
	}
	if s.TxID != s0.TxID+2 || s.PageSize != db.PageSize() {
		t.Fatalf("txid/page size: %+v", s)
	}
	if s.InUseBytes <= 0 || s.FileSize < s.InUseBytes || s.FreePages+s.PendingPages == 0 {
		t.Fatalf("space counters: %+v", s)
	}
	// In use + free + pending = hwm, and the file covers hwm.
	var hwm int64
	db.View(func(tx *Tx) error { hwm = tx.Size(); return nil })
	if got := s.InUseBytes + (s.FreePages+s.PendingPages)*int64(s.PageSize); got != hwm {
		t.Fatalf("in use %d + free %d + pending %d pages != hwm %d bytes", s.InUseBytes, s.FreePages, s.PendingPages, hwm)
	}
	rtx, _ := db.Begin(false)
	if db.Stats().OpenReadTxs != 1 {
		t.Fatal("open read txs not counted")
	}
	rtx.Rollback()
}

// TestCompactInPlaceHoldsLockUntilRenamed: a server that opens the
// database while offline defrag runs must be refused up to and including
// the rename; otherwise it writes into the file the rename unlinks and
// every write it makes is lost.
func TestCompactInPlaceHoldsLockUntilRenamed(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "db")
	db := openT(t, path, &Options{NoSync: true})
	for g := 0; g < 3; g++ {
		fillBatch(t, db, g, 20000)
	}
	err := db.Update(func(tx *Tx) error {
		b, _ := tx.Bucket([]byte("b"))
		for i := 0; i < 20000; i += 2 {
			if err := b.Delete(revKey(uint64(i))); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := dump(t, db)
	db.Close()

	var hookRan bool
	compactBeforeRename = func() {
		hookRan = true
		if d, err := Open(path, nil); !errors.Is(err, ErrDatabaseLocked) {
			if d != nil {
				d.Close()
			}
			t.Errorf("open during the rename window: %v, want ErrDatabaseLocked", err)
		}
	}
	defer func() { compactBeforeRename = nil }()
	res, err := CompactInPlace(path, nil, func(before, copy int64) bool { return copy < before })
	if err != nil {
		t.Fatal(err)
	}
	if !hookRan || !res.Replaced || res.Copy >= res.Before {
		t.Fatalf("result %+v, hook ran %v", res, hookRan)
	}
	if _, err := os.Stat(path + ".defrag.tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temporary copy left behind: %v", err)
	}
	cdb := openT(t, path, nil)
	sameContents(t, dump(t, cdb), want)
	checkDB(t, cdb)
	cdb.Close()

	// keep says no: the database is left byte for byte.
	before, _ := os.ReadFile(path)
	hookRan = false
	res, err = CompactInPlace(path, nil, func(before, copy int64) bool { return false })
	if err != nil || res.Replaced || hookRan {
		t.Fatalf("kept: %+v, %v, hook %v", res, err, hookRan)
	}
	after, _ := os.ReadFile(path)
	if !bytes.Equal(before, after) {
		t.Fatal("database changed although the copy was not kept")
	}
}
