package pagestore

import (
	"testing"
)

// TestApplyDefragStalePlan applies a plan after the writer has rewritten
// the pages it names and reused them inside multi-page runs (large
// values). The plan is stale, which ApplyDefrag documents as harmless:
// such pages must be skipped, not read as if they still began a run
// (their first bytes are now the middle of a value).
func TestApplyDefragStalePlan(t *testing.T) {
	path := tmpDB(t)
	db := openT(t, path, &Options{NoSync: true})
	defer db.Close()
	const total = 6000
	put := func(lo, hi uint64, size int) {
		t.Helper()
		err := db.Update(func(tx *Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("key"))
			if err != nil {
				return err
			}
			for i := lo; i < hi; i++ {
				if err := b.Put(revKey(i), defragValue(i, size)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	put(0, total, 200)
	// Keep one key in 8: the live leaves are spread over the whole file.
	err := db.Update(func(tx *Tx) error {
		b, _ := tx.Bucket([]byte("key"))
		for i := uint64(0); i < total; i++ {
			if i%8 != 0 {
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
	plan, err := db.PlanDefrag(256)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Pages() == 0 {
		t.Fatal("nothing to move: the test needs a fragmented file")
	}
	// The writer rewrites every live leaf (freeing the planned pages),
	// then fills the free space with 3-page values, so the planned pages
	// end up inside runs.
	put(0, total, 180)
	for i := uint64(total); i < total+400; i += 20 {
		put(i, i+20, 3*db.PageSize()-500)
	}
	err = db.Update(func(tx *Tx) error {
		_, err := tx.ApplyDefrag(plan)
		return err
	})
	if err != nil {
		t.Fatalf("applying a stale plan: %v", err)
	}
	if err := db.View(func(tx *Tx) error { return tx.Check() }); err != nil {
		t.Fatal(err)
	}
}
