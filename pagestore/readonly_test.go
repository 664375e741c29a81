package pagestore

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadOnlyNeverWrites opens a real file read-only and checks that
// reads work, writes are refused, the bytes and the modification time of
// the file stay as they were, and the lock excludes a writer both ways.
func TestReadOnlyNeverWrites(t *testing.T) {
	path := tmpDB(t)
	db := openT(t, path, nil)
	if err := db.Update(func(tx *Tx) error {
		b, err := tx.CreateBucket([]byte("b"))
		if err != nil {
			return err
		}
		for i := 0; i < 500; i++ {
			if err := b.Put([]byte(fmt.Sprintf("k%04d", i)), bytes.Repeat([]byte{'v'}, 100)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := dump(t, db)

	// A read-only open while the writer holds the file is refused.
	if _, err := Open(path, &Options{ReadOnly: true}); !errors.Is(err, ErrDatabaseLocked) {
		t.Fatalf("read-only open while a writer has the file: %v, want ErrDatabaseLocked", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// Read permission only: a read-only open must not need more.
	if err := os.Chmod(path, 0o400); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	st0, _ := os.Stat(path)

	ro, err := Open(path, &Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	ro2, err := Open(path, &Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("a second read-only open: %v", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, nil); !errors.Is(err, ErrDatabaseLocked) {
		t.Fatalf("writer open while read-only opens hold the file: %v, want ErrDatabaseLocked", err)
	}
	sameContents(t, dump(t, ro), want)
	checkDB(t, ro)
	if _, err := ro.Begin(true); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Begin(true) on a read-only DB: %v", err)
	}
	if err := ro.Update(func(*Tx) error { return nil }); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Update on a read-only DB: %v", err)
	}
	if _, err := ro.DefragStep(10); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("DefragStep on a read-only DB: %v", err)
	}
	for _, d := range []*DB{ro, ro2} {
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
	}
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	st1, _ := os.Stat(path)
	if !bytes.Equal(before, after) || !st0.ModTime().Equal(st1.ModTime()) {
		t.Fatalf("read-only open changed the file")
	}
	// And a writer can open it again once they are gone.
	openT(t, path, nil).Close()
}

// TestReadOnlyRefusesWhatAWriterWouldCreate: a missing file is not
// created, and a short or empty file is reported, not initialised.
func TestReadOnlyRefusesWhatAWriterWouldCreate(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	if _, err := Open(missing, &Options{ReadOnly: true}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("read-only open of a missing file: %v", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("read-only open created %s", missing)
	}
	for name, content := range map[string][]byte{"empty": nil, "short": []byte("not a database")} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, content, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Open(p, &Options{ReadOnly: true})
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), p) {
			t.Fatalf("read-only open of an %s file: %v, want ErrCorrupt naming the file", name, err)
		}
		if got, _ := os.ReadFile(p); !bytes.Equal(got, content) {
			t.Fatalf("read-only open of the %s file changed it", name)
		}
	}
}
