package tools

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-db/strata/pagestore"
)

func TestDBCheckDataDirProgressAndLock(t *testing.T) {
	dir := t.TempDir()
	snap := filepath.Join(dir, "member", "snap")
	if err := os.MkdirAll(snap, 0o700); err != nil {
		t.Fatal(err)
	}
	db, err := pagestore.Open(filepath.Join(snap, "db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *pagestore.Tx) error {
		b, err := tx.CreateBucket([]byte("key"))
		if err != nil {
			return err
		}
		for i := 0; i < 3000; i++ {
			if err := b.Put([]byte{byte(i >> 8), byte(i)}, bytes.Repeat([]byte("v"), 100)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Held by a writer: refused with the reason.
	if _, err := DBCheck(dir, DBCheckOptions{}); !errors.Is(err, pagestore.ErrDatabaseLocked) || !strings.Contains(err.Error(), "stop it first") {
		t.Fatalf("check while a writer holds the file: %v", err)
	}
	db.Close()
	var bar, out bytes.Buffer
	rep, err := DBCheck(dir, DBCheckOptions{Progress: &bar})
	if err != nil || !rep.OK() {
		t.Fatalf("check: %v %v", err, rep.Err())
	}
	if !strings.Contains(bar.String(), "checking") || !strings.Contains(bar.String(), "100%") {
		t.Fatalf("progress bar: %q", bar.String())
	}
	WriteDBCheckReport(&out, rep)
	for _, want := range []string{filepath.Join(snap, "db") + ": OK", "buckets:   1 (keys: key 3000)", "keys:      3000", "free "} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("summary lacks %q:\n%s", want, out.String())
		}
	}
}
