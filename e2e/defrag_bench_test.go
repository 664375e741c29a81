package e2e

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/strata-db/strata/e2e/harness"
)

// BenchmarkDefragUnderLoad builds a database of STRATA_DEFRAG_BENCH_MB
// (default 1024) MiB through the target server, deletes half of it and
// compacts, then measures put latency from 100 clients first with the
// server idle and then while Maintenance.Defragment runs. It reports both
// p99s and their ratio (target: at most 2x; etcd blocks every request for
// the whole defrag).
//
//	cd e2e && STRATA_E2E_TARGET=../bin/strata go test -run '^$' -bench DefragUnderLoad -benchtime 1x -timeout 60m .
func BenchmarkDefragUnderLoad(b *testing.B) {
	mb := 1024
	if s := os.Getenv("STRATA_DEFRAG_BENCH_MB"); s != "" {
		mb, _ = strconv.Atoi(s)
	}
	bin := os.Getenv("STRATA_E2E_TARGET")
	if bin == "" {
		b.Skip("set STRATA_E2E_TARGET to the strata binary")
	}
	srv, err := harness.NewServer(harness.ServerConfig{Bin: bin, Dir: b.TempDir(), Flags: []string{"--quota-backend-bytes=8589934592"}})
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		b.Fatal(err)
	}
	defer srv.Stop()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.ClientURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()
	val := string(make([]byte, 1024))
	n := mb * 1024 // 1 KiB values
	b.Logf("loading %d MiB (%d keys of 1 KiB)", mb, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 64; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				if _, err := cli.Put(ctx, fmt.Sprintf("/load/%08d", i), val); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	// Delete the first half of the keys and compact: half the file is free.
	resp, err := cli.Delete(ctx, "/load/", clientv3.WithRange(fmt.Sprintf("/load/%08d", n/2)))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := cli.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		b.Fatal(err)
	}
	st, _ := cli.Status(ctx, srv.ClientURL)
	b.Logf("after deleting half and compacting: db %d MiB, in use %d MiB", st.DbSize>>20, st.DbSizeInUse>>20)

	measure := func(d time.Duration, during func()) []time.Duration {
		var mu sync.Mutex
		var lat []time.Duration
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for c := 0; c < 100; c++ {
			wg.Add(1)
			go func(c int) {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					st := time.Now()
					if _, err := cli.Put(ctx, fmt.Sprintf("/live/%03d/%d", c, i%100), "v"); err != nil {
						continue
					}
					mu.Lock()
					lat = append(lat, time.Since(st))
					mu.Unlock()
				}
			}(c)
		}
		if during != nil {
			during()
		} else {
			time.Sleep(d)
		}
		close(stop)
		wg.Wait()
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		return lat
	}
	p := func(l []time.Duration, q float64) time.Duration {
		if len(l) == 0 {
			return 0
		}
		return l[int(float64(len(l)-1)*q)]
	}
	b.ResetTimer()
	idle := measure(10*time.Second, nil)
	var defragTook time.Duration
	during := measure(0, func() {
		st := time.Now()
		if _, err := cli.Defragment(ctx, srv.ClientURL); err != nil {
			b.Error(err)
		}
		defragTook = time.Since(st)
	})
	b.StopTimer()
	after, _ := cli.Status(ctx, srv.ClientURL)
	b.Logf("defrag took %v; db %d MiB -> %d MiB (in use %d MiB)", defragTook, st.DbSize>>20, after.DbSize>>20, after.DbSizeInUse>>20)
	b.Logf("idle: %d puts, p50 %v p99 %v; during defrag: %d puts, p50 %v p99 %v",
		len(idle), p(idle, .5), p(idle, .99), len(during), p(during, .5), p(during, .99))
	b.ReportMetric(float64(p(idle, .99).Microseconds()), "idle-p99-us")
	b.ReportMetric(float64(p(during, .99).Microseconds()), "defrag-p99-us")
	if p(idle, .99) > 0 {
		b.ReportMetric(float64(p(during, .99))/float64(p(idle, .99)), "p99-ratio")
	}
}
