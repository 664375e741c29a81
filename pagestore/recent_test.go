package pagestore

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"

	"github.com/strata-db/strata/vfs"
)

// TestWriterReadsLatestCommitFromMemory: the writer keeps the pages the
// latest commit wrote (db.recent) and reads them from memory instead of
// the mapping. Those copies must match the file byte for byte after every
// commit, stay as they were through a rollback and a failed commit, and be
// what the following commits build on.
func TestWriterReadsLatestCommitFromMemory(t *testing.T) {
	path := tmpDB(t)
	fs := vfs.NewFaultFS(vfs.Default, nil)
	db, err := Open(path, &Options{FS: fs}) // no StrictMode: its checker reads every page through the mapping
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ps := db.PageSize()
	want := map[string]string{}
	appendKeys := func(gen, n int) error {
		return db.Update(func(tx *Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("b"))
			if err != nil {
				return err
			}
			for i := 0; i < n; i++ {
				k, v := revKey(uint64(gen*10_000+i)), fmt.Sprintf("gen%d-%d", gen, i)
				if err := b.Put(k, []byte(v)); err != nil {
					return err
				}
			}
			return nil
		})
	}
	matchFile := func(stage string) {
		t.Helper()
		if len(db.recent) == 0 {
			t.Fatalf("%s: the writer kept no pages of the latest commit", stage)
		}
		file, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range db.recent {
			off := int(p.id) * ps
			if off+len(p.buf) > len(file) || !bytes.Equal(file[off:off+len(p.buf)], p.buf) {
				t.Fatalf("%s: the writer's copy of page %d differs from the file", stage, p.id)
			}
		}
	}
	commit := func(gen int) {
		t.Helper()
		if err := appendKeys(gen, 1500); err != nil {
			t.Fatalf("commit %d: %v", gen, err)
		}
		for i := 0; i < 1500; i++ {
			want[string(revKey(uint64(gen*10_000+i)))] = fmt.Sprintf("gen%d-%d", gen, i)
		}
		matchFile(fmt.Sprintf("after commit %d", gen))
	}
	for gen := 1; gen <= 3; gen++ {
		commit(gen)
	}

	// The next writer finds the append's leaf among the kept pages and never
	// reads it through the mapping, which would mark it verified.
	before := db.recent
	tx, err := db.Begin(true)
	if err != nil {
		t.Fatal(err)
	}
	b, err := tx.Bucket([]byte("b"))
	if err == nil {
		err = b.Put(revKey(99_999), []byte("rolled back"))
	}
	var mapped []pgid
	for _, p := range db.recent {
		if db.verified.has(p.id) {
			mapped = append(mapped, p.id)
		}
	}
	tx.Rollback() // before any Fatal: Close waits for the writer
	if err != nil {
		t.Fatal(err)
	}
	if len(mapped) > 0 {
		t.Fatalf("the writer read pages %v, written by the latest commit, through the mapping", mapped)
	}
	if len(db.recent) != len(before) || &db.recent[0] != &before[0] {
		t.Fatal("a rollback replaced the latest commit's pages")
	}
	matchFile("after a rollback")

	// A commit that fails at its data sync publishes nothing: the kept
	// pages are still the latest commit's.
	fired := false
	fs.SetHook(func(ev vfs.Event) *vfs.Fault {
		if ev.Op != vfs.OpSync || fired {
			return nil
		}
		fired = true
		return &vfs.Fault{Err: vfs.EIO}
	})
	if err := appendKeys(4, 1500); !errors.Is(err, syscall.EIO) {
		t.Fatalf("commit with a failing sync: %v, want EIO", err)
	}
	fs.SetHook(nil)
	matchFile("after a failed commit")

	for gen := 5; gen <= 7; gen++ {
		commit(gen)
	}
	if err := db.View(func(tx *Tx) error { return tx.Check() }); err != nil {
		t.Fatal(err)
	}
	got := dump(t, db)["b"]
	sameContents(t, map[string]map[string]string{"b": got}, map[string]map[string]string{"b": want})
}

// TestAppendCommitWritesFromArena: an append commit's new pages (leaves,
// the branch above them, the directory leaf, the freelist record) are cut
// one after another from the arena and land one after another at the end
// of the file, so they are written from the arena as they are; the scratch
// buffer for gathering scattered pages into one pwrite is never needed.
func TestAppendCommitWritesFromArena(t *testing.T) {
	db := openT(t, tmpDB(t), &Options{NoSync: true})
	defer db.Close()
	val := make([]byte, 256)
	for c := 0; c < 30; c++ {
		if err := db.Update(func(tx *Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("b"))
			if err != nil {
				return err
			}
			for i := 0; i < 1000; i++ {
				if err := b.Put(revKey(uint64(c*1000+i)), val); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if cap(db.scratch) != 0 {
			t.Fatalf("commit %d gathered its pages into the scratch buffer (%d bytes) instead of writing them from the arena", c, cap(db.scratch))
		}
	}
	if w, c := db.Stats().PageWrites, db.Stats().Commits; w > 5*c {
		t.Fatalf("%d page writes for %d commits", w, c)
	}
}
