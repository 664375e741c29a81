package pagestore

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/strata-db/strata/vfs"
)

// fill commits one batch per value of gen into bucket "b".
func fillBatch(t testing.TB, db *DB, gen, n int) {
	t.Helper()
	err := db.Update(func(tx *Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("b"))
		if err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			if err := b.Put(revKey(uint64(i)), []byte(fmt.Sprintf("gen%d-%d", gen, i))); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("fill gen %d: %v", gen, err)
	}
}

func txID(t testing.TB, db *DB) uint64 {
	var id uint64
	if err := db.View(func(tx *Tx) error { id = tx.ID(); return nil }); err != nil {
		t.Fatal(err)
	}
	return id
}

func TestTornMetaFallsBack(t *testing.T) {
	for _, mode := range []string{"torn", "bitflip", "zero"} {
		t.Run(mode, func(t *testing.T) {
			path := tmpDB(t)
			db := openT(t, path, nil)
			fillBatch(t, db, 1, 300)
			want := dump(t, db)
			prev := txID(t, db)
			fillBatch(t, db, 2, 300)
			newest := txID(t, db)
			ps := db.PageSize()
			db.Close()

			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			off := int64(newest%2) * int64(ps)
			page := make([]byte, ps)
			if _, err := f.ReadAt(page, off); err != nil {
				t.Fatal(err)
			}
			switch mode {
			case "torn": // the second half of the sector run never landed
				clear(page[ps/2:])
				copy(page[ps/2-8:], []byte{1, 2, 3, 4, 5, 6, 7, 8})
			case "bitflip":
				page[metaOffRoot] ^= 0x40
			case "zero":
				clear(page)
			}
			if _, err := f.WriteAt(page, off); err != nil {
				t.Fatal(err)
			}
			f.Close()

			db = openT(t, path, nil)
			if got := txID(t, db); got != prev {
				t.Fatalf("reopened at tx %d, want fallback to %d", got, prev)
			}
			sameContents(t, dump(t, db), want)
			checkDB(t, db)
			// The fallen-back DB keeps working and overwrites the bad slot.
			fillBatch(t, db, 3, 300)
			db.Close()
			db = openT(t, path, nil)
			defer db.Close()
			if got := txID(t, db); got != prev+1 {
				t.Fatalf("after recovery commit: tx %d, want %d", got, prev+1)
			}
		})
	}
	t.Run("both", func(t *testing.T) {
		path := tmpDB(t)
		db := openT(t, path, nil)
		fillBatch(t, db, 1, 300)
		ps := db.PageSize()
		db.Close()
		f, _ := os.OpenFile(path, os.O_RDWR, 0)
		f.WriteAt(make([]byte, 2*ps), 0)
		f.Close()
		_, err := Open(path, nil)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) {
			t.Fatalf("open with both metas destroyed: %v, want ErrCorrupt naming %s", err, path)
		}
	})
}

// leafPage returns the page id of the leaf holding key in bucket "b".
func leafPage(t testing.TB, db *DB, key []byte) pgid {
	var id pgid
	err := db.View(func(tx *Tx) error {
		b, err := tx.Bucket([]byte("b"))
		if err != nil {
			return err
		}
		c := Cursor{b: b}
		if err := c.search(key); err != nil {
			return err
		}
		id = pgID(c.top().p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestCorruptDataPage(t *testing.T) {
	path := tmpDB(t)
	db := openT(t, path, nil)
	fillBatch(t, db, 1, 3000)
	key := revKey(1500)
	id := leafPage(t, db, key)
	ps := db.PageSize()
	db.Close()

	f, _ := os.OpenFile(path, os.O_RDWR, 0)
	b := []byte{0}
	off := int64(id)*int64(ps) + int64(ps) - 100
	f.ReadAt(b, off)
	b[0] ^= 0xff
	f.WriteAt(b, off)
	f.Close()

	db, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	wantMsg := fmt.Sprintf("page %d", id)
	err = db.View(func(tx *Tx) error {
		b, err := tx.Bucket([]byte("b"))
		if err != nil {
			return err
		}
		_, err = b.Get(key)
		return err
	})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), wantMsg) || !strings.Contains(err.Error(), path) {
		t.Fatalf("Get on corrupt page: %v; want ErrCorrupt naming %q and %s", err, wantMsg, path)
	}
	err = db.View(func(tx *Tx) error {
		b, _ := tx.Bucket([]byte("b"))
		return b.ForEach(func(k, v []byte) error { return nil })
	})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), wantMsg) {
		t.Fatalf("scan over corrupt page: %v", err)
	}
	if err := db.View(func(tx *Tx) error { return tx.Check() }); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Check missed the corrupt page: %v", err)
	}
	// Writes that need the page fail cleanly too.
	err = db.Update(func(tx *Tx) error {
		b, _ := tx.Bucket([]byte("b"))
		return b.Put(key, []byte("x"))
	})
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Put into corrupt page: %v", err)
	}
}

// TestRandomCorruptionNeverPanics scribbles over random bytes of a closed
// file many times; every operation afterwards must return (an error or
// data), never panic.
func TestRandomCorruptionNeverPanics(t *testing.T) {
	src := tmpDB(t)
	db := openT(t, src, nil)
	for g := 0; g < 5; g++ {
		fillBatch(t, db, g, 2000)
	}
	db.Close()
	orig, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	detected := 0
	for iter := 0; iter < 40; iter++ {
		buf := append([]byte(nil), orig...)
		for j := 0; j < 1+rng.IntN(20); j++ {
			buf[2*4096+rng.IntN(len(buf)-2*4096)] ^= byte(1 + rng.IntN(255))
		}
		path := tmpDB(t)
		os.WriteFile(path, buf, 0o600)
		db, err := Open(path, nil)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("iteration %d: open error not ErrCorrupt: %v", iter, err)
			}
			detected++
			continue
		}
		verr := db.View(func(tx *Tx) error {
			return tx.ForEach(func(name []byte, b *Bucket) error {
				return b.ForEach(func(k, v []byte) error { return nil })
			})
		})
		cerr := db.View(func(tx *Tx) error { return tx.Check() })
		if verr != nil || cerr != nil {
			detected++
		}
		if verr != nil && !errors.Is(verr, ErrCorrupt) {
			t.Fatalf("iteration %d: scan error not ErrCorrupt: %v", iter, verr)
		}
		db.Close()
	}
	if detected == 0 {
		t.Fatal("no corruption detected in 40 corrupted files")
	}
}

// TestCommitFaultsKeepPreviousCommit injects errors at each I/O step of a
// commit: ENOSPC on a data page write, EIO on the data fsync, ENOSPC on the
// meta write, EIO on the meta fsync. Each time Commit fails, readers keep
// seeing the previous commit, the DB keeps working, and a reopen shows the
// previous commit.
func TestCommitFaultsKeepPreviousCommit(t *testing.T) {
	cases := []struct {
		name string
		hook func(ps int) vfs.Hook
		is   error
	}{
		{"enospc-data-write", func(ps int) vfs.Hook {
			return oneShot(func(ev vfs.Event) bool { return ev.Op == vfs.OpWrite && ev.Off >= int64(2*ps) },
				&vfs.Fault{Err: vfs.ENOSPC, Written: 100})
		}, syscall.ENOSPC},
		{"eio-data-sync", func(ps int) vfs.Hook {
			return oneShot(func(ev vfs.Event) bool { return ev.Op == vfs.OpSync }, &vfs.Fault{Err: vfs.EIO})
		}, syscall.EIO},
		{"enospc-meta-write", func(ps int) vfs.Hook {
			return oneShot(func(ev vfs.Event) bool { return ev.Op == vfs.OpWrite && ev.Off < int64(2*ps) },
				&vfs.Fault{Err: vfs.ENOSPC, Written: ps / 3})
		}, syscall.ENOSPC},
		{"eio-meta-sync", func(ps int) vfs.Hook {
			n := 0
			return oneShot(func(ev vfs.Event) bool {
				if ev.Op == vfs.OpSync {
					n++
				}
				return ev.Op == vfs.OpSync && n == 2
			}, &vfs.Fault{Err: vfs.EIO})
		}, syscall.EIO},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := tmpDB(t)
			fs := vfs.NewFaultFS(vfs.Default, nil)
			db := openT(t, path, &Options{FS: fs})
			fillBatch(t, db, 1, 2000)
			want := dump(t, db)
			prev := txID(t, db)

			fs.SetHook(tc.hook(db.PageSize()))
			err := db.Update(func(tx *Tx) error {
				b, _ := tx.Bucket([]byte("b"))
				for i := 0; i < 3000; i++ {
					if err := b.Put(revKey(uint64(i)), []byte("new value")); err != nil {
						return err
					}
				}
				return nil
			})
			if !errors.Is(err, tc.is) {
				t.Fatalf("commit error %v, want %v", err, tc.is)
			}
			if testing.Verbose() {
				t.Logf("commit error: %v", err)
			}
			if got := txID(t, db); got != prev {
				t.Fatalf("after failed commit readers see tx %d, want %d", got, prev)
			}
			sameContents(t, dump(t, db), want)
			if s := db.Stats(); s.CommitFailures != 1 {
				t.Fatalf("CommitFailures %d", s.CommitFailures)
			}
			db.Close()

			db = openT(t, path, nil)
			if got := txID(t, db); got != prev {
				t.Fatalf("reopened at tx %d, want previous commit %d", got, prev)
			}
			sameContents(t, dump(t, db), want)
			checkDB(t, db)
			fillBatch(t, db, 2, 2000) // and it still works
			db.Close()
		})
	}
}

// oneShot injects f the first time match is true.
func oneShot(match func(vfs.Event) bool, f *vfs.Fault) vfs.Hook {
	fired := false
	return func(ev vfs.Event) *vfs.Fault {
		if fired || !match(ev) {
			return nil
		}
		fired = true
		c := *f
		return &c
	}
}

func TestQuota(t *testing.T) {
	path := tmpDB(t)
	const quota = 4 << 20
	db := openT(t, path, &Options{MaxInUseBytes: quota, NoSync: true, Preallocate: true})
	defer db.Close()
	val := make([]byte, 256)
	next := 0
	put := func(n int) error {
		return db.Update(func(tx *Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("b"))
			if err != nil {
				return err
			}
			for i := 0; i < n; i++ {
				if err := b.Put(revKey(uint64(next+i)), val); err != nil {
					return err
				}
			}
			return nil
		})
	}
	var err error
	for err == nil {
		if err = put(500); err == nil {
			next += 500
		}
		if next > 100000 {
			t.Fatal("quota never hit")
		}
	}
	if !errors.Is(err, ErrNoSpace) {
		t.Fatalf("err %v, want ErrNoSpace", err)
	}
	st := db.Stats()
	if st.InUseBytes > quota {
		t.Fatalf("in use %d above quota %d", st.InUseBytes, quota)
	}
	t.Logf("quota hit after %d keys; in use %d, file %d", next, st.InUseBytes, st.FileSize)
	// Reads work.
	if err := db.View(func(tx *Tx) error {
		b, _ := tx.Bucket([]byte("b"))
		v, err := b.Get(revKey(0))
		if err == nil && v == nil {
			err = errors.New("key 0 missing")
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// Deletes work at the quota: the oldest half, compaction style.
	half := next / 2
	for lo := 0; lo < half; lo += 1000 {
		err := db.Update(func(tx *Tx) error {
			b, _ := tx.Bucket([]byte("b"))
			for i := lo; i < min(lo+1000, half); i++ {
				if err := b.Delete(revKey(uint64(i))); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("delete at quota: %v", err)
		}
	}
	sizeBefore := db.Stats().FileSize
	// Writes work again without a defrag: freed pages are reused.
	for i := 0; i < half/2; i += 500 {
		if err := put(500); err != nil {
			t.Fatalf("write after deleting half: %v", err)
		}
		next += 500
	}
	if st := db.Stats(); st.FileSize > sizeBefore {
		t.Fatalf("file grew from %d to %d: freed pages not reused", sizeBefore, st.FileSize)
	}
	checkDB(t, db)
}
