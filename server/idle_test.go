package server

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/strata-db/strata/internal/poll"
)

// TestIdleTrimAfterBurst: once a burst of writes is over, the member gives
// its writer buffers and garbage back (once per burst), and the page store
// serves and takes writes as before after each trim.
func TestIdleTrimAfterBurst(t *testing.T) {
	var trims atomic.Int32
	// The test process's heap is not the member's alone, so the gate is
	// bypassed here and tested on its own (TestWorthTrimming).
	c := newTestClusterHooked(t, 1, storageHooks{idleTrimInterval: 20 * time.Millisecond, idleTrimAlways: true,
		idleTrimmed: func() { trims.Add(1) }})
	m := c.members[0]
	for burst := 1; burst <= 2; burst++ {
		before := trims.Load()
		for i := 0; i < 300; i++ {
			mustPut(t, m, fmt.Sprintf("b%d/%03d", burst, i), fmt.Sprintf("v%d", i))
		}
		poll.Until(t, fmt.Sprintf("a trim after burst %d", burst), func() bool { return trims.Load() > before })
		resp, err := m.kv.Range(ctxT(t), &pb.RangeRequest{Key: []byte(fmt.Sprintf("b%d/", burst)), RangeEnd: []byte(fmt.Sprintf("b%d0", burst))})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != 300 || string(resp.Kvs[299].Value) != "v299" {
			t.Fatalf("after the trim of burst %d: %d keys, last %q", burst, len(resp.Kvs), resp.Kvs[len(resp.Kvs)-1].Value)
		}
	}
}

// TestWorthTrimming: an idle trim runs only when what it gives back
// (garbage, resident free heap, writer buffers) is at least a quarter of
// the live heap and at least 4 MiB.
func TestWorthTrimming(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live, reclaimable, kept uint64
		want                    bool
	}{
		{16 * mib, 20 * mib, 0, true},            // after a burst: the burst's garbage
		{16 * mib, 13 * mib, 0, true},            // after a burst that ended with a collection: its freed spans
		{16 * mib, 0, 32 * mib, true},            // right after a collection: the writer's buffers
		{16 * mib, 3 * mib, 0, false},            // too little to bother
		{16 * mib, 3 * mib, 1 * mib, true},       // 4 MiB in all
		{4096 * mib, 200 * mib, 32 * mib, false}, // a large heap under a trickle of requests
		{4096 * mib, 1100 * mib, 0, true},
	} {
		if got := worthTrimming(c.live, c.reclaimable, c.kept); got != c.want {
			t.Errorf("live %d MiB, reclaimable %d MiB, kept %d MiB: %v, want %v", c.live/mib, c.reclaimable/mib, c.kept/mib, got, c.want)
		}
	}
	if hs := readHeapStats(); hs.live == 0 || hs.garbage >= 1<<62 {
		t.Fatalf("runtime metrics unreadable: %+v", hs)
	}
}

// TestReturnMemoryFreesPooled: what a sync.Pool held when the trim began
// is freed by it (a collection only moves a pool's contents to its victim
// cache; the next one frees them).
func TestReturnMemoryFreesPooled(t *testing.T) {
	var pool sync.Pool
	w := putPooled(&pool, 8<<20)
	returnMemory()
	if w.Value() != nil {
		t.Fatal("a buffer a sync.Pool held is still alive after returnMemory")
	}
	runtime.KeepAlive(&pool)
}

// putPooled puts a new buffer of n bytes in pool and keeps no other
// reference to it.
//
//go:noinline
func putPooled(pool *sync.Pool, n int) weak.Pointer[byte] {
	b := make([]byte, n)
	pool.Put(&b)
	return weak.Make(&b[0])
}
