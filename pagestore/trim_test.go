package pagestore

import (
	"fmt"
	"path/filepath"
	"testing"
)

// TestTrimMemory: a write transaction leaves buffers kept for the next
// one (KeptBytes counts them); TrimMemory drops them all, and the store
// reads and writes as before.
func TestTrimMemory(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	write := func(round int) {
		t.Helper()
		if err := db.Update(func(tx *Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("b"))
			if err != nil {
				return err
			}
			for i := 0; i < 2000; i++ {
				if err := b.Put([]byte(fmt.Sprintf("r%d/%05d", round, i)), make([]byte, 200)); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	write(1)
	if n := db.KeptBytes(); n < 1<<20 {
		t.Fatalf("%d bytes kept after a 2,000-key commit, want at least an arena chunk", n)
	}
	db.TrimMemory()
	if n := db.KeptBytes(); n != 0 {
		t.Fatalf("%d bytes kept after TrimMemory", n)
	}
	write(2)
	if err := db.View(func(tx *Tx) error {
		b, err := tx.Bucket([]byte("b"))
		if err != nil {
			return err
		}
		for _, k := range []string{"r1/00000", "r1/01999", "r2/01999"} {
			v, err := b.Get([]byte(k))
			if err != nil || len(v) != 200 {
				return fmt.Errorf("%s: %d bytes, %v", k, len(v), err)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
