package pagestore

import (
	"testing"
)

// TestDefragStepsWithReaderHeld runs defrag steps while a read
// transaction opened before the deletes stays open, as a snapshot being
// streamed to a follower or saved by etcdctl does. The pages it sees are
// pending, not free: a step must not move pages into new pages at the end
// of the file (the next step would find them there and move them again,
// growing the file step after step), and once the reader is gone the
// steps must compact the file as usual, with the contents unchanged.
func TestDefragStepsWithReaderHeld(t *testing.T) {
	db := openT(t, tmpDB(t), &Options{NoSync: true})
	defer db.Close()
	const total = 150
	for i := uint64(0); i < total; i++ {
		// A commit each, as a member's batch commits: a chain of
		// freelist records, some of them in the file's tail.
		err := db.Update(func(tx *Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("key"))
			if err != nil {
				return err
			}
			return b.Put(revKey(i), defragValue(i, 1000))
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	reader, err := db.Begin(false)
	if err != nil {
		t.Fatal(err)
	}
	// Close waits for readers: end this one before it, on failures too.
	open := true
	endReader := func() {
		if open {
			open = false
			reader.Rollback()
		}
	}
	defer endReader()
	deleteAllBut(t, db, total, 10, 0)
	want := dump(t, db)
	before := db.Stats().FileSize
	moved := 0
	for step := 0; step < 200; step++ {
		r, err := db.DefragStep(64)
		if err != nil {
			t.Fatalf("step %d with the reader held: %v", step, err)
		}
		moved += r.Moved
		if r.FileSize > before {
			t.Fatalf("step %d with the reader held: the file grew from %d to %d bytes (%d pages moved so far)", step, before, r.FileSize, moved)
		}
		if r.Done {
			break
		}
	}
	sameContents(t, dump(t, db), want)
	endReader()
	for step := 0; ; step++ {
		r, err := db.DefragStep(64)
		if err != nil {
			t.Fatalf("step %d after the reader: %v", step, err)
		}
		if r.Done {
			break
		}
		if step > 10000 {
			t.Fatal("defrag after the reader closed does not end")
		}
	}
	sameContents(t, dump(t, db), want)
	st := db.Stats()
	t.Logf("file %d bytes with the reader held (%d pages moved), %d after it, %d in use", before, moved, st.FileSize, st.InUseBytes)
	if limit := st.InUseBytes + 20*int64(db.pageSize); st.FileSize > limit {
		t.Errorf("after the reader closed: file %d bytes, in use %d", st.FileSize, st.InUseBytes)
	}
}

// deleteAllBut deletes, in one commit, the keys revKey(i) of bucket "key"
// for i below n except those with i%every == keep.
func deleteAllBut(t *testing.T, db *DB, n, every, keep uint64) {
	t.Helper()
	err := db.Update(func(tx *Tx) error {
		b, err := tx.Bucket([]byte("key"))
		if err != nil {
			return err
		}
		for i := uint64(0); i < n; i++ {
			if i%every != keep {
				if err := b.Delete(revKey(i)); err != nil {
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
