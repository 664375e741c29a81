package lease

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// The apply goroutine grants, puts, deletes, revokes and checkpoints while
// RPC-side goroutines look leases up and renew them and leadership flips.
// Run under -race; at the end the lessor's view of attached keys must
// match the store's.
func TestConcurrentApplyAndReads(t *testing.T) {
	e := newEnv(t, Config{MinTTL: 1, tick: time.Millisecond})
	const (
		ops    = 1500
		leases = 20
		keys   = 60
	)
	rng := rand.New(rand.NewSource(1))
	var stop atomic.Bool
	var wg sync.WaitGroup

	// Expired leases are drained the way the server does, minus raft.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			select {
			case <-e.le.ExpiredLeasesC():
			case <-time.After(time.Millisecond):
			}
		}
	}()
	wg.Add(1)
	go func() { // leadership changes
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			if i%2 == 0 {
				e.le.Promote(0)
			} else {
				e.le.Demote()
			}
			time.Sleep(200 * time.Microsecond)
		}
	}()
	for r := 0; r < 2; r++ { // RPC handlers
		wg.Add(1)
		go func(seed int64) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(seed))
			for !stop.Load() {
				id := rng.Int63n(leases) + 1
				e.le.Lookup(id)
				e.le.Exists(id)
				_, _ = e.le.TimeToLive(id, true)
				_ = e.le.Leases()
				ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
				_, _ = e.le.Renew(ctx, id)
				cancel()
			}
		}(int64(r + 2))
	}

	for i := 0; i < ops; i++ { // the apply goroutine: this one
		id := rng.Int63n(leases) + 1
		key := fmt.Sprintf("k%02d", rng.Intn(keys))
		switch p := rng.Intn(100); {
		case p < 20:
			_, _ = e.le.Grant(e.next(), 1, id, rng.Int63n(3)+1)
		case p < 65:
			if rng.Intn(4) == 0 {
				id = 0
			}
			_ = e.put(key, id)
		case p < 80:
			e.del(key)
		case p < 95:
			_, _ = e.le.RevokeAndDelete(e.next(), 1, id, e.store)
		default:
			e.le.Checkpoint(e.next(), 1, []*pb.LeaseCheckpoint{{ID: id, Remaining_TTL: rng.Int63n(3)}})
		}
	}
	stop.Store(true)
	wg.Wait()

	e.le.Promote(0)
	resp, err := e.store.Range(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[int64][]string{}
	for _, kv := range resp.Kvs {
		if kv.Lease == 0 {
			continue
		}
		if !e.le.Exists(kv.Lease) {
			t.Fatalf("key %s refers to lease %d, which is gone: a revoke missed it", kv.Key, kv.Lease)
		}
		want[kv.Lease] = append(want[kv.Lease], string(kv.Key))
	}
	for _, id := range e.le.Leases() {
		if got := e.keysOf(id); !slices.Equal(got, want[id]) {
			t.Fatalf("lease %d: lessor has keys %v, store has %v", id, got, want[id])
		}
	}
}
