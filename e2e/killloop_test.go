package e2e

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/strata-db/strata/e2e/harness"
	"github.com/strata-db/strata/e2e/lin"
	"github.com/strata-db/strata/internal/poll"
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
	bin := targetBin(t, b)
	// Strata writes its key index's base every killLoopBaseRecords
	// writes here, so that the kills also land while a base is written
	// and the restarts open on bases (mvcc/indexbase.go); at the default
	// interval this loop would never write one.
	var flags []string
	if bin != b.Etcd {
		flags = []string{fmt.Sprintf("--index-base-records=%d", killLoopBaseRecords)}
	}
	srv, err := harness.NewServer(harness.ServerConfig{Bin: bin, Dir: t.TempDir(), Flags: flags})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	// A watch of every key written, opened once and kept across the kills
	// (clientv3 resumes it from the next revision after each restart):
	// it must deliver every acknowledged put once, in order (checked at
	// the end, checkKillLoopWatch).
	var watch *lin.WatchLog
	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
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
		if watch == nil {
			wcli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.ClientURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
			if err != nil {
				t.Fatal(err)
			}
			defer wcli.Close()
			watch = lin.RecordWatchPrefix(watchCtx, wcli, "m1", "k", 1, 200*time.Millisecond)
		}

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
	if bin != b.Etcd {
		cli = killAfterIndexBase(t, srv, cli, acked, &maxRev, &seq, kills)
		defer cli.Close()
	}
	checkKillLoopWatch(t, cli, watch, acked, kills)
}

// killLoopBaseRecords is TestKillLoop's --index-base-records.
const killLoopBaseRecords = 64

// killAfterIndexBase makes sure the loop covers a restart from a key
// index base whatever the kills' timing was: it writes until a base is
// written (max(killLoopBaseRecords, keys / 8) writes at most), kills the
// server, and checks that the restart opened on a base and lost nothing.
// It returns the client of the restarted server (cli is closed).
func killAfterIndexBase(t *testing.T, srv *harness.Server, cli *clientv3.Client, acked map[string]int64, maxRev *int64, seq *int, kills int) *clientv3.Client {
	t.Helper()
	logFrom := func(off int) string {
		b, _ := os.ReadFile(srv.LogPath)
		if off > len(b) {
			return ""
		}
		return string(b[off:])
	}
	from := len(logFrom(0))
	// The loop writes each key once, so the store holds at most seq keys.
	limit := 2 * max(killLoopBaseRecords, *seq/8)
	for i := 0; !strings.Contains(logFrom(from), "wrote the key index base"); i++ {
		if i == limit {
			t.Fatalf("%d puts and no key index base written; log since the first:\n%s", i, logFrom(from))
		}
		*seq++
		key := fmt.Sprintf("k%06d", *seq)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := cli.Put(ctx, key, key)
		cancel()
		if err != nil {
			t.Fatalf("put %s before the last kill: %v", key, err)
		}
		acked[key] = resp.Header.Revision
		*maxRev = max(*maxRev, resp.Header.Revision)
	}
	cli.Close()
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	from = len(logFrom(0))
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	if l := logFrom(from); !strings.Contains(l, "opened the key index on its base") {
		t.Fatalf("the restart after the base was written did not open on it; log since the start:\n%s", l)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.ClientURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	verify(t, kills+1, cli, acked, *maxRev)
	all := logFrom(0)
	t.Logf("%d restarts, %d of them on a key index base; %d bases written", kills+1,
		strings.Count(all, "opened the key index on its base"), strings.Count(all, "wrote the key index base"))
	return cli
}

// checkKillLoopWatch checks the watch kept across the kills against the
// final key set: every key's put arrives exactly once, at its revision, in
// revision order, as a creation without prev_kv (keys are written once),
// and nothing else arrives; every acknowledged put is among them.
func checkKillLoopWatch(t *testing.T, cli *clientv3.Client, w *lin.WatchLog, acked map[string]int64, kills int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "k", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	final := map[string]int64{}
	for _, kv := range resp.Kvs {
		final[string(kv.Key)] = kv.ModRevision
	}
	rev := resp.Header.Revision
	poll.Until(t, "the watch kept across the kills to reach the final revision", func() bool { return w.Reached() >= rev })
	seen := map[string]int64{}
	var last int64
	var violations []string
	events := 0
	for _, r := range w.Resps() {
		if r.Err != "" {
			violations = append(violations, "stream error: "+r.Err)
		}
		for _, e := range r.Events {
			events++
			switch {
			case e.Rev < last:
				violations = append(violations, fmt.Sprintf("%s after revision %d", e, last))
			case seen[e.Key] != 0:
				violations = append(violations, fmt.Sprintf("%s: %s delivered again (first at %d)", e, e.Key, seen[e.Key]))
			case final[e.Key] != e.Rev || e.Delete || e.Value != e.Key || e.Create != e.Rev || e.HasPrev:
				violations = append(violations, fmt.Sprintf("%s: the key set has %s at %d", e, e.Key, final[e.Key]))
			}
			last = max(last, e.Rev)
			seen[e.Key] = e.Rev
		}
	}
	for key, r := range final {
		if seen[key] != r {
			violations = append(violations, fmt.Sprintf("%s (revision %d) never arrived", key, r))
		}
	}
	for key, r := range acked {
		if seen[key] != r {
			violations = append(violations, fmt.Sprintf("acknowledged %s (revision %d) never arrived", key, r))
		}
	}
	_, _, progress, reopens, _ := w.Counts()
	fmt.Printf("WATCH kill-loop members=1 kills=%d events=%d keys=%d progress=%d reopens=%d violations=%d\n",
		kills, events, len(final), progress, reopens, len(violations))
	for i, v := range violations {
		if i == 20 {
			t.Errorf("… %d more", len(violations)-20)
			break
		}
		t.Errorf("watch across kills: %s", v)
	}
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
