package wal

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
)

// benchDir is where benchmarks put their files: $STRATA_BENCH_DIR, so a
// disk under test can be chosen, or a temporary directory.
func benchDir(b *testing.B) string {
	if d := os.Getenv("STRATA_BENCH_DIR"); d != "" {
		dir, err := os.MkdirTemp(d, "walbench")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}
	return b.TempDir()
}

// BenchmarkAppendSync measures durable appends of 256-byte entries from N
// concurrent writers. Each append is one Save of one entry, acknowledged
// only after its fdatasync; writers take their index and enqueue under one
// mutex, as a raft leader's proposals would be ordered.
func BenchmarkAppendSync(b *testing.B) {
	for _, writers := range []int{1, 8, 64, 512} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			dir := filepath.Join(benchDir(b), "wal")
			w, err := Create(dir, nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			payload := make([]byte, 256)
			var mu sync.Mutex
			next := uint64(0)
			var remaining atomic.Int64
			remaining.Store(int64(b.N))
			var wg sync.WaitGroup
			b.ResetTimer()
			for g := 0; g < writers; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for remaining.Add(-1) >= 0 {
						mu.Lock()
						next++
						e := &raftpb.Entry{Index: proto.Uint64(next), Term: proto.Uint64(1), Data: payload}
						f := w.SaveAsync(nil, []*raftpb.Entry{e})
						mu.Unlock()
						if err := f.Wait(); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
			st := w.Stats()
			b.ReportMetric(float64(st.Units)/float64(st.Batches), "appends/batch")
		})
	}
}

// BenchmarkRawFdatasync is the physical limit the WAL is measured
// against: etcd's fio profile, a 2300-byte append followed by fdatasync,
// in the same directory the WAL benchmark uses.
func BenchmarkRawFdatasync(b *testing.B) {
	f, err := os.Create(filepath.Join(benchDir(b), "raw"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 2300)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "syncs/s")
}
