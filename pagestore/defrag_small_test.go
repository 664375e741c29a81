package pagestore

import (
	"testing"
)

// TestDefragStepsStrict runs defrag steps of several sizes single-threaded
// with the checker after every commit.
func TestDefragStepsStrict(t *testing.T) {
	for _, batch := range []int{3, 64, 2048} {
		path := tmpDB(t)
		db := openT(t, path, &Options{NoSync: true})
		const total = 8000
		for lo := uint64(0); lo < total; lo += 2000 {
			err := db.Update(func(tx *Tx) error {
				b, err := tx.CreateBucketIfNotExists([]byte("key"))
				if err != nil {
					return err
				}
				for i := lo; i < lo+2000; i++ {
					if err := b.Put(revKey(i), defragValue(i, 500)); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		err := db.Update(func(tx *Tx) error {
			b, _ := tx.Bucket([]byte("key"))
			for i := uint64(0); i < total*3/4; i++ {
				if err := b.Delete(revKey(i)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		want := dump(t, db)
		for step := 0; ; step++ {
			r, err := db.DefragStep(batch)
			if err != nil {
				t.Fatalf("batch %d step %d: %v", batch, step, err)
			}
			if r.Done {
				break
			}
			if step > 100000 {
				t.Fatal("no end")
			}
		}
		sameContents(t, dump(t, db), want)
		st := db.Stats()
		if float64(st.FileSize) > 1.2*float64(st.InUseBytes) {
			t.Errorf("batch %d: file %d, in use %d", batch, st.FileSize, st.InUseBytes)
		}
		db.Close()
	}
}

// TestDefragLargeValues defrags a file whose live data is mostly large
// values (multi-page leaf runs), as the quota cycle leaves it: 1 MiB values
// written, most deleted. Runs that start below the shrink target but reach
// into the tail must move too, or the file cannot be truncated.
func TestDefragLargeValues(t *testing.T) {
	path := tmpDB(t)
	db := openT(t, path, &Options{NoSync: true, StrictMode: true})
	const n = 24
	for i := uint64(0); i < n; i++ {
		err := db.Update(func(tx *Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("key"))
			if err != nil {
				return err
			}
			return b.Put(revKey(i), defragValue(i, 1<<20))
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	deleteAllBut(t, db, n, 4, 3)
	want := dump(t, db)
	before := db.Stats()
	for step := 0; ; step++ {
		r, err := db.DefragStep(64)
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if r.Done {
			break
		}
		if step > 10000 {
			t.Fatal("defrag does not finish")
		}
	}
	sameContents(t, dump(t, db), want)
	st := db.Stats()
	t.Logf("file %d -> %d bytes, in use %d", before.FileSize, st.FileSize, st.InUseBytes)
	if float64(st.FileSize) > 1.2*float64(st.InUseBytes) {
		t.Fatalf("file %d bytes, in use %d: more than 1.2x", st.FileSize, st.InUseBytes)
	}
}
