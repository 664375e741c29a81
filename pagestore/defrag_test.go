package pagestore

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// defragValue is value i of n bytes, a function of i alone. Its bytes are
// a hash (splitmix64), so compression leaves it at n bytes and the tests
// get the page shapes they build.
func defragValue(i uint64, n int) []byte {
	v := make([]byte, n)
	for j := 0; j+8 <= n; j += 8 {
		z := i*0x9e3779b97f4a7c15 + uint64(j+1)*0xbf58476d1ce4e5b9
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		binary.LittleEndian.PutUint64(v[j:], z^z>>31)
	}
	return v
}

// TestOnlineDefragUnderLoad builds a file of at least 200 MB, deletes the
// oldest 75% of it (compaction style, so the live data sits in the tail),
// and runs online defrag while a writer appends and readers verify
// consistent snapshots. The file must end at most 1.2x the bytes in use.
// STRATA_PAGESTORE_DEFRAG_MB overrides the size.
func TestOnlineDefragUnderLoad(t *testing.T) {
	sizeMB := 200
	if s := os.Getenv("STRATA_PAGESTORE_DEFRAG_MB"); s != "" {
		sizeMB, _ = strconv.Atoi(s)
	}
	const valSize = 1000
	total := uint64(sizeMB) << 20 / (valSize + 17 + elemSize)
	path := tmpDB(t)
	db, err := Open(path, &Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	for lo := uint64(0); lo < total; lo += 5000 {
		err := db.Update(func(tx *Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("key"))
			if err != nil {
				return err
			}
			for i := lo; i < min(lo+5000, total); i++ {
				if err := b.Put(revKey(i), defragValue(i, valSize)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	built := db.Stats()
	if built.FileSize < 200<<20 && sizeMB >= 200 {
		t.Fatalf("built only %d bytes", built.FileSize)
	}
	cut := total * 3 / 4
	for lo := uint64(0); lo < cut; lo += 10000 {
		err := db.Update(func(tx *Tx) error {
			b, _ := tx.Bucket([]byte("key"))
			for i := lo; i < min(lo+10000, cut); i++ {
				if err := b.Delete(revKey(i)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Sync(); err != nil {
		t.Fatal(err)
	}
	db.Close()
	// Reopen durable for the online phase, so lock holds include fsyncs.
	db, err = Open(path, &Options{StrictMode: os.Getenv("STRATA_PAGESTORE_DEFRAG_STRICT") != ""})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	before := db.Stats()
	t.Logf("built %d keys, file %d MB; after deleting 75%%: in use %d MB, file %d MB",
		total, built.FileSize>>20, before.InUseBytes>>20, before.FileSize>>20)

	var (
		stop    atomic.Bool
		wg      sync.WaitGroup
		errs    = make(chan error, 8)
		written atomic.Uint64 // keys the writer has committed
		reads   atomic.Int64
		commits atomic.Int64
		maxWait atomic.Int64
	)
	writerBase := total + 1_000_000
	wg.Add(1)
	go func() { // writer: appends 20 keys per commit and records the count
		defer wg.Done()
		n := uint64(0)
		for !stop.Load() {
			start := time.Now()
			err := db.Update(func(tx *Tx) error {
				if w := time.Since(start); int64(w) > maxWait.Load() {
					maxWait.Store(int64(w))
				}
				b, _ := tx.Bucket([]byte("key"))
				for i := n; i < n+20; i++ {
					if err := b.Put(revKey(writerBase+i), defragValue(writerBase+i, valSize)); err != nil {
						return err
					}
				}
				m, err := tx.CreateBucketIfNotExists([]byte("count"))
				if err != nil {
					return err
				}
				return m.Put([]byte("n"), []byte(strconv.FormatUint(n+20, 10)))
			})
			if err != nil {
				errs <- fmt.Errorf("writer: %w", err)
				return
			}
			n += 20
			written.Store(n)
			commits.Add(1)
			time.Sleep(2 * time.Millisecond)
		}
	}()
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func() { // readers: every snapshot is internally consistent
			defer wg.Done()
			for !stop.Load() {
				err := db.View(func(tx *Tx) error {
					want := uint64(0)
					if m, err := tx.Bucket([]byte("count")); err == nil {
						v, err := m.Get([]byte("n"))
						if err != nil {
							return err
						}
						want, _ = strconv.ParseUint(string(v), 10, 64)
					}
					b, err := tx.Bucket([]byte("key"))
					if err != nil {
						return err
					}
					var old, fresh uint64
					c := b.Cursor()
					for k, v := c.First(); k != nil; k, v = c.Next() {
						i := binary.BigEndian.Uint64(k)
						if string(v) != string(defragValue(i, valSize)) {
							return fmt.Errorf("tx %d: key %d has a wrong value", tx.ID(), i)
						}
						if i >= writerBase {
							fresh++
						} else {
							old++
						}
					}
					if c.Err() != nil {
						return c.Err()
					}
					if old != total-cut || fresh != want {
						return fmt.Errorf("tx %d: %d old keys (want %d), %d writer keys (want %d)", tx.ID(), old, total-cut, fresh, want)
					}
					return nil
				})
				if err != nil {
					errs <- fmt.Errorf("reader: %w", err)
					return
				}
				reads.Add(1)
			}
		}()
	}

	start := time.Now()
	var holds, cpu []time.Duration
	err = db.Defrag(context.Background(), func(p DefragProgress) {
		holds = append(holds, p.LockHold)
		cpu = append(cpu, p.LockHold-p.SyncTime)
	})
	elapsed := time.Since(start)
	time.Sleep(50 * time.Millisecond) // let readers and the writer overlap the end too
	stop.Store(true)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if err != nil {
		t.Fatalf("defrag: %v", err)
	}
	slices.Sort(holds)
	slices.Sort(cpu)
	if len(holds) > 0 {
		t.Logf("defrag step lock hold: p50 %v p90 %v p99 %v max %v over %d steps",
			holds[len(holds)/2], holds[len(holds)*9/10], holds[len(holds)*99/100], holds[len(holds)-1], len(holds))
		t.Logf("of which not fdatasync: p50 %v p90 %v p99 %v max %v", cpu[len(cpu)/2], cpu[len(cpu)*9/10], cpu[len(cpu)*99/100], cpu[len(cpu)-1])
		// The disk's fdatasync latency is outside our control (shared
		// CI disks show 10-100 ms spikes); what a step does itself must
		// stay near the 10 ms budget.
		// Budget ~10 ms; the bound is loose because shared CI machines
		// (load 10 on 2 cores while this was written) stretch CPU time.
		if p50 := cpu[len(cpu)/2]; p50 > 25*time.Millisecond {
			t.Errorf("defrag steps spend %v (p50) holding the write lock outside fdatasync; budget ~10ms", p50)
		}
	}
	after := db.Stats()
	t.Logf("defrag took %v: %d steps, %d pages moved, max lock hold %v; writer %d commits (max wait for lock %v), %d reader snapshots verified",
		elapsed, after.DefragSteps, after.DefragMovedPages, after.DefragMaxLockHold, commits.Load(), time.Duration(maxWait.Load()), reads.Load())
	t.Logf("after: file %d MB, in use %d MB", after.FileSize>>20, after.InUseBytes>>20)
	if float64(after.FileSize) > 1.2*float64(after.InUseBytes) {
		t.Errorf("file %d bytes > 1.2 x in use %d", after.FileSize, after.InUseBytes)
	}
	if commits.Load() == 0 || reads.Load() == 0 {
		t.Errorf("writer (%d commits) or readers (%d) made no progress during defrag", commits.Load(), reads.Load())
	}
	wtx, _ := db.Begin(true)
	if err := db.checkLatest(); err != nil {
		t.Errorf("checkLatest: %v", err)
	}
	if testing.Verbose() {
		debugPages(t, db)
	}
	wtx.Rollback()
	checkDB(t, db)
}
