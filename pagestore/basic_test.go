package pagestore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
)

func revKey(i uint64) []byte {
	k := make([]byte, 17)
	binary.BigEndian.PutUint64(k, i)
	k[8] = '_'
	return k
}

func TestBasicPutGetReopen(t *testing.T) {
	path := tmpDB(t)
	db := openT(t, path, &Options{NoSync: true, Preallocate: true})
	const n = 5000
	for batch := 0; batch < n; batch += 500 {
		err := db.Update(func(tx *Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("key"))
			if err != nil {
				return err
			}
			for i := batch; i < batch+500; i++ {
				if err := b.Put(revKey(uint64(i)), make([]byte, 256)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	check := func(db *DB) {
		err := db.View(func(tx *Tx) error {
			b, err := tx.Bucket([]byte("key"))
			if err != nil {
				return err
			}
			for i := 0; i < n; i++ {
				v, err := b.Get(revKey(uint64(i)))
				if err != nil {
					return err
				}
				if len(v) != 256 {
					t.Fatalf("key %d: len %d", i, len(v))
				}
			}
			c := b.Cursor()
			cnt := 0
			for k, _ := c.Last(); k != nil; k, _ = c.Prev() {
				if binary.BigEndian.Uint64(k) != uint64(n-1-cnt) {
					t.Fatalf("reverse order broken at %d", cnt)
				}
				cnt++
			}
			if cnt != n {
				t.Fatalf("reverse count %d", cnt)
			}
			if _, err := tx.Bucket([]byte("nope")); !errors.Is(err, ErrBucketNotFound) {
				t.Fatalf("missing bucket: %v", err)
			}
			return c.Err()
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	check(db)
	st := db.Stats()
	// Appends fill leaves: 256+17+16 bytes per key, ~14 per 4 KiB page.
	if maxBytes := int64(n) * 290 * 115 / 100; st.InUseBytes > maxBytes+int64(20*st.PageSize) {
		t.Errorf("in use %d bytes for %d keys: leaves not filled (limit %d)", st.InUseBytes, n, maxBytes)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openT(t, path, nil)
	defer db.Close()
	check(db)
	checkDB(t, db)
	if _, err := Open(path, nil); !errors.Is(err, ErrDatabaseLocked) {
		t.Fatalf("second open: %v, want ErrDatabaseLocked", err)
	}
}

// TestAppendFastPathAfterDeletes drives the writer's leaf hint (Put and
// Delete skip the descent for a key in the last leaf's range) through the
// cases that could make it wrong: appends, then deletes that empty the
// rightmost leaf and more, then keys below, between and above what is
// left, all in one transaction; then compaction-style deletes from the
// left with misses; and checks the result against a map.
func TestAppendFastPathAfterDeletes(t *testing.T) {
	db := openT(t, tmpDB(t), &Options{NoSync: true, StrictMode: true})
	want := map[string]string{}
	key := func(i int) []byte { return []byte(fmt.Sprintf("k%08d", i)) }
	put := func(b *Bucket, i int) {
		t.Helper()
		v := fmt.Sprintf("v%d", i)
		if err := b.Put(key(i), []byte(v)); err != nil {
			t.Fatal(err)
		}
		want[string(key(i))] = v
	}
	del := func(b *Bucket, i int) {
		t.Helper()
		if err := b.Delete(key(i)); err != nil {
			t.Fatal(err)
		}
		delete(want, string(key(i)))
	}
	update := func(fn func(b *Bucket)) {
		t.Helper()
		if err := db.Update(func(tx *Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("b"))
			if err != nil {
				return err
			}
			fn(b)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	update(func(b *Bucket) {
		for i := 0; i < 5000; i += 2 {
			put(b, i)
		}
	})
	update(func(b *Bucket) {
		for i := 5000; i < 6000; i += 2 {
			put(b, i) // appends: the shortcut is armed
		}
		for i := 4000; i < 6000; i += 2 {
			del(b, i) // empties the rightmost leaf and some before it
		}
		put(b, 3999) // above what is left: may take the shortcut
		put(b, 1001) // below: must descend
		put(b, 4001)
		for i := 7000; i < 7200; i++ {
			put(b, i)
		}
		put(b, 6999) // below the new largest
		del(b, 7199)
		put(b, 7198) // overwrite of the largest
	})
	update(func(b *Bucket) {
		for i := 7200; i < 9000; i++ {
			put(b, i)
		}
		put(b, 3) // a new transaction: a new shortcut, then a key far below
	})
	update(func(b *Bucket) {
		// Compaction: the oldest first, with misses (odd keys below 4000
		// were never put) in the leaf the hint holds and past its end.
		for i := 0; i < 3000; i++ {
			del(b, i)
		}
		put(b, 2999) // back into a leaf the deletes emptied
		del(b, 8999)
		del(b, 12345) // above everything
		put(b, 500)
	})
	got := dump(t, db)["b"]
	sameContents(t, map[string]map[string]string{"b": got}, map[string]map[string]string{"b": want})
	checkDB(t, db)
}

// TestWriterPoolsAreBounded: a transaction far larger than usual must not
// leave the writer holding its memory afterwards.
func TestWriterPoolsAreBounded(t *testing.T) {
	db := openT(t, tmpDB(t), &Options{NoSync: true})
	val := make([]byte, 100)
	if err := db.Update(func(tx *Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("b"))
		if err != nil {
			return err
		}
		for i := uint64(0); i < 300_000; i++ {
			if err := b.Put(revKey(i), val); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if db.inodes.kept > inodeBudget {
		t.Fatalf("inode pool keeps %d elements, budget %d", db.inodes.kept, inodeBudget)
	}
	n := 0
	for _, l := range db.inodes.free {
		for _, a := range l {
			n += cap(a)
		}
	}
	if n != db.inodes.kept {
		t.Fatalf("inode pool: kept says %d, free lists hold %d", db.inodes.kept, n)
	}
	if len(db.slab.list) > db.slab.keep {
		t.Fatalf("slab keeps %d chunks (max %d)", len(db.slab.list), db.slab.keep)
	}
	for i, a := range db.arenas {
		if len(a.list) > a.keep {
			t.Fatalf("arena %d keeps %d chunks (max %d)", i, len(a.list), a.keep)
		}
	}
	if db.recent != nil {
		t.Fatalf("a commit of %d chunks is kept as recent", len(db.arenas[0].list)+len(db.arenas[1].list))
	}
}

// TestReaderBucketLookupPerCommit: readers share the directory entry of
// the bucket they last opened (DB.lastBucket) only within one commit. A
// reader of another commit, older or newer, sees its own commit's bucket:
// its new root after a write, its absence after a delete, and the new
// bucket of the same name created after that.
func TestReaderBucketLookupPerCommit(t *testing.T) {
	db := openT(t, tmpDB(t), &Options{NoSync: true})
	set := func(v string) {
		t.Helper()
		if err := db.Update(func(tx *Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("k"))
			if err != nil {
				return err
			}
			return b.Put([]byte("a"), []byte(v))
		}); err != nil {
			t.Fatal(err)
		}
	}
	read := func(tx *Tx) string {
		t.Helper()
		b, err := tx.Bucket([]byte("k"))
		if errors.Is(err, ErrBucketNotFound) {
			return "<none>"
		}
		if err != nil {
			t.Fatal(err)
		}
		v, err := b.Get([]byte("a"))
		if err != nil {
			t.Fatal(err)
		}
		return string(v)
	}
	begin := func() *Tx {
		t.Helper()
		tx, err := db.Begin(false)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tx.Rollback() })
		return tx
	}
	set("1")
	old := begin() // opens the bucket only after newer readers did
	if got := read(begin()); got != "1" {
		t.Fatalf("first reader: %q", got)
	}
	set("2")
	for i := 0; i < 3; i++ { // the first looks up, the others reuse
		if got := read(begin()); got != "2" {
			t.Fatalf("reader %d after the second write: %q, want 2", i, got)
		}
	}
	if got := read(old); got != "1" {
		t.Fatalf("a reader of the first commit opened the bucket late and read %q, want 1", got)
	}
	if got := read(begin()); got != "2" {
		t.Fatalf("a reader after the old one: %q, want 2", got)
	}
	if err := db.Update(func(tx *Tx) error { return tx.DeleteBucket([]byte("k")) }); err != nil {
		t.Fatal(err)
	}
	if got := read(begin()); got != "<none>" {
		t.Fatalf("after the bucket was deleted a reader found it: %q", got)
	}
	set("3")
	if got := read(begin()); got != "3" {
		t.Fatalf("the bucket created again: %q, want 3", got)
	}
	checkDB(t, db)
}
