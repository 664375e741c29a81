package e2e

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/strata-db/strata/e2e/harness"
)

// TestKillLoop writes through clientv3 while the target server is
// SIGKILLed at random moments and restarted on the same data dir. Every
// acknowledged put must be readable afterwards with the revision it was
// acknowledged at, and the revision never goes backwards.
func TestKillLoop(t *testing.T) {
	b := needBins(t)
	kills := 30
	if testing.Short() {
		kills = 5
	}
	seed := time.Now().UnixNano()
	if s := os.Getenv("STRATA_SEED"); s != "" {
		seed, _ = strconv.ParseInt(s, 10, 64)
	}
	t.Logf("seed=%d", seed)
	rng := rand.New(rand.NewSource(seed))
	srv, err := harness.NewServer(harness.ServerConfig{Bin: targetBin(t, b), Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	acked := map[string]int64{} // key -> acknowledged mod revision
	maxRev := int64(0)
	seq := 0
	for k := 0; k < kills; k++ {
		if err := srv.Start(); err != nil {
			t.Fatalf("kill %d: start: %v\n%s", k, err, srv.LogTail(20))
		}
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.ClientURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		verify(t, k, cli, acked, maxRev)

		// Four writers until the kill, which comes 20-300 ms in.
		var mu sync.Mutex
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					mu.Lock()
					seq++
					key := fmt.Sprintf("k%06d", seq)
					mu.Unlock()
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					resp, err := cli.Put(ctx, key, key)
					cancel()
					if err != nil {
						continue // not acknowledged: may or may not survive
					}
					mu.Lock()
					acked[key] = resp.Header.Revision
					if resp.Header.Revision > maxRev {
						maxRev = resp.Header.Revision
					}
					mu.Unlock()
				}
			}()
		}
		time.Sleep(time.Duration(20+rng.Intn(280)) * time.Millisecond)
		if err := srv.Kill(); err != nil {
			t.Fatal(err)
		}
		close(stop)
		wg.Wait()
		cli.Close()
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.ClientURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	verify(t, kills, cli, acked, maxRev)
	t.Logf("%d kills, %d acknowledged puts all present at their revisions (highest %d)", kills, len(acked), maxRev)
}

func verify(t *testing.T, k int, cli *clientv3.Client, acked map[string]int64, maxRev int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "k", clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("after kill %d: get: %v", k, err)
	}
	if resp.Header.Revision < maxRev {
		t.Fatalf("after kill %d: revision %d went below acknowledged %d", k, resp.Header.Revision, maxRev)
	}
	got := map[string]int64{}
	for _, kv := range resp.Kvs {
		got[string(kv.Key)] = kv.ModRevision
		if string(kv.Value) != string(kv.Key) {
			t.Fatalf("after kill %d: %s has value %q", k, kv.Key, kv.Value)
		}
	}
	for key, rev := range acked {
		if got[key] != rev {
			t.Fatalf("after kill %d: acknowledged %s at revision %d, now %d", k, key, rev, got[key])
		}
	}
}
