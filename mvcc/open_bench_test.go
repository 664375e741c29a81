package mvcc

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"golang.org/x/sys/unix"
)

// BenchmarkOpenCold measures OpenStore on a store of STRATA_OPEN_KEYS
// keys (default 100,000) with values of STRATA_OPEN_VALUE bytes (default
// 2048, half random, half compressible), each key written twice, with
// the page store's file out of the page cache (posix_fadvise DONTNEED),
// as after a reboot or on a member whose cache went to other work. It
// reports the open time and the store's size; the store is built once
// per run in STRATA_OPEN_DIR (default a temporary directory), keeping an
// index base. base=false opens it reading every record's metadata (no
// index base, as before a store has one); base=true opens it on its
// base, whose file is evicted too. STRATA_OPEN_TAIL=N leaves N more
// puts after the base, as a kill -9 does (the store's image after their
// commit, taken before Close could write a new base): what a restart
// replays onto the base.
//
//	STRATA_OPEN_KEYS=1000000 STRATA_OPEN_VALUE=256 go test ./mvcc -run '^$' -bench OpenCold -benchtime 3x
func BenchmarkOpenCold(b *testing.B) {
	keys, value := envInt("STRATA_OPEN_KEYS", 100_000), envInt("STRATA_OPEN_VALUE", 2048)
	dir := os.Getenv("STRATA_OPEN_DIR")
	if dir == "" {
		dir = b.TempDir()
	}
	tail := envInt("STRATA_OPEN_TAIL", 0)
	path := filepath.Join(dir, fmt.Sprintf("open-%d-%d-%d.db", keys, value, tail))
	if _, err := os.Stat(path); err != nil {
		start := time.Now()
		ts := openTestStore(b, path, baseConfig(path, 0))
		rng := rand.New(rand.NewSource(1))
		val := make([]byte, value)
		ci := uint64(0)
		for round := 0; round < 2; round++ {
			for i := 0; i < keys; i++ {
				rng.Read(val[:value/2])
				ci++
				key := fmt.Sprintf("/registry/pods/team-%03d/pod-%08d", i%500, i)
				if _, err := ts.s.Put(ci, 1, &pb.PutRequest{Key: []byte(key), Value: val}); err != nil {
					b.Fatal(err)
				}
			}
		}
		ts.close()
		if tail > 0 {
			ts = openTestStore(b, path, baseConfig(path, 1<<30))
			for i := 0; i < tail; i++ {
				rng.Read(val[:value/2])
				ci++
				j := (i * 7919) % keys
				key := fmt.Sprintf("/registry/pods/team-%03d/pod-%08d", j%500, j)
				if _, err := ts.s.Put(ci, 1, &pb.PutRequest{Key: []byte(key), Value: val}); err != nil {
					b.Fatal(err)
				}
			}
			if err := ts.be.ForceCommit(); err != nil {
				b.Fatal(err)
			}
			image := map[string][]byte{}
			for _, f := range []string{path, path + ".index"} {
				if image[f], err = os.ReadFile(f); err != nil {
					b.Fatal(err)
				}
			}
			ts.close()
			for f, data := range image {
				if err := os.WriteFile(f, data, 0o600); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.Logf("built %s in %v", path, time.Since(start))
	}
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	for _, base := range []bool{false, true} {
		b.Run(fmt.Sprintf("base=%v", base), func(b *testing.B) {
			cfg := StoreConfig{}
			if base {
				cfg = baseConfig(path, 0)
			}
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				evict(b, path)
				if base {
					evict(b, path+".index")
				}
				b.StartTimer()
				ts := openTestStore(b, path, cfg)
				b.StopTimer()
				if ts.s.KeyCount() != keys {
					b.Fatalf("%d keys after open, want %d", ts.s.KeyCount(), keys)
				}
				if base && ts.s.index().Base() == nil {
					b.Fatal("the store did not open on its index base")
				}
				ts.close()
				b.StartTimer()
			}
			b.ReportMetric(float64(st.Size())/(1<<20), "MiB")
		})
	}
}

// evict drops path's pages from the page cache.
func evict(b *testing.B, path string) {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		b.Fatal(err)
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
