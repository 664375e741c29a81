package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/strata-db/strata/diskprobe"
	"github.com/strata-db/strata/server/config"
)

// The disk probe (--disk-probe, on by default) measures fdatasync latency
// on the WAL directory at start, the way `stratabench disk` does, for
// about diskProbeDuration, and sizes batching from it with tuneForDisk.
// The result is cached in the data dir and reused while it is fresh (see
// loadDiskProbe). README.md, section "Disk", documents the rule.
const (
	// diskProbeCache is the cache's name in <data-dir>/member.
	diskProbeCache = "strata-disk-probe.json"
	// diskProbeTestFile is written in the WAL dir and removed after. The
	// .wal.tmp suffix makes the WAL remove it if a crash left it behind.
	diskProbeTestFile = "strata-disk-probe.wal.tmp"
	diskProbeDuration = 200 * time.Millisecond
	// diskProbeSize bounds the test file: on very fast disks the probe
	// stops when it is written, before diskProbeDuration.
	diskProbeSize = 8 << 20
	// diskProbeMaxAge is how long a cached result is trusted.
	diskProbeMaxAge  = 24 * time.Hour
	diskProbeVersion = 1
)

// diskProbe is a probe result, as cached.
type diskProbe struct {
	Version    int           `json:"version"`
	WALDir     string        `json:"wal_dir"`
	Device     uint64        `json:"device"`
	MeasuredAt time.Time     `json:"measured_at"`
	Writes     int           `json:"writes"`
	IOPS       float64       `json:"iops"`
	Mean       time.Duration `json:"fdatasync_mean_ns"`
	P50        time.Duration `json:"fdatasync_p50_ns"`
	P99        time.Duration `json:"fdatasync_p99_ns"`
	P999       time.Duration `json:"fdatasync_p99_9_ns"`
	Max        time.Duration `json:"fdatasync_max_ns"`

	cached bool // read from the cache rather than measured now
}

// check reports why a result cannot be used, or nil.
func (p *diskProbe) check() error {
	switch {
	case p.Version != diskProbeVersion:
		return fmt.Errorf("version %d, want %d", p.Version, diskProbeVersion)
	case p.Writes <= 0:
		return errors.New("no writes")
	case !(p.IOPS > 0) || math.IsInf(p.IOPS, 0):
		return fmt.Errorf("IOPS %v", p.IOPS)
	case p.Mean <= 0 || p.Mean > p.Max:
		return errors.New("mean latency out of range")
	case p.P50 < 0 || p.P50 > p.P99 || p.P99 > p.P999 || p.P999 > p.Max:
		return errors.New("latency percentiles out of order")
	}
	return nil
}

// diskTuning is what the server derives from a probe.
type diskTuning struct {
	// WALGroupCommitWindow caps the WAL's group-commit wait
	// (wal.Options.GroupCommitWindow).
	WALGroupCommitWindow time.Duration
	// BackendBatchInterval is the backend commit interval, used unless
	// --backend-batch-interval is given.
	BackendBatchInterval time.Duration
}

// Bounds of tuneForDisk's rule.
const (
	minGroupCommitWindow = 50 * time.Microsecond
	maxGroupCommitWindow = 10 * time.Millisecond
	minBackendInterval   = config.DefaultBackendBatchInterval // etcd's 100 ms
	maxBackendInterval   = time.Second
)

// tuneForDisk is the rule README.md documents:
//
//   - WAL group-commit window = p99/4, within [50 µs, 10 ms]. Under load
//     the WAL waits up to a quarter of its last sync for returning writers
//     before the next batch; the window caps that wait at a quarter of the
//     disk's usual worst case, so one stray slow sync does not stretch the
//     next batch.
//   - Backend batch interval = 100 × mean fdatasync, within [100 ms, 1 s].
//     A backend commit costs a few fdatasyncs; committing no more often
//     than every 100 average syncs keeps them to a few percent of the
//     disk's time, leaving it to the WAL that clients wait on. Disks
//     averaging 1 ms or less keep etcd's 100 ms; 1 s bounds the
//     uncommitted work held in memory and replayed after a crash.
func tuneForDisk(mean, p99 time.Duration) diskTuning {
	return diskTuning{
		WALGroupCommitWindow: min(max(p99/4, minGroupCommitWindow), maxGroupCommitWindow),
		BackendBatchInterval: min(max(100*mean, minBackendInterval), maxBackendInterval),
	}
}

// deviceOf returns the device number of the file system holding dir.
func deviceOf(dir string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return 0, err
	}
	return uint64(st.Dev), nil // Dev is uint32 on some platforms
}

// loadDiskProbe returns the cached result if it is fresh: written by this
// version of the probe, for the same WAL directory on the same device,
// less than diskProbeMaxAge ago. Otherwise it returns nil and why, and
// whether that is because the file is unreadable or corrupt.
func loadDiskProbe(path, walDir string, dev uint64, now time.Time) (_ *diskProbe, why string, corrupt bool) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, "no cached result", false
	}
	if err != nil {
		return nil, err.Error(), true
	}
	var p diskProbe
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, fmt.Sprintf("not valid JSON: %v", err), true
	}
	if err := p.check(); err != nil {
		return nil, fmt.Sprintf("invalid result: %v", err), true
	}
	switch age := now.Sub(p.MeasuredAt); {
	case p.WALDir != walDir:
		return nil, fmt.Sprintf("cached result is for WAL dir %s", p.WALDir), false
	case p.Device != dev:
		return nil, "the WAL dir is on another device than when measured", false
	case age < 0 || age >= diskProbeMaxAge:
		return nil, fmt.Sprintf("cached result is from %s, not within the last %s", p.MeasuredAt.Format(time.RFC3339), diskProbeMaxAge), false
	}
	p.cached = true
	return &p, "", false
}

// probeWALDisk returns the fdatasync figures of walDir (created if
// missing), from the cache at cachePath when fresh, else measured for
// diskProbeDuration and written to the cache.
func probeWALDisk(walDir, cachePath string, lg *slog.Logger, now time.Time) (*diskProbe, error) {
	abs, err := filepath.Abs(walDir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("create WAL dir: %w", err)
	}
	dev, err := deviceOf(abs)
	if err != nil {
		return nil, err
	}
	p, why, corrupt := loadDiskProbe(cachePath, abs, dev, now)
	if p != nil {
		return p, nil
	}
	if corrupt {
		lg.Warn("ignoring unusable disk probe cache; measuring again", "path", cachePath, "reason", why)
	} else {
		lg.Debug("measuring WAL disk fdatasync latency", "wal-dir", abs, "reason", why)
	}
	r, err := diskprobe.Run(context.Background(), diskprobe.Options{
		Dir: abs, File: diskProbeTestFile, Size: diskProbeSize, Duration: diskProbeDuration})
	if err != nil {
		return nil, err
	}
	p = &diskProbe{Version: diskProbeVersion, WALDir: abs, Device: dev, MeasuredAt: now.UTC(),
		Writes: r.Writes, IOPS: r.IOPS, Mean: r.Sync.Mean, P50: r.Sync.P50, P99: r.Sync.P99, P999: r.Sync.P999, Max: r.Sync.Max}
	if err := writeDiskProbe(cachePath, p); err != nil {
		lg.Warn("cannot cache the disk probe result", "path", cachePath, "error", err)
	}
	return p, nil
}

// writeDiskProbe replaces the cache atomically.
func writeDiskProbe(path string, p *diskProbe) error {
	data, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// diskBatching is the outcome of the start-up probe: the batching the
// server runs with and the figures it came from (nil without a probe).
type diskBatching struct {
	probe                *diskProbe
	walGroupCommitWindow time.Duration // 0: the WAL's default (no cap)
	backendBatchInterval time.Duration
}

// sizeBatching runs the disk probe unless --disk-probe=false and derives
// the WAL group-commit window and, unless --backend-batch-interval was
// given, the backend batch interval. A failed probe is logged and leaves
// the defaults; it never stops the server.
func sizeBatching(cfg *config.Config, lg *slog.Logger) diskBatching {
	b := diskBatching{backendBatchInterval: cfg.BackendBatchInterval}
	if !cfg.DiskProbe {
		lg.Info("WAL disk probe disabled (--disk-probe=false); using default batching",
			"backend-batch-interval", b.backendBatchInterval.String())
		return b
	}
	p, err := probeWALDisk(cfg.WALDir(), filepath.Join(cfg.DataDir, "member", diskProbeCache), lg, time.Now())
	if err != nil {
		lg.Warn("WAL disk probe failed; using default batching", "wal-dir", cfg.WALDir(), "error", err)
		return b
	}
	return applyDiskProbe(cfg, p, lg)
}

// applyDiskProbe sizes batching from a probe result and logs it: one info
// line, and a warning when p99 fdatasync exceeds etcd's 10 ms.
func applyDiskProbe(cfg *config.Config, p *diskProbe, lg *slog.Logger) diskBatching {
	t := tuneForDisk(p.Mean, p.P99)
	b := diskBatching{probe: p, walGroupCommitWindow: t.WALGroupCommitWindow, backendBatchInterval: cfg.BackendBatchInterval}
	intervalFrom := "--backend-batch-interval"
	if !cfg.ExplicitlySet["backend-batch-interval"] {
		b.backendBatchInterval = t.BackendBatchInterval
		intervalFrom = "disk probe"
	}
	lg.Info("WAL disk probe", "wal-dir", p.WALDir, "cached", p.cached, "measured-at", p.MeasuredAt.Format(time.RFC3339),
		"writes", p.Writes, "iops", math.Round(p.IOPS), "fdatasync-mean", p.Mean.String(),
		"fdatasync-p50", p.P50.String(), "fdatasync-p99", p.P99.String(), "fdatasync-p99.9", p.P999.String(),
		"fdatasync-max", p.Max.String(), "wal-group-commit-window", b.walGroupCommitWindow.String(),
		"backend-batch-interval", b.backendBatchInterval.String(), "backend-batch-interval-from", intervalFrom)
	if p.P99 > diskprobe.MaxP99 {
		lg.Warn("WAL disk is slower than etcd's guidance: p99 fdatasync above 10 ms; expect slow requests and leader elections",
			"wal-dir", p.WALDir, "fdatasync-p99", p.P99.String(), "expected-p99", diskprobe.MaxP99.String())
	}
	return b
}

// collectors exports the probe's figures and the batching derived from
// them.
func (b diskBatching) collectors() []prometheus.Collector {
	gauge := func(name, help string, v float64) prometheus.Collector {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "strata", Name: name, Help: help})
		g.Set(v)
		return g
	}
	cs := []prometheus.Collector{
		gauge("wal_group_commit_window_seconds",
			"Longest group-commit wait of the WAL (0: a quarter of the last sync, uncapped).", b.walGroupCommitWindow.Seconds()),
		gauge("backend_batch_interval_seconds", "Backend commit interval in use.", b.backendBatchInterval.Seconds()),
	}
	p := b.probe
	if p == nil {
		return cs
	}
	q := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "strata", Subsystem: "disk_probe", Name: "fdatasync_seconds",
		Help: "fdatasync latency quantiles of the WAL directory measured at start (quantile 1 is the maximum)."}, []string{"quantile"})
	for _, x := range []struct {
		q string
		d time.Duration
	}{{"0.5", p.P50}, {"0.99", p.P99}, {"0.999", p.P999}, {"1", p.Max}} {
		q.WithLabelValues(x.q).Set(x.d.Seconds())
	}
	return append(cs, q,
		gauge("disk_probe_iops", "Sequential sync IOPS (2300-byte writes, each followed by fdatasync) of the WAL directory measured at start.", p.IOPS),
		gauge("disk_probe_timestamp_seconds", "When the disk probe result in use was measured (Unix time).",
			float64(p.MeasuredAt.UnixNano())/1e9))
}
