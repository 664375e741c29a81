package server

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/strata-db/strata/server/config"
)

func TestTuneForDisk(t *testing.T) {
	for _, c := range []struct {
		name                   string
		mean, p99              time.Duration
		window, backendBatchIv time.Duration
	}{
		{"tmpfs-like", time.Microsecond, 4 * time.Microsecond, 50 * time.Microsecond, 100 * time.Millisecond},
		{"ssd", 300 * time.Microsecond, time.Millisecond, 250 * time.Microsecond, 100 * time.Millisecond},
		{"slow ssd", 2 * time.Millisecond, 8 * time.Millisecond, 2 * time.Millisecond, 200 * time.Millisecond},
		{"network disk", 5 * time.Millisecond, 20 * time.Millisecond, 5 * time.Millisecond, 500 * time.Millisecond},
		{"hdd", 20 * time.Millisecond, 80 * time.Millisecond, 10 * time.Millisecond, time.Second},
	} {
		got := tuneForDisk(c.mean, c.p99)
		if got.WALGroupCommitWindow != c.window || got.BackendBatchInterval != c.backendBatchIv {
			t.Errorf("%s: tuneForDisk(%v, %v) = %+v, want window %v interval %v",
				c.name, c.mean, c.p99, got, c.window, c.backendBatchIv)
		}
	}
}

func logTo(buf *bytes.Buffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func TestDiskProbeCache(t *testing.T) {
	dir := t.TempDir()
	walDir, cache := filepath.Join(dir, "wal"), filepath.Join(dir, "probe.json")
	var log bytes.Buffer
	now := time.Now()
	p1, err := probeWALDisk(walDir, cache, logTo(&log), now)
	if err != nil {
		t.Fatal(err)
	}
	if p1.cached || p1.Writes == 0 || p1.P99 <= 0 || p1.IOPS <= 0 || p1.WALDir != walDir {
		t.Fatalf("first probe: %+v", p1)
	}
	if ents, _ := os.ReadDir(walDir); len(ents) != 0 {
		t.Fatalf("probe left files in the WAL dir: %v", ents)
	}
	// Read back while fresh.
	p2, err := probeWALDisk(walDir, cache, logTo(&log), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if !p2.cached || p2.P99 != p1.P99 || p2.Mean != p1.Mean || p2.Writes != p1.Writes || !p2.MeasuredAt.Equal(p1.MeasuredAt) {
		t.Fatalf("cache not reused: %+v vs %+v", p2, p1)
	}
	// Stale, or from the future.
	for _, at := range []time.Time{now.Add(diskProbeMaxAge + time.Minute), now.Add(-time.Hour)} {
		p3, err := probeWALDisk(walDir, cache, logTo(&log), at)
		if err != nil {
			t.Fatal(err)
		}
		if p3.cached || !p3.MeasuredAt.Equal(at) {
			t.Fatalf("cache at %v reused: %+v", at, p3)
		}
	}
	// Another WAL dir sharing the cache file.
	p4, err := probeWALDisk(filepath.Join(dir, "wal2"), cache, logTo(&log), time.Now())
	if err != nil || p4.cached {
		t.Fatalf("cache for another dir reused: %+v %v", p4, err)
	}
	if strings.Contains(log.String(), "ignoring") {
		t.Fatalf("valid cache reported unusable:\n%s", log.String())
	}
}

func TestDiskProbeCorruptCache(t *testing.T) {
	dir := t.TempDir()
	walDir, cache := filepath.Join(dir, "wal"), filepath.Join(dir, "probe.json")
	for name, content := range map[string]string{
		"garbage":   "\x00\x01not json",
		"empty":     "",
		"truncated": `{"version": 1, "wal_dir": "`,
		"invalid":   `{"version": 1, "wal_dir": "` + walDir + `", "writes": -3, "iops": 5}`,
		"nan-like":  `{"version": 1, "wal_dir": "` + walDir + `", "writes": 3, "iops": 0, "fdatasync_p99_ns": 5}`,
		"unordered": `{"version": 1, "wal_dir": "` + walDir + `", "writes": 3, "iops": 9, "fdatasync_mean_ns": 5, "fdatasync_p50_ns": 9, "fdatasync_p99_ns": 5, "fdatasync_p99_9_ns": 9, "fdatasync_max_ns": 9}`,
		"old":       `{"version": 0}`,
	} {
		if err := os.WriteFile(cache, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		var log bytes.Buffer
		p, err := probeWALDisk(walDir, cache, logTo(&log), time.Now())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if p.cached || p.Writes == 0 {
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
}

func TestApplyDiskProbe(t *testing.T) {
	slow := &diskProbe{Version: diskProbeVersion, WALDir: "/w", Writes: 9, IOPS: 80,
		Mean: 5 * time.Millisecond, P50: 4 * time.Millisecond, P99: 20 * time.Millisecond, P999: 30 * time.Millisecond, Max: 30 * time.Millisecond}
	fast := &diskProbe{Version: diskProbeVersion, WALDir: "/w", Writes: 900, IOPS: 4000,
		Mean: 250 * time.Microsecond, P50: 200 * time.Microsecond, P99: 900 * time.Microsecond, P999: 2 * time.Millisecond, Max: 3 * time.Millisecond}
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
		if !strings.Contains(log.String(), "level=INFO msg=\"WAL disk probe\"") || !strings.Contains(log.String(), "fdatasync-p99=") {
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
	want := tuneForDisk(p.Mean, p.P99)
	if m.s.disk.backendBatchInterval != want.BackendBatchInterval || m.s.disk.walGroupCommitWindow != want.WALGroupCommitWindow {
		t.Fatalf("batching %+v, want %+v", m.s.disk, want)
	}
	if _, err := os.Stat(cache); err != nil {
		t.Fatalf("no cache: %v", err)
	}
	metrics := scrape(t, m)
	for _, name := range []string{`strata_disk_probe_fdatasync_seconds{quantile="0.99"}`, `strata_disk_probe_fdatasync_seconds{quantile="0.5"}`,
		"strata_disk_probe_iops", "strata_disk_probe_timestamp_seconds", "strata_wal_group_commit_window_seconds", "strata_backend_batch_interval_seconds"} {
		if !strings.Contains(metrics, "\n"+name+" ") {
			t.Errorf("metric %s missing", name)
		}
	}
	args, client := m.args, m.client
	m.stop(t)

	// A restart reads the cache back.
	m = startWithArgs(t, args, client)
	if q := m.s.disk.probe; q == nil || !q.cached || q.P99 != p.P99 || q.Mean != p.Mean {
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
	if data, _ := os.ReadFile(cache); json.Unmarshal(data, &back) != nil || back.check() != nil {
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
