package engine

import (
	"fmt"
	"golang.org/x/sys/unix"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strata-db/strata/pagestore"
)

// Knobs (environment):
//
//	STRATA_BENCH_KEYS   keys for seq-insert (default 1000000)
//	STRATA_BENCH_CACHE  directory for the large commit-at-size files
//	                    (default $TMPDIR/strata-bench-cache); built once
//	STRATA_BENCH_LARGE  sizes for commit-at-size, default "1GB,8GB"
//	STRATA_BENCH_DIR    directory for the small workload files (default
//	                    a fresh temp dir)

const (
	valueSize   = 256
	batch       = 1000
	largeCommit = 10_000
	largeRounds = 100
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

type engineDef struct {
	name  string
	open  Opener
	build func(path string) (Engine, error) // no-sync opener for building large files
}

var engines = []engineDef{
	{"pagestore", OpenPagestore, func(p string) (Engine, error) {
		return OpenPagestoreOpts(p, &pagestore.Options{NoSync: true})
	}},
	{"bbolt", OpenBolt, func(p string) (Engine, error) { return OpenBoltOpts(p, true) }},
}

// BenchmarkEngine runs the etcd-shaped workloads for each engine. Run with
// -benchtime 1x: every sub-benchmark does its whole workload once and
// reports ops/s itself.
func BenchmarkEngine(b *testing.B) {
	nkeys := envInt("STRATA_BENCH_KEYS", 1_000_000)
	val := make([]byte, valueSize)
	for i := range val {
		val[i] = byte(i * 7)
	}
	dir := os.Getenv("STRATA_BENCH_DIR")
	if dir == "" {
		dir = b.TempDir()
	}
	for _, eng := range engines {
		b.Run(eng.name, func(b *testing.B) {
			path := filepath.Join(dir, eng.name+".db")
			populated := false
			populate := func(b *testing.B) {
				if populated {
					return
				}
				os.Remove(path)
				e, err := eng.open(path)
				if err != nil {
					b.Fatal(err)
				}
				start, c0 := time.Now(), cpuTime()
				for lo := 0; lo < nkeys; lo += batch {
					keys := make([][]byte, 0, batch)
					for i := lo; i < min(lo+batch, nkeys); i++ {
						keys = append(keys, RevKey(uint64(i+1), 0))
					}
					if err := e.PutBatch(keys, val); err != nil {
						b.Fatal(err)
					}
				}
				el := time.Since(start)
				if err := e.Close(); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(nkeys)/el.Seconds(), "ops/s")
				reportCPU(b, c0, nkeys)
				od, err := TimeOpen(eng.open, path)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(od.Microseconds())/1000, "open-ms")
				b.ReportMetric(float64(FileSize(path))/(1<<20), "file-MB")
				populated = true
			}
			withDB := func(b *testing.B, fn func(e Engine)) {
				populate(b)
				e, err := eng.open(path)
				if err != nil {
					b.Fatal(err)
				}
				defer e.Close()
				// Warm up, untimed: one full scan maps (and, for pagestore,
				// checksum-verifies) every page once. bbolt does the same
				// inside Open, where its NoFreelistSync scan reads every
				// page; without this the first engine to touch a page pays
				// about 2 us per page fault inside the timed loop.
				if n, err := e.Scan(RevKey(0, 0), nkeys); err != nil || n != nkeys {
					b.Fatalf("warm-up scan: %d keys, %v", n, err)
				}
				b.ResetTimer()
				fn(e)
			}
			b.Run("seq-insert", func(b *testing.B) {
				populated = false
				populate(b)
			})
			b.Run("rand-get", func(b *testing.B) {
				withDB(b, func(e Engine) {
					const n = 1_000_000
					rng := rand.New(rand.NewPCG(1, 2))
					keys := make([][]byte, n)
					for i := range keys {
						keys[i] = RevKey(uint64(1+rng.IntN(nkeys)), 0)
					}
					b.ResetTimer()
					start, c0 := time.Now(), cpuTime()
					found, err := e.Get(n, func(i int) []byte { return keys[i] })
					el := time.Since(start)
					reportCPU(b, c0, n)
					if err != nil || found != n {
						b.Fatalf("found %d of %d: %v", found, n, err)
					}
					b.ReportMetric(n/el.Seconds(), "ops/s")
				})
			})
			b.Run("range-1000", func(b *testing.B) {
				withDB(b, func(e Engine) {
					const scans = 5000
					rng := rand.New(rand.NewPCG(3, 4))
					b.ResetTimer()
					start, c0 := time.Now(), cpuTime()
					total := 0
					for i := 0; i < scans; i++ {
						got, err := e.Scan(RevKey(uint64(1+rng.IntN(nkeys-1000)), 0), 1000)
						if err != nil || got != 1000 {
							b.Fatalf("scan got %d: %v", got, err)
						}
						total += got
					}
					el := time.Since(start)
					b.ReportMetric(scans/el.Seconds(), "ops/s")
					reportCPU(b, c0, scans)
					b.ReportMetric(float64(total)/el.Seconds(), "keys/s")
				})
			})
			b.Run("delete-oldest", func(b *testing.B) {
				withDB(b, func(e Engine) {
					half := nkeys / 2
					b.ResetTimer()
					start, c0 := time.Now(), cpuTime()
					for lo := 0; lo < half; lo += batch {
						keys := make([][]byte, 0, batch)
						for i := lo; i < min(lo+batch, half); i++ {
							keys = append(keys, RevKey(uint64(i+1), 0))
						}
						if err := e.DeleteBatch(keys); err != nil {
							b.Fatal(err)
						}
					}
					el := time.Since(start)
					b.ReportMetric(float64(half)/el.Seconds(), "ops/s")
					reportCPU(b, c0, half)
					b.ReportMetric(float64(FileSize(path))/(1<<20), "file-MB")
				})
				populated = false // the workload changed the file
			})
			b.Run("commit-at-size", func(b *testing.B) {
				for _, size := range largeSizes() {
					b.Run(fmt.Sprintf("%dGB", size>>30), func(b *testing.B) {
						commitAtSize(b, eng, size, val)
					})
				}
			})
		})
	}
}

// cpuTime is this process's user+system CPU time. Reported beside wall
// time because the machines these run on are shared: under load, wall
// time mostly measures the neighbours.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports CPU microseconds per op since c0.
func reportCPU(b *testing.B, c0 time.Duration, ops int) {
	b.ReportMetric(float64((cpuTime()-c0).Nanoseconds())/1000/float64(ops), "cpu-us/op")
}

func largeSizes() []int64 {
	spec := os.Getenv("STRATA_BENCH_LARGE")
	if spec == "" {
		spec = "1GB,8GB"
	}
	var out []int64
	for _, s := range strings.Split(spec, ",") {
		n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(s), "GB"))
		if err == nil && n > 0 {
			out = append(out, int64(n)<<30)
		}
	}
	return out
}

func cacheDir() string {
	if d := os.Getenv("STRATA_BENCH_CACHE"); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "strata-bench-cache")
}

// commitAtSize times largeRounds commits of largeCommit new revisions each
// into a file of at least size bytes, built once and cached.
func commitAtSize(b *testing.B, eng engineDef, size int64, val []byte) {
	dir := cacheDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(dir, fmt.Sprintf("%s-%dGB.db", eng.name, size>>30))
	next := largeNext(path)
	if FileSize(path) < size || next == 0 {
		os.Remove(path)
		e, err := eng.build(path)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		next = 1
		for FileSize(path) < size {
			keys := make([][]byte, 0, 100_000)
			for i := 0; i < 100_000; i++ {
				keys = append(keys, RevKey(next, 0))
				next++
			}
			if err := e.PutBatch(keys, val); err != nil {
				b.Fatal(err)
			}
		}
		if err := e.Close(); err != nil {
			b.Fatal(err)
		}
		os.WriteFile(path+".next", []byte(strconv.FormatUint(next, 10)), 0o644)
		b.Logf("built %s (%d MB, %d keys) in %v", path, FileSize(path)>>20, next-1, time.Since(start))
	}
	t0 := time.Now()
	e, err := eng.open(path)
	if err != nil {
		b.Fatal(err)
	}
	od := time.Since(t0)
	// Leave no gigabytes of this file in the page cache for the workloads
	// that follow (the other engine's included): under that memory
	// pressure their allocations slowed by half.
	defer evictPageCache(b, path)
	defer e.Close()
	lat := make([]time.Duration, 0, largeRounds)
	b.ResetTimer()
	start, c0 := time.Now(), cpuTime()
	for r := 0; r < largeRounds; r++ {
		keys := make([][]byte, 0, largeCommit)
		for i := 0; i < largeCommit; i++ {
			keys = append(keys, RevKey(next, 0))
			next++
		}
		t0 := time.Now()
		if err := e.PutBatch(keys, val); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	el := time.Since(start)
	reportCPU(b, c0, largeRounds*largeCommit)
	b.StopTimer()
	// Delete what this run added so the cached file keeps its size
	// across runs (the freed pages are reused by the next run).
	for lo := next - largeRounds*largeCommit; lo < next; lo += largeCommit {
		keys := make([][]byte, 0, largeCommit)
		for i := lo; i < lo+largeCommit; i++ {
			keys = append(keys, RevKey(i, 0))
		}
		if err := e.DeleteBatch(keys); err != nil {
			b.Fatal(err)
		}
	}
	os.WriteFile(path+".next", []byte(strconv.FormatUint(next, 10)), 0o644)
	slices.Sort(lat)
	b.ReportMetric(float64(largeRounds*largeCommit)/el.Seconds(), "ops/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(od.Microseconds())/1000, "open-ms")
	b.ReportMetric(float64(FileSize(path))/(1<<20), "file-MB")
}

// evictPageCache writes back and drops path's pages from the page cache.
func evictPageCache(b *testing.B, path string) {
	f, err := os.Open(path)
	if err != nil {
		b.Logf("evict %s: %v", path, err)
		return
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		b.Logf("evict %s: %v", path, err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		b.Logf("evict %s: %v", path, err)
	}
}

func largeNext(path string) uint64 {
	b, err := os.ReadFile(path + ".next")
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	return n
}
