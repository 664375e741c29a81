package e2e

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
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
	srv, err := harness.NewServer(harness.ServerConfig{Bin: bin, Dir: b.TempDir(), Flags: []string{"--quota-backend-bytes=8589934592"},
		Env: strings.Fields(os.Getenv("STRATA_BENCH_SERVER_ENV"))})
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
	m0 := scrapeHistograms(b, srv.ClientURL)
	idle := measure(10*time.Second, nil)
	m1 := scrapeHistograms(b, srv.ClientURL)
	var defragTook time.Duration
	during := measure(0, func() {
		st := time.Now()
		if _, err := cli.Defragment(ctx, srv.ClientURL); err != nil {
			b.Error(err)
		}
		defragTook = time.Since(st)
	})
	b.StopTimer()
	m2 := scrapeHistograms(b, srv.ClientURL)
	for _, h := range []string{"etcd_disk_wal_fsync_duration_seconds", "etcd_disk_backend_commit_duration_seconds"} {
		b.Logf("%s: idle %s; during defrag %s", h, m1.delta(m0, h), m2.delta(m1, h))
	}
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

// histograms holds the cumulative buckets, sums and counts of every
// histogram on a /metrics page, keyed by metric name.
type histograms map[string]*histogram

type histogram struct {
	le     []float64
	counts []float64
	sum    float64
	count  float64
}

func scrapeHistograms(b *testing.B, url string) histograms {
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	hs := histograms{}
	get := func(name string) *histogram {
		if hs[name] == nil {
			hs[name] = &histogram{}
		}
		return hs[name]
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		ln := sc.Text()
		if strings.HasPrefix(ln, "#") {
			continue
		}
		sp := strings.LastIndexByte(ln, ' ')
		if sp < 0 {
			continue
		}
		v, err := strconv.ParseFloat(ln[sp+1:], 64)
		if err != nil {
			continue
		}
		name := ln[:sp]
		switch {
		case strings.Contains(name, "_bucket{le=\""):
			i := strings.Index(name, "_bucket{le=\"")
			le, err := strconv.ParseFloat(strings.TrimSuffix(name[i+len("_bucket{le=\""):], "\"}"), 64)
			if err != nil {
				continue
			}
			h := get(name[:i])
			h.le = append(h.le, le)
			h.counts = append(h.counts, v)
		case strings.HasSuffix(name, "_sum"):
			get(strings.TrimSuffix(name, "_sum")).sum = v
		case strings.HasSuffix(name, "_count"):
			get(strings.TrimSuffix(name, "_count")).count = v
		}
	}
	return hs
}

// delta describes the observations of histogram name between two scrapes:
// count, mean and the bucket bound below which 99% fall.
func (hs histograms) delta(prev histograms, name string) string {
	h, p := hs[name], prev[name]
	if h == nil || p == nil || len(h.counts) != len(p.counts) {
		return "n/a"
	}
	n := h.count - p.count
	if n <= 0 {
		return "0 observations"
	}
	p99 := math.Inf(1)
	for i := range h.counts {
		if h.counts[i]-p.counts[i] >= 0.99*n {
			p99 = h.le[i]
			break
		}
	}
	return fmt.Sprintf("%.0f observations, mean %v, p99 <= %v", n,
		time.Duration((h.sum-p.sum)/n*float64(time.Second)).Round(time.Microsecond),
		time.Duration(p99*float64(time.Second)))
}
