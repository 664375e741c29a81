package mvcc

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/strata-db/strata/internal/poll"
	"github.com/strata-db/strata/pagestore"
)

// TestBackendDefragUnderWrites fills a store, deletes three keys in four and
// compacts, then runs Backend.Defrag while a writer keeps putting and
// readers keep ranging. The file must end at no more than 1.2x the bytes in
// use, every read must see a consistent store, and the data must survive a
// reopen.
func TestBackendDefragUnderWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	ts := openTestStore(t, path, StoreConfig{})
	s := ts.s
	val := make([]byte, 1024)
	ci := uint64(0)
	put := func(k string) {
		ci++
		if _, err := s.Put(ci, 1, &pb.PutRequest{Key: []byte(k), Value: val}); err != nil {
			t.Fatal(err)
		}
	}
	const n = 20000
	ci = fillThenDeleteThreeQuarters(t, ts, n, val)
	before := ts.db.Stats()

	// A writer and two readers run throughout the defrag.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var writes atomic.Int64
	var readErr atomic.Pointer[error]
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			put(fmt.Sprintf("/w/%06d", i%500))
			writes.Add(1)
			time.Sleep(100 * time.Microsecond)
		}
	}()
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := s.Range(&pb.RangeRequest{Key: []byte("/k/"), RangeEnd: []byte("/k0"), CountOnly: true})
				if err == nil && resp.Count != n/4 {
					err = fmt.Errorf("read saw %d keys under /k/, want %d", resp.Count, n/4)
				}
				if err != nil {
					readErr.Store(&err)
					return
				}
			}
		}()
	}
	steps := 0
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := writes.Load()
	err := ts.be.Defrag(ctx, func(p pagestore.DefragProgress) {
		steps++
		if steps == 1 {
			// The defrag is under way and holds nothing between its
			// steps: the writer must get a write in before the next one.
			// (A few steps can take less time than the writer needs to
			// be scheduled, so counting the writes at the end alone
			// could find none.)
			poll.Until(t, "a write while the defrag is under way", func() bool { return writes.Load() > start })
		}
	})
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if e := readErr.Load(); e != nil {
		t.Fatal(*e)
	}
	if err := ts.be.ForceCommit(); err != nil {
		t.Fatal(err)
	}
	after := ts.db.Stats()
	ratio := float64(after.FileSize) / float64(after.InUseBytes)
	t.Logf("defrag: %d steps, file %d -> %d bytes, in use %d (%.2fx), %d writes during it",
		steps, before.FileSize, after.FileSize, after.InUseBytes, ratio, writes.Load())
	if after.FileSize >= before.FileSize || ratio > 1.2 {
		t.Fatalf("file %d -> %d bytes with %d in use (%.2fx), want <= 1.2x", before.FileSize, after.FileSize, after.InUseBytes, ratio)
	}
	if writes.Load() == 0 {
		t.Fatal("the writer made no progress during the defrag")
	}
	rev := s.Rev()
	ts.close()

	ts = openTestStore(t, path, StoreConfig{})
	defer ts.close()
	if ts.s.Rev() != rev {
		t.Fatalf("revision %d after reopen, want %d", ts.s.Rev(), rev)
	}
	resp, err := ts.s.Range(&pb.RangeRequest{Key: []byte("/k/"), RangeEnd: []byte("/k0")})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != n/4 {
		t.Fatalf("%d keys after reopen, want %d", len(resp.Kvs), n/4)
	}
	for i, kv := range resp.Kvs {
		if want := fmt.Sprintf("/k/%06d", 4*i); string(kv.Key) != want || len(kv.Value) != len(val) {
			t.Fatalf("key %d: %q (%d bytes), want %q", i, kv.Key, len(kv.Value), want)
		}
	}
}

// TestBackendDefragConcurrentCalls runs two Backend.Defrag calls at once,
// as two Maintenance.Defragment requests do. Each must return: a step
// request one call hands to the committer must not be overwritten by the
// other's, or the first waits for a result that never comes (and, with
// its context done, waits forever for a commit that never takes it).
func TestBackendDefragConcurrentCalls(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	ts := openTestStore(t, path, StoreConfig{})
	defer ts.close()
	fillThenDeleteThreeQuarters(t, ts, 6000, make([]byte, 1024))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errc := make(chan error, 4)
	for i := 0; i < 4; i++ {
		go func() { errc <- ts.be.Defrag(ctx, nil) }()
	}
	for i := 0; i < 4; i++ {
		select {
		case err := <-errc:
			if err != nil {
				t.Errorf("Defrag: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a concurrent Defrag call hangs")
		}
	}
	if err := ts.db.View(func(tx *pagestore.Tx) error { return tx.Check() }); err != nil {
		t.Fatal(err)
	}
}

// fillThenDeleteThreeQuarters puts n keys /k/NNNNNN, deletes three in four,
// compacts and commits, so that most of the file is free. It returns the
// last consistent index used.
func fillThenDeleteThreeQuarters(t *testing.T, ts *testStore, n int, val []byte) uint64 {
	t.Helper()
	s := ts.s
	ci := uint64(0)
	for i := 0; i < n; i++ {
		ci++
		if _, err := s.Put(ci, 1, &pb.PutRequest{Key: []byte(fmt.Sprintf("/k/%06d", i)), Value: val}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		if i%4 == 0 {
			continue
		}
		ci++
		if _, err := s.DeleteRange(ci, 1, &pb.DeleteRangeRequest{Key: []byte(fmt.Sprintf("/k/%06d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	ci++
	_, done, err := s.Compact(ci, 1, &pb.CompactionRequest{Revision: s.Rev()})
	if err != nil {
		t.Fatal(err)
	}
	<-done
	if err := ts.be.ForceCommit(); err != nil {
		t.Fatal(err)
	}
	return ci
}
