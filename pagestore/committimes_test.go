package pagestore

import (
	"testing"
)

// TestOnCommitTimesPhases checks the commit hook: one call per published
// commit (none for a commit that changed nothing), phases that add up to
// no more than the whole, and a write phase that includes the syncs.
func TestOnCommitTimesPhases(t *testing.T) {
	var got []CommitTimes
	db := openT(t, tmpDB(t), &Options{OnCommit: func(c CommitTimes) { got = append(got, c) }})
	defer db.Close()
	got = nil // the creation of the file is a commit of its own
	put := func(n int) {
		t.Helper()
		if err := db.Update(func(tx *Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("key"))
			if err != nil {
				return err
			}
			for i := 0; i < n; i++ {
				if err := b.Put(revKey(uint64(i)), make([]byte, 200)); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	put(2000)
	put(0) // nothing changed: no commit, no call
	if len(got) != 1 {
		t.Fatalf("%d OnCommit calls, want 1: %+v", len(got), got)
	}
	c := got[0]
	if c.Write <= 0 || c.Spill <= 0 || c.Total < c.Rebalance+c.Spill+c.Write {
		t.Fatalf("phases %+v: want write and spill > 0 and their sum within the total", c)
	}
	if st := db.Stats(); c.Write < st.LastCommitSync {
		t.Fatalf("write phase %v shorter than the commit's fdatasyncs %v", c.Write, st.LastCommitSync)
	}
}
