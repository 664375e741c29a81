package pagestore

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fuzzImage builds a small database with every kind of page: a bucket
// directory, a bucket deep enough for a branch page, a value with
// overflow pages, a compressed value, and a freelist log with deltas
// (deletes and several commits).
func fuzzImage(tb testing.TB) []byte {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "seed.db")
	db, err := Open(path, &Options{StrictMode: true})
	if err != nil {
		tb.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	steps := []func(tx *Tx) error{
		func(tx *Tx) error {
			b, err := tx.CreateBucket([]byte("key"))
			if err != nil {
				return err
			}
			for i := 0; i < 150; i++ {
				if err := b.Put([]byte(fmt.Sprintf("%08d_rev", i)), random(40)); err != nil {
					return err
				}
			}
			return nil
		},
		func(tx *Tx) error {
			b, err := tx.CreateBucket([]byte("meta"))
			if err != nil {
				return err
			}
			if err := b.Put([]byte("big"), random(6000)); err != nil {
				return err
			}
			return b.Put([]byte("squeezable"), bytes.Repeat([]byte("etcd "), 400))
		},
		func(tx *Tx) error {
			b, err := tx.Bucket([]byte("key"))
			if err != nil {
				return err
			}
			for i := 20; i < 60; i++ {
				if err := b.Delete([]byte(fmt.Sprintf("%08d_rev", i))); err != nil {
					return err
				}
			}
			return nil
		},
	}
	for _, step := range steps {
		if err := db.Update(step); err != nil {
			tb.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		tb.Fatal(err)
	}
	img, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return img
}

// reseal recomputes the checksum of every page run in img, so that damage
// the fuzzer made inside a page reaches the structural checks behind the
// checksum, as a bug in a writer (or a crafted file) would.
func reseal(img []byte) {
	ps := 4096
	if len(img) >= metaEnd {
		if v := int(le.Uint32(img[metaOffPageSize:])); v >= minPageSize && v <= maxPageSize && v&(v-1) == 0 {
			ps = v
		}
	}
	for off := 0; off+ps <= len(img); {
		run := ps
		if pgFlags(img[off:]) != flagMeta {
			if n := int(pgOverflow(img[off:])); n > 0 && n < (len(img)-off)/ps {
				run = (1 + n) * ps
			}
		}
		sealPage(img[off : off+run])
		off += run
	}
}

// FuzzOpenDamagedFile opens fuzzer-made database files (a valid image with
// damage, its checksums optionally recomputed so the damage gets past
// them) the way Strata does: checked offline, opened read-only and read
// through, opened for writing, read, written and committed. Nothing may
// panic; a file refused as corrupt must be named; and a file the checker
// passes must read, take a write, and pass the checker again.
func FuzzOpenDamagedFile(f *testing.F) {
	img := fuzzImage(f)
	f.Add(img, false)
	f.Add(img, true)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 8; i++ { // a few damaged pages, resealed
		d := append([]byte(nil), img...)
		page := 2 + rng.IntN(len(d)/4096-2)
		for j := 0; j < 4; j++ {
			d[page*4096+32+rng.IntN(64)] ^= byte(1 + rng.IntN(255))
		}
		f.Add(d, true)
	}
	f.Add(img[:len(img)/2], false)

	f.Fuzz(func(t *testing.T, data []byte, resealed bool) {
		if len(data) > 1<<20 {
			return
		}
		data = append([]byte(nil), data...)
		if resealed {
			reseal(data)
		}
		path := filepath.Join(t.TempDir(), "fuzz.db")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		named := func(what string, err error) {
			t.Helper()
			if err != nil && errors.Is(err, ErrCorrupt) && !strings.Contains(err.Error(), path) {
				t.Fatalf("%s: corruption error does not name the file: %v", what, err)
			}
		}

		rep, err := CheckFile(path, nil)
		named("check", err)
		clean := err == nil && rep.OK()
		if rep != nil {
			for _, p := range rep.Problems {
				if p.Page >= 0 && rep.PageSize > 0 && p.Offset != p.Page*int64(rep.PageSize) {
					t.Fatalf("check problem names page %d at offset %d: %s", p.Page, p.Offset, p)
				}
			}
		}

		readAll := func(db *DB) error {
			return db.View(func(tx *Tx) error {
				return tx.ForEach(func(name []byte, b *Bucket) error {
					c := b.Cursor()
					n := 0
					for k, _ := c.First(); k != nil; k, _ = c.Next() {
						if _, err := b.Get(k); err != nil {
							return err
						}
						n++
					}
					if err := c.Err(); err != nil {
						return err
					}
					for k, _ := c.Last(); k != nil; k, _ = c.Prev() {
						n--
					}
					if err := c.Err(); err != nil {
						return err
					}
					if n != 0 {
						return fmt.Errorf("bucket %q: forward and backward walks disagree by %d keys", name, n)
					}
					return nil
				})
			})
		}

		if db, err := Open(path, &Options{ReadOnly: true}); err == nil {
			err := readAll(db)
			named("read-only read", err)
			if clean && err != nil {
				t.Fatalf("the checker passed the file, but reading it failed: %v", err)
			}
			db.Close()
		} else {
			named("read-only open", err)
			if clean {
				t.Fatalf("the checker passed the file, but a read-only open failed: %v", err)
			}
		}

		db, err := Open(path, nil)
		if err != nil {
			named("open", err)
			if clean {
				t.Fatalf("the checker passed the file, but opening it failed: %v", err)
			}
			return
		}
		rerr := readAll(db)
		named("read", rerr)
		werr := db.Update(func(tx *Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("key"))
			if err != nil {
				return err
			}
			for i := 0; i < 40; i++ {
				if err := b.Put([]byte(fmt.Sprintf("%08d_new", i)), bytes.Repeat([]byte{byte(i)}, 90)); err != nil {
					return err
				}
			}
			return b.Delete([]byte("00000100_rev"))
		})
		named("write", werr)
		if cerr := db.Close(); clean && cerr != nil {
			t.Fatalf("close after a write to a clean file: %v", cerr)
		}
		if !clean {
			return
		}
		if rerr != nil || werr != nil {
			t.Fatalf("the checker passed the file, but read (%v) or write (%v) failed", rerr, werr)
		}
		if rep, err := CheckFile(path, nil); err != nil || !rep.OK() {
			if err == nil {
				err = rep.Err()
			}
			t.Fatalf("a clean file fails the checker after one write: %v", err)
		}
	})
}

// TestMetaHwmOverflow: a meta whose checksum is right but whose hwm, in
// bytes, overflows an int64 used to pass the file-size check (the product
// wrapped) and then fault reading past the mapping. Found by
// FuzzOpenDamagedFile.
func TestMetaHwmOverflow(t *testing.T) {
	img := fuzzImage(t)
	for slot := 0; slot < numMetaPages; slot++ {
		le.PutUint64(img[slot*4096+metaOffHWM:], 1<<58)
	}
	reseal(img)
	path := filepath.Join(t.TempDir(), "db")
	if err := os.WriteFile(path, img, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, ro := range []bool{false, true} {
		db, err := Open(path, &Options{ReadOnly: ro})
		if err == nil {
			db.Close()
			t.Fatalf("read-only %v: a meta with hwm 2^58 opened", ro)
		}
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "beyond any file") {
			t.Fatalf("read-only %v: %v, want ErrCorrupt naming the file and the hwm", ro, err)
		}
	}
	rep, err := CheckFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || !strings.Contains(rep.Err().Error(), "beyond any file") {
		t.Fatalf("check: %v, want both metas reported", rep.Err())
	}
}
