package pagestore

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/strata-db/strata/internal/testseed"
	"github.com/strata-db/strata/vfs"
	"github.com/strata-db/strata/vfs/powercut"
)

// TestPowerLossCycles cuts the page store's power: it commits
// transactions on a vfs.PowerLossFS, cuts the power at a random I/O
// operation (data page writes, their sync, the meta write and its sync,
// the file's growth, the create itself), throws away everything not
// fsync'd, files and directory entries alike, and reopens. Every
// acknowledged commit must be there, whole; the one in flight at the cut
// may be there whole or not at all; nothing else. The file keeps growing
// and churning across cycles, so the cuts also land in freelist-log
// writes and page reuse.
func TestPowerLossCycles(t *testing.T) {
	seed := testseed.Seed(t)
	rng := rand.New(rand.NewPCG(seed, seed^0xa0761d6478bd642f))
	cycles := 200
	if testing.Short() {
		cycles = 60
	}
	path := tmpDB(t)
	acked := map[string]string{} // the state of the last acknowledged commit
	lost, kept, creates := 0, 0, 0
	var ops int
	plan := powerPoints()
	for cycle := 0; cycle < cycles; cycle++ {
		plfs := vfs.NewPowerLossFS(vfs.Default)
		cut := plan.Next(rng, cycle, 60)
		ffs := vfs.NewFaultFS(plfs, cut.Hook)
		if _, err := os.Stat(path); err != nil {
			creates++
		}
		db, err := Open(path, &Options{FS: ffs, StrictMode: true})
		inflight := map[string]string{}
		if err == nil {
			for tx := 0; tx < 20 && !ffs.Crashed(); tx++ {
				next := map[string]string{}
				for k, v := range acked {
					next[k] = v
				}
				err := db.Update(func(tx *Tx) error {
					b, err := tx.CreateBucketIfNotExists([]byte("b"))
					if err != nil {
						return err
					}
					for i := 0; i < 1+rng.IntN(30); i++ {
						k := fmt.Sprintf("k%04d", rng.IntN(500))
						if rng.IntN(4) == 0 {
							if err := b.Delete([]byte(k)); err != nil {
								return err
							}
							delete(next, k)
							continue
						}
						// Zeros (stored compressed) or random bytes
						// (stored as they are, so the file grows).
						pad := make([]byte, rng.IntN(3000))
						if rng.IntN(2) == 0 {
							for j := range pad {
								pad[j] = byte(rng.Uint32())
							}
						}
						v := fmt.Sprintf("c%d-t%d-%s", cycle, tx.ID(), pad)
						if err := b.Put([]byte(k), []byte(v)); err != nil {
							return err
						}
						next[k] = v
					}
					return nil
				})
				if err == nil {
					acked = next
				} else {
					inflight = next
					break
				}
			}
			db.Close()
		}
		ops += cut.Ops()
		crashAt := cut.At
		plfs.Crash()
		if _, _, err := plfs.Recover(); err != nil {
			t.Fatalf("cycle %d: recover: %v", cycle, err)
		}
		// Reopen on the real file system: what the machine sees after
		// the reboot.
		db, err = Open(path, &Options{StrictMode: true})
		if err != nil {
			t.Fatalf("cycle %d (power cut at operation %d): reopen: %v", cycle, crashAt, err)
		}
		got := map[string]string{}
		if err := db.View(func(tx *Tx) error {
			b, err := tx.Bucket([]byte("b"))
			if err != nil {
				return nil // no commit acknowledged yet
			}
			return b.ForEach(func(k, v []byte) error {
				got[string(k)] = string(v)
				return nil
			})
		}); err != nil {
			t.Fatalf("cycle %d: read after the power loss: %v", cycle, err)
		}
		if err := db.View(func(tx *Tx) error { return tx.Check() }); err != nil {
			t.Fatalf("cycle %d: check after the power loss: %v", cycle, err)
		}
		db.Close()
		switch {
		case sameMap(got, acked):
			if len(inflight) > 0 {
				lost++
			}
		case len(inflight) > 0 && sameMap(got, inflight):
			acked = inflight // the commit in flight made it
			kept++
		default:
			t.Fatalf("cycle %d (power cut at operation %d): %d keys after the power loss, want the %d of the last acknowledged commit (or the %d of the one in flight)",
				cycle, crashAt, len(got), len(acked), len(inflight))
		}
	}
	points, err := plan.Summary()
	t.Logf("POWER-LOSS pagestore: %d cycles (%d operations in all), %d creates; cuts: %s; commit in flight at the cut: kept whole %d, lost whole %d; acknowledged commits lost 0",
		cycles, ops, creates, points, kept, lost)
	if err != nil {
		t.Fatal(err)
	}
}

// powerPoints are the named points of a commit where the power-loss test
// cuts: a data page write (the meta not written yet), the sync of the
// data pages (the same), the meta write, its sync, and the file's
// growth. Meta writes are told from page writes by their offset (the
// two meta pages lead the file, at the default page size).
func powerPoints() *powercut.Plan {
	ps := int64(os.Getpagesize())
	lastMeta := false
	isMeta := func(ev vfs.Event) bool { return ev.Op == vfs.OpWrite && ev.Off < 2*ps }
	return &powercut.Plan{Points: []powercut.Point{
		{Name: "page write before the meta write", Match: func(ev vfs.Event) bool {
			if ev.Op == vfs.OpWrite {
				lastMeta = isMeta(ev)
			}
			return ev.Op == vfs.OpWrite && !isMeta(ev)
		}},
		{Name: "page sync before the meta write", Match: func(ev vfs.Event) bool { return ev.Op == vfs.OpSync && !lastMeta }},
		{Name: "meta write", Match: isMeta},
		{Name: "meta sync", Match: func(ev vfs.Event) bool { return ev.Op == vfs.OpSync && lastMeta }},
		{Name: "file growth", Match: func(ev vfs.Event) bool { return ev.Op == vfs.OpTruncate || ev.Op == vfs.OpPreallocate }},
	}}
}

func sameMap(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}
