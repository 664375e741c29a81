package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
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
	// Refuses while the store is open, and says so without drawing a
	// progress bar first (--timeout 1ms: defrag waits 10s by default).
	var out, errOut bytes.Buffer
	if code := run([]string{"defrag", "--data-dir", dir, "--no-progress", "--timeout", "1ms"}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "in use") {
		t.Fatalf("defrag of an open store: exit %d, stderr %q", code, errOut.String())
	}
	errOut.Reset()
	if code := run([]string{"defrag", "--data-dir", dir, "--timeout=1ms"}, &out, &errOut); code != 1 ||
		!strings.HasPrefix(errOut.String(), "stratautl defrag: ") || strings.Contains(errOut.String(), "%") {
		t.Fatalf("defrag of an open store with progress: exit %d, stderr %q (want the error alone)", code, errOut.String())
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
	out.Reset()
	if code := run([]string{"defrag", "-h"}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "Examples") {
		t.Fatalf("-h: %d %q", code, out.String())
	}
}

// writeMVCCLike fills a page store at path the way the server's backend
// does: revision-ordered 17-byte keys with 300-byte values, 50 a commit,
// and the consistent index in meta at every commit. Its pages are full;
// a compacted copy of it is bigger than it.
func writeMVCCLike(t *testing.T, path string, n int) {
	t.Helper()
	db, err := pagestore.Open(path, &pagestore.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// Values of random bytes, as etcd's benchmark writes: the page store
	// stores them as they are, 300 bytes each.
	val := make([]byte, 300)
	rand.NewChaCha8([32]byte{7}).Read(val)
	for s := 0; s < n; s += 50 {
		err := db.Update(func(tx *pagestore.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("key"))
			if err != nil {
				return err
			}
			m, err := tx.CreateBucketIfNotExists([]byte("meta"))
			if err != nil {
				return err
			}
			for i := s; i < min(n, s+50); i++ {
				k := make([]byte, 17)
				binary.BigEndian.PutUint64(k, uint64(i+2))
				k[8] = '_'
				if err := b.Put(k, val); err != nil {
					return err
				}
			}
			return m.Put([]byte("consistent_index"), binary.BigEndian.AppendUint64(nil, uint64(s)))
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestDefragNeverGrows: defrag never makes a db bigger. One written as
// the server writes (full leaves, nothing deleted) has nothing to reclaim
// but the file's growth slack, so defrag either keeps it or installs a
// copy no bigger; one compacted already (its copy would be the same size)
// is left byte for byte as it was, and defrag says why.
func TestDefragNeverGrows(t *testing.T) {
	dir := t.TempDir()
	snap := filepath.Join(dir, "member", "snap")
	os.MkdirAll(snap, 0o755)
	path := filepath.Join(snap, "db")
	writeMVCCLike(t, path, 20000)
	for round := 0; round < 2; round++ {
		before, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if round == 1 {
			// Round 1: a db that is a compacted copy already.
			os.Remove(path + ".c")
			if err := pagestore.Compact(path+".c", path, nil); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(path+".c", path); err != nil {
				t.Fatal(err)
			}
			if before, err = os.ReadFile(path); err != nil {
				t.Fatal(err)
			}
		}
		var out, errOut bytes.Buffer
		if code := run([]string{"defrag", "--data-dir", dir}, &out, &errOut); code != 0 {
			t.Fatalf("round %d: exit %d: %s", round, code, errOut.String())
		}
		after, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(after) > len(before) {
			t.Fatalf("round %d: defrag grew %s from %d to %d bytes", round, path, len(before), len(after))
		}
		if _, err := os.Stat(path + ".defrag.tmp"); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("round %d: temporary file left behind", round)
		}
		if round == 0 && !bytes.Equal(after, before) && strings.Contains(out.String(), "defragmented") {
			continue // a copy no bigger replaced it, and defrag said so
		}
		if !bytes.Equal(after, before) || !strings.Contains(out.String(), "nothing to reclaim") || !strings.Contains(out.String(), "kept it unchanged") {
			t.Fatalf("round %d: db changed (%d -> %d bytes) or not said: %q", round, len(before), len(after), out.String())
		}
	}
}
