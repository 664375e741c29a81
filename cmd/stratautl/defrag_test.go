package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-db/strata/pagestore"
)

func TestDefragCommand(t *testing.T) {
	dir := t.TempDir()
	snap := filepath.Join(dir, "member", "snap")
	os.MkdirAll(snap, 0o755)
	path := filepath.Join(snap, "db")
	db, err := pagestore.Open(path, &pagestore.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	val := bytes.Repeat([]byte("v"), 200)
	for round := 0; round < 10; round++ {
		err := db.Update(func(tx *pagestore.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("key"))
			if err != nil {
				return err
			}
			for i := 0; i < 2000; i++ {
				k := []byte{byte(round), byte(i >> 8), byte(i)}
				if err := b.Put(k, val); err != nil {
					return err
				}
				if i%2 == 0 && round > 0 {
					if err := b.Delete([]byte{byte(round - 1), byte(i >> 8), byte(i)}); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// Refuses while the store is open.
	var out, errOut bytes.Buffer
	if code := run([]string{"defrag", "--data-dir", dir, "--no-progress"}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "in use") {
		t.Fatalf("defrag of an open store: exit %d, stderr %q", code, errOut.String())
	}
	db.Close()
	before, _ := os.Stat(path)
	out.Reset()
	errOut.Reset()
	if code := run([]string{"defrag", "--data-dir", dir}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	after, _ := os.Stat(path)
	if !strings.Contains(out.String(), "before:") || !strings.Contains(out.String(), "after:") || !strings.Contains(out.String(), "in use:") || !strings.Contains(errOut.String(), "100%") {
		t.Fatalf("output %q / %q", out.String(), errOut.String())
	}
	if after.Size() >= before.Size() {
		t.Fatalf("file %d -> %d bytes", before.Size(), after.Size())
	}
	db, err = pagestore.Open(path, &pagestore.Options{StrictMode: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	n := 0
	err = db.View(func(tx *pagestore.Tx) error {
		b, err := tx.Bucket([]byte("key"))
		if err != nil {
			return err
		}
		if err := tx.Check(); err != nil {
			return err
		}
		return b.ForEach(func(k, v []byte) error { n++; return nil })
	})
	if err != nil || n != 2000+9*1000 {
		t.Fatalf("after defrag: %d keys (want %d): %v", n, 2000+9*1000, err)
	}
	if _, err := os.Stat(path + ".defrag.tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("temporary file left behind")
	}
	if code := run([]string{"defrag", "-h"}, &out, &errOut); code != 0 || !strings.Contains(errOut.String(), "Examples") {
		t.Fatalf("-h: %d %q", code, errOut.String())
	}
}
