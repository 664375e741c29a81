package wal

import (
	"sync"
	"sync/atomic"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/strata-db/strata/vfs"
)

// TestConcurrentAppendersReleaseInOrder runs many appenders and checks the
// group-commit contract: when an append's Wait returns, every earlier
// append has been released too, at least one fdatasync started after the
// append was enqueued, and the log holds every entry in order.
func TestConcurrentAppendersReleaseInOrder(t *testing.T) {
	var syncs atomic.Int64
	ffs := vfs.NewFaultFS(vfs.Default, func(ev vfs.Event) *vfs.Fault {
		if ev.Op == vfs.OpSync {
			syncs.Add(1)
		}
		return nil
	})
	dir := t.TempDir()
	opts := &Options{FS: ffs, SegmentSize: 32 << 10}
	w := mustCreate(t, dir, opts)
	const writers, per = 16, 150
	futures := make([]*Future, writers*per+1)
	var mu sync.Mutex
	next := uint64(0)
	var wg sync.WaitGroup
	errs := make(chan string, writers)
	for g := 0; g < writers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				mu.Lock()
				next++
				idx := next
				before := syncs.Load()
				f := w.SaveAsync(mkState(1, idx-1), []*raftpb.Entry{mkEntry(idx, 1, 64)})
				futures[idx] = f
				mu.Unlock()
				if err := f.Wait(); err != nil {
					errs <- err.Error()
					return
				}
				if syncs.Load() <= before {
					errs <- "released before any fdatasync started after its enqueue"
					return
				}
				mu.Lock()
				prev := futures[idx-1]
				mu.Unlock()
				if prev != nil {
					select {
					case <-prev.Done():
					default:
						errs <- "released before an earlier append"
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	st := w.Stats()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w, err := Open(dir, Snapshot{}, opts)
	if err != nil {
		t.Fatal(err)
	}
	_, _, ents, _ := w.ReadAll()
	w.Close()
	checkEntries(t, ents, 1, writers*per, 64)
	t.Logf("%d appends in %d batches with %d fdatasyncs", st.Units, st.Batches, st.Syncs)
}
