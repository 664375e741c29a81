package diskprobe

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestRunCount(t *testing.T) {
	dir := t.TempDir()
	var calls int
	r, err := Run(context.Background(), Options{Dir: dir, Count: 40, Progress: func(done, planned int, _ time.Duration) {
		calls++
		if done > planned {
			t.Errorf("progress %d of %d", done, planned)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Writes != 40 || r.Bytes != 40*DefaultBlockSize || len(r.Syncs) != 40 {
		t.Fatalf("writes %d bytes %d syncs %d", r.Writes, r.Bytes, len(r.Syncs))
	}
	if len(r.Ends) != 40 || r.Ends[39] > r.Elapsed || r.Ends[0] < r.Syncs[0] {
		t.Fatalf("ends %v (elapsed %v)", r.Ends, r.Elapsed)
	}
	for i := 1; i < len(r.Ends); i++ {
		if r.Ends[i]-r.Ends[i-1] < r.Syncs[i] {
			t.Fatalf("write %d ended %v after the one before, but its sync took %v", i, r.Ends[i]-r.Ends[i-1], r.Syncs[i])
		}
	}
	if r.IOPS <= 0 || r.Elapsed <= 0 {
		t.Fatalf("iops %v elapsed %v", r.IOPS, r.Elapsed)
	}
	s := r.Sync
	if !(s.Min <= s.P50 && s.P50 <= s.P90 && s.P90 <= s.P99 && s.P99 <= s.P999 && s.P999 <= s.Max) || s.Min <= 0 {
		t.Fatalf("latencies out of order: %+v", s)
	}
	if calls == 0 {
		t.Fatal("progress never called")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("test file left behind: %v", ents)
	}
}

func TestRunDurationAndKeep(t *testing.T) {
	dir := t.TempDir()
	r, err := Run(context.Background(), Options{Dir: dir, Duration: 30 * time.Millisecond, Keep: true, File: "probe"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Elapsed < 30*time.Millisecond || r.Writes == 0 || r.Writes >= DefaultSize/DefaultBlockSize {
		t.Fatalf("elapsed %v writes %d", r.Elapsed, r.Writes)
	}
	st, err := os.Stat(filepath.Join(dir, "probe"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() < r.Bytes {
		t.Fatalf("file %d bytes, wrote %d", st.Size(), r.Bytes)
	}
}

func TestRunErrors(t *testing.T) {
	f := filepath.Join(t.TempDir(), "f")
	os.WriteFile(f, nil, 0o600)
	for name, o := range map[string]Options{
		"no dir":      {},
		"missing dir": {Dir: filepath.Join(f, "x")},
		"not a dir":   {Dir: f},
		"tiny size":   {Dir: t.TempDir(), Size: 10},
		"bad block":   {Dir: t.TempDir(), BlockSize: -1},
		"bad name":    {Dir: t.TempDir(), File: "../x"},
		"negative":    {Dir: t.TempDir(), Count: -1},
	} {
		if _, err := Run(context.Background(), o); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, Options{Dir: t.TempDir()}); err == nil {
		t.Error("cancelled: no error")
	}
}

func TestSummarize(t *testing.T) {
	var d []time.Duration
	for i := 1000; i >= 1; i-- {
		d = append(d, time.Duration(i)*time.Microsecond)
	}
	l := Summarize(d)
	want := Latency{Min: time.Microsecond, Max: time.Millisecond, Mean: 500500 * time.Nanosecond,
		P50: 500 * time.Microsecond, P90: 900 * time.Microsecond, P99: 990 * time.Microsecond, P999: 999 * time.Microsecond}
	if l != want {
		t.Fatalf("got %+v\nwant %+v", l, want)
	}
	if d[0] != time.Millisecond {
		t.Fatal("Summarize reordered its input")
	}
	if (Summarize(nil) != Latency{}) {
		t.Fatal("empty sample")
	}
	if Percentile([]time.Duration{7}, 99.9) != 7 {
		t.Fatal("single sample")
	}
}

func TestJudge(t *testing.T) {
	for _, c := range []struct {
		p99   time.Duration
		iops  float64
		ok    bool
		grade string
	}{
		{2 * time.Millisecond, 800, true, "good"},
		{2 * time.Millisecond, 200, true, "adequate"},
		{10 * time.Millisecond, 800, false, "too slow"},
		{2 * time.Millisecond, 40, false, "too slow"},
	} {
		v := Judge(c.p99, c.iops)
		if v.OK != c.ok || v.Grade != c.grade || len(v.Notes) != 2 {
			t.Errorf("Judge(%v, %v) = %+v", c.p99, c.iops, v)
		}
	}
}
