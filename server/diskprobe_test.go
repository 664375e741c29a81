package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/strata-db/strata/diskprobe"
	"github.com/strata-db/strata/server/config"
)

func TestTuneForDisk(t *testing.T) {
	for _, c := range []struct {
		name                   string
		p50, tail              time.Duration
		window, backendBatchIv time.Duration
	}{
		{"tmpfs-like", time.Microsecond, 4 * time.Microsecond, 50 * time.Microsecond, 100 * time.Millisecond},
		{"ssd", 300 * time.Microsecond, time.Millisecond, 250 * time.Microsecond, 100 * time.Millisecond},
		{"slow ssd", 2 * time.Millisecond, 8 * time.Millisecond, 2 * time.Millisecond, 200 * time.Millisecond},
		{"network disk", 5 * time.Millisecond, 20 * time.Millisecond, 5 * time.Millisecond, 500 * time.Millisecond},
		{"hdd", 20 * time.Millisecond, 80 * time.Millisecond, 10 * time.Millisecond, time.Second},
	} {
		got := tuneForDisk(c.p50, c.tail)
		if got.WALGroupCommitWindow != c.window || got.BackendBatchInterval != c.backendBatchIv {
			t.Errorf("%s: tuneForDisk(%v, %v) = %+v, want window %v interval %v",
				c.name, c.p50, c.tail, got, c.window, c.backendBatchIv)
		}
	}
}

func logTo(buf *bytes.Buffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// fakeDisk is an injected sample source: each round returns the next of
// rounds (the last one repeats), as fdatasync latencies in the order
// measured, cut to what the options ask for; every write+sync is taken to
// end writeTime after its sync.
type fakeDisk struct {
	rounds [][]time.Duration
	calls  int
	opts   []diskprobe.Options
}

const writeTime = 10 * time.Microsecond

func (f *fakeDisk) sample(_ context.Context, o diskprobe.Options) (*diskprobe.Result, error) {
	syncs := f.rounds[min(f.calls, len(f.rounds)-1)]
	f.calls++
	f.opts = append(f.opts, o)
	if o.Count > 0 && len(syncs) > o.Count {
		syncs = syncs[:o.Count]
	}
	r := &diskprobe.Result{Dir: o.Dir, BlockSize: diskprobe.DefaultBlockSize, Syncs: slices.Clone(syncs)}
	var at time.Duration
	for _, s := range syncs {
		at += s + writeTime
		r.Ends = append(r.Ends, at)
		if o.Duration > 0 && at >= o.Duration {
			break
		}
	}
	r.Syncs = r.Syncs[:len(r.Ends)]
	r.Writes, r.Elapsed = len(r.Ends), at
	return r, nil
}

// fastSyncs is n fdatasync latencies of a healthy SSD: 400 µs to 1.2 ms
// in a fixed pattern.
func fastSyncs(n int) []time.Duration {
	s := make([]time.Duration, n)
	for i := range s {
		s[i] = 400*time.Microsecond + time.Duration(i*7919%9)*100*time.Microsecond
	}
	return s
}

func constSyncs(n int, d time.Duration) []time.Duration {
	s := make([]time.Duration, n)
	for i := range s {
		s[i] = d
	}
	return s
}

// probeOnce runs the start-up probe with the fake disk on a fresh data
// dir (or dir, if given) and returns the batching, the log and the cache
// path.
func probeOnce(t *testing.T, dir string, f *fakeDisk, args ...string) (diskBatching, string, string) {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	walDir, cache := filepath.Join(dir, "member", "wal"), filepath.Join(dir, "member", diskProbeCache)
	var log bytes.Buffer
	p, err := probeWALDisk(walDir, cache, logTo(&log), time.Now(), f.sample)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(args, nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return applyDiskProbe(cfg, p, logTo(&log)), log.String(), cache
}

// TestDiskProbeSlowFirstSync is the reported case: on a fresh data dir the
// first fdatasync took 130 ms (the file system's journal commit for the
// new file), the rest were fast. The probe called that sync its p99,
// warned that the disk is slower than etcd's guidance, set a 1 s backend
// interval and cached that for a day.
func TestDiskProbeSlowFirstSync(t *testing.T) {
	syncs := append([]time.Duration{130 * time.Millisecond}, fastSyncs(probeWarmup+probeSamples-1)...)
	f := &fakeDisk{rounds: [][]time.Duration{syncs}}
	b, log, cache := probeOnce(t, "", f)
	if strings.Contains(log, "level=WARN") {
		t.Errorf("warned:\n%s", log)
	}
	if b.backendBatchInterval != config.DefaultBackendBatchInterval {
		t.Errorf("backend batch interval %v, want etcd's %v", b.backendBatchInterval, config.DefaultBackendBatchInterval)
	}
	p := b.probe
	if p.P99 != 1200*time.Microsecond || p.P50 > time.Millisecond || p.Samples != probeSamples || p.Rounds != 1 || f.calls != 1 {
		t.Errorf("probe %+v after %d rounds", p, f.calls)
	}
	if p.Max != 1200*time.Microsecond {
		t.Errorf("max %v: the warm-up sync was counted", p.Max)
	}
	if b.walGroupCommitWindow != 300*time.Microsecond {
		t.Errorf("window %v, want p99/4", b.walGroupCommitWindow)
	}
	if o := f.opts[0]; o.Count != probeWarmup+probeSamples || o.Duration != probeBudget || o.File != diskProbeTestFile {
		t.Errorf("sampled with %+v", o)
	}
	// Cached as the good result it is, and reused.
	data, err := os.ReadFile(cache)
	if err != nil {
		t.Fatalf("good result not cached: %v", err)
	}
	var back diskProbe
	if err := json.Unmarshal(data, &back); err != nil || back.check() != nil || back.stats().slow() || back.P99 != p.P99 {
		t.Fatalf("cache %s", data)
	}
	b2, log2, _ := probeOnce(t, filepath.Dir(filepath.Dir(cache)), f)
	if !b2.probe.cached || f.calls != 1 || strings.Contains(log2, "level=WARN") {
		t.Fatalf("cache not reused (%d rounds):\n%s", f.calls, log2)
	}
}

// TestDiskProbeOutlierBound puts one sync of 5 s at every position of a
// round of identical syncs: nothing the probe decides may change.
func TestDiskProbeOutlierBound(t *testing.T) {
	const base = 800 * time.Microsecond
	want := tuneForDisk(base, base)
	n := probeWarmup + probeSamples
	for i := 0; i < n; i++ {
		syncs := constSyncs(n, base)
		syncs[i] = 5 * time.Second
		ends := make([]time.Duration, n)
		var at time.Duration
		for j, s := range syncs {
			at += s
			ends[j] = at
		}
		st, err := summarizeProbe(syncs, ends, probeWarmup)
		if err != nil {
			t.Fatal(err)
		}
		_, tail := st.tail()
		if got := tuneForDisk(st.P50, tail); got != want || st.slow() || st.P99 != base || st.P90 != base {
			t.Fatalf("outlier at %d: %+v, tuning %+v, want %+v", i, st, got, want)
		}
	}
	// Two at the top still cannot set p99 (200 samples keep two above it).
	syncs := constSyncs(n, base)
	syncs[50], syncs[150] = 130*time.Millisecond, 145*time.Millisecond
	b, log, _ := probeOnce(t, "", &fakeDisk{rounds: [][]time.Duration{syncs}})
	if strings.Contains(log, "level=WARN") || b.backendBatchInterval != config.DefaultBackendBatchInterval || b.probe.P99 != base {
		t.Fatalf("two outliers: %+v\n%s", b.probe, log)
	}
}

func TestSummarizeProbe(t *testing.T) {
	for _, c := range []struct {
		n        int
		p90, p99 bool
	}{{1, false, false}, {19, false, false}, {20, true, false}, {199, true, false}, {200, true, true}} {
		syncs := constSyncs(probeWarmup+c.n, time.Millisecond)
		ends := make([]time.Duration, len(syncs))
		for i := range ends {
			ends[i] = time.Duration(i+1) * 2 * time.Millisecond
		}
		st, err := summarizeProbe(syncs, ends, probeWarmup)
		if err != nil {
			t.Fatal(err)
		}
		if st.Samples != c.n || (st.P90 > 0) != c.p90 || (st.P99 > 0) != c.p99 || st.P50 != time.Millisecond {
			t.Errorf("%d samples: %+v", c.n, st)
		}
		if st.IOPS != 500 {
			t.Errorf("%d samples: IOPS %v, want 500 (warm-up left out)", c.n, st.IOPS)
		}
	}
	if _, err := summarizeProbe(constSyncs(probeWarmup, time.Millisecond), constSyncs(probeWarmup, time.Millisecond), probeWarmup); err == nil {
		t.Error("only warm-up syncs: no error")
	}
	if _, err := summarizeProbe(constSyncs(9, time.Millisecond), nil, probeWarmup); err == nil {
		t.Error("mismatched ends: no error")
	}
}

// TestDiskProbeSlowDisk: a disk that is slow in every round warns, with
// the percentile it could estimate, and is measured again at the next
// start rather than cached.
func TestDiskProbeSlowDisk(t *testing.T) {
	dir := t.TempDir()
	f := &fakeDisk{rounds: [][]time.Duration{constSyncs(500, 15*time.Millisecond)}}
	b, log, cache := probeOnce(t, dir, f)
	if f.calls != 2 || b.probe.Rounds != 2 {
		t.Errorf("%d rounds, want a second one", f.calls)
	}
	// 15 ms syncs: about 66 fit in the 1 s budget, enough for p90 only.
	if b.probe.P99 != 0 || b.probe.P90 != 15*time.Millisecond || b.probe.Samples >= probeSamples {
		t.Errorf("probe %+v", b.probe)
	}
	if !strings.Contains(log, "level=WARN") || !strings.Contains(log, "p90 fdatasync above 10 ms") || !strings.Contains(log, "fdatasync-p99=\"not estimated") {
		t.Errorf("log:\n%s", log)
	}
	if b.backendBatchInterval != time.Second || b.walGroupCommitWindow != 3750*time.Microsecond {
		t.Errorf("batching %+v", b)
	}
	if _, err := os.Stat(cache); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("slow result cached: %v", err)
	}
	b, _, _ = probeOnce(t, dir, f)
	if b.probe.cached || f.calls != 4 {
		t.Fatalf("slow result reused (%d rounds)", f.calls)
	}

	// A burst during the first round only: the second is used, cached.
	f = &fakeDisk{rounds: [][]time.Duration{constSyncs(500, 15*time.Millisecond), fastSyncs(500)}}
	b, log, cache = probeOnce(t, "", f)
	if f.calls != 2 || strings.Contains(log, "level=WARN") || b.probe.P99 != 1200*time.Microsecond || b.backendBatchInterval != 100*time.Millisecond {
		t.Fatalf("burst in round 1: %+v\n%s", b.probe, log)
	}
	if _, err := os.Stat(cache); err != nil {
		t.Fatalf("good second round not cached: %v", err)
	}
	// A slow result found in the cache (written by hand) is measured again.
	data, _ := os.ReadFile(cache)
	var slow diskProbe
	json.Unmarshal(data, &slow)
	slow.P99, slow.Max = 20*time.Millisecond, 20*time.Millisecond
	data, _ = json.Marshal(&slow)
	os.WriteFile(cache, data, 0o600)
	b, _, _ = probeOnce(t, filepath.Dir(filepath.Dir(cache)), f)
	if b.probe.cached || f.calls != 3 {
		t.Fatalf("slow cached result reused")
	}
}

func TestDiskProbeCache(t *testing.T) {
	dir := t.TempDir()
	walDir, cache := filepath.Join(dir, "wal"), filepath.Join(dir, "probe.json")
	var log bytes.Buffer
	f := &fakeDisk{rounds: [][]time.Duration{fastSyncs(500)}}
	now := time.Now()
	p1, err := probeWALDisk(walDir, cache, logTo(&log), now, f.sample)
	if err != nil {
		t.Fatal(err)
	}
	if p1.cached || p1.Samples != probeSamples || p1.P99 <= 0 || p1.IOPS <= 0 || p1.WALDir != walDir || f.calls != 1 {
		t.Fatalf("first probe: %+v", p1)
	}
	// Read back while fresh.
	p2, err := probeWALDisk(walDir, cache, logTo(&log), now.Add(time.Hour), f.sample)
	if err != nil {
		t.Fatal(err)
	}
	if !p2.cached || p2.P99 != p1.P99 || p2.P50 != p1.P50 || p2.Samples != p1.Samples || !p2.MeasuredAt.Equal(p1.MeasuredAt) || f.calls != 1 {
		t.Fatalf("cache not reused: %+v vs %+v", p2, p1)
	}
	// Stale, or from the future.
	for _, at := range []time.Time{now.Add(diskProbeMaxAge + time.Minute), now.Add(-time.Hour)} {
		p3, err := probeWALDisk(walDir, cache, logTo(&log), at, f.sample)
		if err != nil {
			t.Fatal(err)
		}
		if p3.cached || !p3.MeasuredAt.Equal(at) {
			t.Fatalf("cache at %v reused: %+v", at, p3)
		}
	}
	// Another WAL dir sharing the cache file.
	p4, err := probeWALDisk(filepath.Join(dir, "wal2"), cache, logTo(&log), time.Now(), f.sample)
	if err != nil || p4.cached {
		t.Fatalf("cache for another dir reused: %+v %v", p4, err)
	}
	if strings.Contains(log.String(), "ignoring") {
		t.Fatalf("valid cache reported unusable:\n%s", log.String())
	}
}

// TestDiskProbeRealDisk runs the probe's real sample source once: its
// options are valid and it leaves nothing behind. (Its figures are the
// disk's; nothing here asserts them.)
func TestDiskProbeRealDisk(t *testing.T) {
	dir := t.TempDir()
	walDir := filepath.Join(dir, "wal")
	var log bytes.Buffer
	p, err := probeWALDisk(walDir, filepath.Join(dir, "probe.json"), logTo(&log), time.Now(), diskprobe.Run)
	if err != nil {
		t.Fatal(err)
	}
	if p.Samples <= 0 || p.P50 <= 0 || p.IOPS <= 0 || p.Rounds < 1 || p.Took <= 0 || p.check() != nil {
		t.Fatalf("probe %+v: %v", p, p.check())
	}
	if ents, _ := os.ReadDir(walDir); len(ents) != 0 {
		t.Fatalf("probe left files in the WAL dir: %v", ents)
	}
}

func TestDiskProbeCorruptCache(t *testing.T) {
	dir := t.TempDir()
	walDir, cache := filepath.Join(dir, "wal"), filepath.Join(dir, "probe.json")
	f := &fakeDisk{rounds: [][]time.Duration{fastSyncs(500)}}
	for name, content := range map[string]string{
		"garbage":    "\x00\x01not json",
		"empty":      "",
		"truncated":  `{"version": 2, "wal_dir": "`,
		"invalid":    `{"version": 2, "wal_dir": "` + walDir + `", "samples": -3, "iops": 5}`,
		"nan-like":   `{"version": 2, "wal_dir": "` + walDir + `", "samples": 3, "iops": 0, "fdatasync_p50_ns": 5}`,
		"unordered":  `{"version": 2, "wal_dir": "` + walDir + `", "samples": 200, "iops": 9, "fdatasync_p50_ns": 9, "fdatasync_p90_ns": 9, "fdatasync_p99_ns": 5, "fdatasync_max_ns": 9}`,
		"p99 of 50":  `{"version": 2, "wal_dir": "` + walDir + `", "samples": 50, "iops": 9, "fdatasync_p50_ns": 5, "fdatasync_p90_ns": 6, "fdatasync_p99_ns": 7, "fdatasync_max_ns": 9}`,
		"no version": `{"version": 0}`,
	} {
		if err := os.WriteFile(cache, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		var log bytes.Buffer
		p, err := probeWALDisk(walDir, cache, logTo(&log), time.Now(), f.sample)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if p.cached || p.Samples == 0 {
			t.Fatalf("%s: %+v", name, p)
		}
		if !strings.Contains(log.String(), "ignoring unusable disk probe cache") {
			t.Errorf("%s: not logged:\n%s", name, log.String())
		}
		// Replaced by a good one.
		data, _ := os.ReadFile(cache)
		var back diskProbe
		if err := json.Unmarshal(data, &back); err != nil || back.check() != nil {
			t.Fatalf("%s: cache not rewritten: %s", name, data)
		}
	}
	// A cache of version 1 (the probe before warm-up and estimable
	// percentiles) is measured again quietly: it is stale, not damaged.
	os.WriteFile(cache, []byte(`{"version": 1, "wal_dir": "`+walDir+`", "writes": 40, "iops": 300}`), 0o600)
	var log bytes.Buffer
	if p, err := probeWALDisk(walDir, cache, logTo(&log), time.Now(), f.sample); err != nil || p.cached || strings.Contains(log.String(), "level=WARN") {
		t.Fatalf("version 1 cache: %+v %v\n%s", p, err, log.String())
	}
}

func TestApplyDiskProbe(t *testing.T) {
	slow := &diskProbe{Version: diskProbeVersion, WALDir: "/w", Samples: 60, IOPS: 80, Rounds: 2,
		P50: 5 * time.Millisecond, P90: 20 * time.Millisecond, Max: 30 * time.Millisecond}
	fast := &diskProbe{Version: diskProbeVersion, WALDir: "/w", Samples: 200, IOPS: 4000, Rounds: 1,
		P50: 200 * time.Microsecond, P90: 500 * time.Microsecond, P99: 900 * time.Microsecond, Max: 3 * time.Millisecond}
	for _, c := range []struct {
		name     string
		args     []string
		p        *diskProbe
		window   time.Duration
		interval time.Duration
		warn     bool
	}{
		{"slow", nil, slow, 5 * time.Millisecond, 500 * time.Millisecond, true},
		{"slow, interval given", []string{"--backend-batch-interval", "50ms"}, slow, 5 * time.Millisecond, 50 * time.Millisecond, true},
		{"fast", nil, fast, 225 * time.Microsecond, 100 * time.Millisecond, false},
	} {
		cfg, err := config.Parse(c.args, nil, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		var log bytes.Buffer
		b := applyDiskProbe(cfg, c.p, logTo(&log))
		if b.walGroupCommitWindow != c.window || b.backendBatchInterval != c.interval || b.probe != c.p {
			t.Errorf("%s: %+v", c.name, b)
		}
		if !strings.Contains(log.String(), "level=INFO msg=\"WAL disk probe\"") || !strings.Contains(log.String(), "fdatasync-p99=") ||
			!strings.Contains(log.String(), "samples=") {
			t.Errorf("%s: no info line:\n%s", c.name, log.String())
		}
		if got := strings.Contains(log.String(), "level=WARN"); got != c.warn {
			t.Errorf("%s: warning logged %v, want %v:\n%s", c.name, got, c.warn, log.String())
		}
	}
}

func scrape(t *testing.T, m *testMember) string {
	t.Helper()
	res, err := http.Get(m.client + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return string(body)
}

func TestServerDiskProbe(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	cache := filepath.Join(dir, "member", diskProbeCache)
	m := startMember(t, dir)
	p := m.s.disk.probe
	if p == nil || p.cached {
		t.Fatalf("probe %+v", p)
	}
	_, tail := p.stats().tail()
	want := tuneForDisk(p.P50, tail)
	if m.s.disk.backendBatchInterval != want.BackendBatchInterval || m.s.disk.walGroupCommitWindow != want.WALGroupCommitWindow {
		t.Fatalf("batching %+v, want %+v", m.s.disk, want)
	}
	// The figures are this disk's: a slow result is not cached (the
	// rules are TestDiskProbeSlowDisk's), a good one is.
	slow := p.stats().slow()
	if _, err := os.Stat(cache); (err == nil) == slow {
		t.Fatalf("slow %v, cache: %v", slow, err)
	}
	metrics := scrape(t, m)
	for _, name := range []string{`strata_disk_probe_fdatasync_seconds{quantile="0.5"}`, `strata_disk_probe_fdatasync_seconds{quantile="1"}`,
		"strata_disk_probe_iops", "strata_disk_probe_timestamp_seconds", "strata_wal_group_commit_window_seconds", "strata_backend_batch_interval_seconds"} {
		if !strings.Contains(metrics, "\n"+name+" ") {
			t.Errorf("metric %s missing", name)
		}
	}
	args, client := m.args, m.client
	m.stop(t)

	// A restart reads the cache back (or measures again after a slow
	// result).
	m = startWithArgs(t, args, client)
	if q := m.s.disk.probe; q == nil || q.cached == slow || (!slow && (q.P99 != p.P99 || q.P50 != p.P50)) {
		t.Fatalf("restart: probe %+v, want the cached %+v", q, p)
	}
	args, client = m.args, m.client
	m.stop(t)

	// A corrupt cache is measured again, not a failure.
	if err := os.WriteFile(cache, []byte("{{{"), 0o600); err != nil {
		t.Fatal(err)
	}
	m = startWithArgs(t, args, client)
	if q := m.s.disk.probe; q == nil || q.cached {
		t.Fatalf("corrupt cache: probe %+v", q)
	}
	m.stop(t)
	var back diskProbe
	if data, _ := os.ReadFile(cache); !m.s.disk.probe.stats().slow() && (json.Unmarshal(data, &back) != nil || back.check() != nil) {
		t.Fatalf("cache not rewritten: %s", data)
	}
}

func TestServerDiskProbeOff(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	m := startMember(t, dir, "--disk-probe=false")
	defer m.stop(t)
	if m.s.disk.probe != nil || m.s.disk.walGroupCommitWindow != 0 || m.s.disk.backendBatchInterval != config.DefaultBackendBatchInterval {
		t.Fatalf("batching %+v", m.s.disk)
	}
	if _, err := os.Stat(filepath.Join(dir, "member", diskProbeCache)); !os.IsNotExist(err) {
		t.Fatalf("cache written with --disk-probe=false: %v", err)
	}
	metrics := scrape(t, m)
	if strings.Contains(metrics, "strata_disk_probe") {
		t.Error("probe metrics exported without a probe")
	}
	if !strings.Contains(metrics, "\nstrata_backend_batch_interval_seconds 0.1\n") {
		t.Error("backend batch interval metric missing")
	}
}
