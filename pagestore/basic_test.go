package pagestore

import (
	"encoding/binary"
	"errors"
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
