package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/strata-db/strata/e2e/harness"
)

// TestKillLoop is issue 5's crash test against the target binary: clients
// write with clientv3 and record every acknowledged put; the server is
// SIGKILLed at a random moment and restarted, STRATA_E2E_KILLS times
// (default 30). After each restart every acknowledged put must be readable
// with the revision it was acknowledged at, and the store's revision must
// not go backwards.
func TestKillLoop(t *testing.T) {
	b := needBins(t)
	kills := 30
	if v := os.Getenv("STRATA_E2E_KILLS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("STRATA_E2E_KILLS: %v", err)
		}
		kills = n
	}
	srv, err := harness.NewServer(harness.ServerConfig{Bin: targetBin(t, b), Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{srv.ClientURL},
		DialTimeout: 2 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()

	type ack struct {
		rev int64
		val string
	}
	var (
		mu     sync.Mutex
		acked  = map[string]ack{}
		maxRev int64
	)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	seed := rng.Uint64()
	t.Logf("kill loop: %d kills, value seed %d", kills, seed)

	for round := 0; round < kills; round++ {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; ctx.Err() == nil; n++ {
					key := fmt.Sprintf("kill/%03d/%d/%06d", round, w, n)
					val := fmt.Sprintf("%x-%d", seed, n)
					pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
					resp, err := cli.Put(pctx, key, val)
					pcancel()
					if err != nil {
						continue // not acknowledged: it may or may not exist
					}
					mu.Lock()
					acked[key] = ack{resp.Header.Revision, val}
					maxRev = max(maxRev, resp.Header.Revision)
					mu.Unlock()
				}
			}()
		}
		time.Sleep(time.Duration(50+rng.IntN(350)) * time.Millisecond)
		if err := srv.Kill(); err != nil {
			t.Fatalf("round %d: kill: %v", round, err)
		}
		cancel()
		wg.Wait()
		if err := srv.Start(); err != nil {
			t.Fatalf("round %d: restart after SIGKILL: %v", round, err)
		}

		gctx, gcancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := cli.Get(gctx, "kill/", clientv3.WithPrefix())
		gcancel()
		if err != nil {
			t.Fatalf("round %d: read back: %v", round, err)
		}
		mu.Lock()
		if resp.Header.Revision < maxRev {
			t.Fatalf("round %d: revision went backwards: store at %d, a put was acknowledged at %d", round, resp.Header.Revision, maxRev)
		}
		got := make(map[string]ack, len(resp.Kvs))
		for _, kv := range resp.Kvs {
			got[string(kv.Key)] = ack{kv.ModRevision, string(kv.Value)}
		}
		lost := 0
		for k, a := range acked {
			g, ok := got[k]
			if !ok || g != a {
				lost++
				if lost <= 5 {
					t.Errorf("round %d: acknowledged put %s (rev %d, %q) reads back as %+v (present %v)", round, k, a.rev, a.val, g, ok)
				}
			}
		}
		n := len(acked)
		mu.Unlock()
		if lost > 0 {
			t.Fatalf("round %d: %d of %d acknowledged puts lost or changed", round, lost, n)
		}
	}
	t.Logf("kill loop: %d kills, %d acknowledged puts all intact, revision %d", kills, len(acked), maxRev)
}
