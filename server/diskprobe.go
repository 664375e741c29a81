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
// on the WAL directory at start, the way `stratabench disk` does (package
// diskprobe), for probeWarmup + probeSamples syncs or probeBudget,
// summarizes it robustly (diskprobe_stats.go) and sizes batching from it
// with tuneForDisk. A round that looks slow is measured once more and the
// better round is used, so a burst of someone else's I/O during one round
// neither warns nor tunes. A good result is cached in the data dir and
// reused while it is fresh (see loadDiskProbe); a slow one never is, so
// the next start measures again. docs/disks.md documents the
// rule.
const (
	// diskProbeCache is the cache's name in <data-dir>/member.
	diskProbeCache = "strata-disk-probe.json"
	// diskProbeTestFile is written in the WAL dir and removed after. The
	// .wal.tmp suffix makes the WAL remove it if a crash left it behind.
	diskProbeTestFile = "strata-disk-probe.wal.tmp"
	// diskProbeRounds is the most rounds one start measures.
	diskProbeRounds = 2
	// diskProbeMaxAge is how long a cached result is trusted.
	diskProbeMaxAge = 24 * time.Hour
	// diskProbeVersion 2: warm-up left out, only estimable percentiles.
	diskProbeVersion = 2
)

// diskProbe is a probe result, as cached.
type diskProbe struct {
	Version    int       `json:"version"`
	WALDir     string    `json:"wal_dir"`
	Device     uint64    `json:"device"`
	MeasuredAt time.Time `json:"measured_at"`
	// Took is how long the measurement delayed the start (all rounds).
	Took   time.Duration `json:"took_ns"`
	Rounds int           `json:"rounds"`
	// Warmup syncs were done first and left out of the figures.
	Warmup int `json:"warmup_syncs"`
	// Samples, IOPS and the percentiles are those of the round used. A
	// zero P90 or P99 was not estimable from Samples.
	Samples int           `json:"samples"`
	IOPS    float64       `json:"iops"`
	P50     time.Duration `json:"fdatasync_p50_ns"`
	P90     time.Duration `json:"fdatasync_p90_ns,omitempty"`
	P99     time.Duration `json:"fdatasync_p99_ns,omitempty"`
	Max     time.Duration `json:"fdatasync_max_ns"`

	cached bool // read from the cache rather than measured now
}

func (p *diskProbe) stats() probeStats {
	return probeStats{Samples: p.Samples, IOPS: p.IOPS, P50: p.P50, P90: p.P90, P99: p.P99, Max: p.Max}
}

// check reports why a result cannot be used, or nil.
func (p *diskProbe) check() error {
	switch {
	case p.Version != diskProbeVersion:
		return fmt.Errorf("version %d, want %d", p.Version, diskProbeVersion)
	case p.Samples <= 0:
		return errors.New("no samples")
	case !(p.IOPS > 0) || math.IsInf(p.IOPS, 0):
		return fmt.Errorf("IOPS %v", p.IOPS)
	case p.P50 <= 0 || p.P50 > p.Max:
		return errors.New("median latency out of range")
	case (p.P90 > 0) != estimable(p.Samples, 90) || (p.P99 > 0) != estimable(p.Samples, 99):
		return fmt.Errorf("percentiles do not match %d samples", p.Samples)
	case p.P90 > 0 && (p.P90 < p.P50 || p.P90 > p.Max), p.P99 > 0 && (p.P99 < p.P90 || p.P99 > p.Max):
		return errors.New("latency percentiles out of order")
	}
	return nil
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
// less than diskProbeMaxAge ago, and not slow (a slow result is never
// written; one found is measured again). Otherwise it returns nil and
// why, and whether that is because the file is unreadable or corrupt.
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
	if p.Version != diskProbeVersion && p.Version > 0 {
		// Written by another version of Strata: not damage, just stale.
		return nil, fmt.Sprintf("cached result is from probe version %d, not %d", p.Version, diskProbeVersion), false
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
	case p.stats().slow():
		return nil, "cached result is slow; measuring again", false
	}
	p.cached = true
	return &p, "", false
}

// syncSampler takes one round of fdatasync samples as o asks:
// diskprobe.Run in production; tests inject latencies.
type syncSampler func(ctx context.Context, o diskprobe.Options) (*diskprobe.Result, error)

// probeWALDisk returns the fdatasync figures of walDir (created if
// missing), from the cache at cachePath when fresh, else measured with
// sample (see measureWALDisk) and, unless slow, written to the cache.
func probeWALDisk(walDir, cachePath string, lg *slog.Logger, now time.Time, sample syncSampler) (*diskProbe, error) {
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
	st, rounds, took, err := measureWALDisk(abs, sample, lg)
	if err != nil {
		return nil, err
	}
	p = &diskProbe{Version: diskProbeVersion, WALDir: abs, Device: dev, MeasuredAt: now.UTC(), Took: took, Rounds: rounds,
		Warmup: probeWarmup, Samples: st.Samples, IOPS: st.IOPS, P50: st.P50, P90: st.P90, P99: st.P99, Max: st.Max}
	if st.slow() {
		// Measured again at the next start rather than trusted for a day.
		if err := os.Remove(cachePath); err != nil && !errors.Is(err, os.ErrNotExist) {
			lg.Warn("cannot remove the disk probe cache", "path", cachePath, "error", err)
		}
		return p, nil
	}
	if err := writeDiskProbe(cachePath, p); err != nil {
		lg.Warn("cannot cache the disk probe result", "path", cachePath, "error", err)
	}
	return p, nil
}

// measureWALDisk runs up to diskProbeRounds rounds in dir: a second only
// when the first looks slow, and then the better of the two is used.
// took is the time all rounds took.
func measureWALDisk(dir string, sample syncSampler, lg *slog.Logger) (best probeStats, rounds int, took time.Duration, err error) {
	start := time.Now()
	n := probeWarmup + probeSamples
	for rounds < diskProbeRounds {
		r, err := sample(context.Background(), diskprobe.Options{Dir: dir, File: diskProbeTestFile,
			Count: n, Size: int64(n) * diskprobe.DefaultBlockSize, Duration: probeBudget})
		if err == nil {
			var st probeStats
			if st, err = summarizeProbe(r.Syncs, r.Ends, probeWarmup); err == nil {
				rounds++
				tailName, tail := st.tail()
				lg.Debug("WAL disk probe round", "round", rounds, "warm-up-fdatasyncs", fmt.Sprint(r.Syncs[:probeWarmup]),
					"samples", st.Samples, "fdatasync-p50", st.P50, "fdatasync-"+tailName, tail, "fdatasync-max", st.Max)
				if rounds == 1 || betterRound(st, best) {
					best = st
				}
			}
		}
		if err != nil {
			if rounds == 0 {
				return probeStats{}, 0, 0, err
			}
			lg.Warn("WAL disk probe: second round failed; using the first", "wal-dir", dir, "error", err)
			break
		}
		if !best.slow() {
			break
		}
	}
	return best, rounds, time.Since(start), nil
}

// betterRound reports whether round a shows a faster disk than round b:
// a lower tail, or the same with more samples.
func betterRound(a, b probeStats) bool {
	_, ta := a.tail()
	_, tb := b.tail()
	return ta < tb || (ta == tb && a.Samples > b.Samples)
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
	p, err := probeWALDisk(cfg.WALDir(), filepath.Join(cfg.DataDir, "member", diskProbeCache), lg, time.Now(), diskprobe.Run)
	if err != nil {
		lg.Warn("WAL disk probe failed; using default batching", "wal-dir", cfg.WALDir(), "error", err)
		return b
	}
	return applyDiskProbe(cfg, p, lg)
}

// applyDiskProbe sizes batching from a probe result and logs it: one info
// line, and a warning when the highest percentile estimated is 10 ms or
// more (etcd asks for a p99 under 10 ms).
func applyDiskProbe(cfg *config.Config, p *diskProbe, lg *slog.Logger) diskBatching {
	st := p.stats()
	tailName, tail := st.tail()
	t := tuneForDisk(st.P50, tail)
	b := diskBatching{probe: p, walGroupCommitWindow: t.WALGroupCommitWindow, backendBatchInterval: cfg.BackendBatchInterval}
	intervalFrom := "--backend-batch-interval"
	if !cfg.ExplicitlySet["backend-batch-interval"] {
		b.backendBatchInterval = t.BackendBatchInterval
		intervalFrom = "disk probe"
	}
	attrs := []any{"wal-dir", p.WALDir, "cached", p.cached, "measured-at", p.MeasuredAt.Format(time.RFC3339),
		"took", p.Took, "rounds", p.Rounds, "warm-up-fdatasyncs", p.Warmup, "samples", p.Samples, "iops", math.Round(p.IOPS),
		"fdatasync-p50", p.P50}
	if p.P90 > 0 {
		attrs = append(attrs, "fdatasync-p90", p.P90)
	}
	if p.P99 > 0 {
		attrs = append(attrs, "fdatasync-p99", p.P99)
	} else {
		attrs = append(attrs, "fdatasync-p99", fmt.Sprintf("not estimated (%d samples, needs %d)", p.Samples, probeSamples))
	}
	attrs = append(attrs, "fdatasync-max", p.Max, "wal-group-commit-window", b.walGroupCommitWindow,
		"backend-batch-interval", b.backendBatchInterval, "backend-batch-interval-from", intervalFrom)
	lg.Info("WAL disk probe", attrs...)
	if st.slow() {
		msg := "WAL disk is slower than etcd's guidance: p99 fdatasync above 10 ms; expect slow requests and leader elections"
		if tailName != "p99" {
			msg = "WAL disk is slower than etcd's guidance: " + tailName + " fdatasync above 10 ms, so p99 is too; expect slow requests and leader elections"
		}
		lg.Warn(msg, "wal-dir", p.WALDir, "fdatasync-"+tailName, tail, "samples", p.Samples, "rounds", p.Rounds,
			"expected-p99", diskprobe.MaxP99)
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
		Help: "fdatasync latency quantiles of the WAL directory measured at start, warm-up left out (quantile 1 is the maximum; 0.9 and 0.99 only when the samples can estimate them)."}, []string{"quantile"})
	for _, x := range []struct {
		q string
		d time.Duration
	}{{"0.5", p.P50}, {"0.9", p.P90}, {"0.99", p.P99}, {"1", p.Max}} {
		if x.d > 0 { // 0: not estimable from the samples
			q.WithLabelValues(x.q).Set(x.d.Seconds())
		}
	}
	return append(cs, q,
		gauge("disk_probe_iops", "Sequential sync IOPS (2300-byte writes, each followed by fdatasync) of the WAL directory measured at start.", p.IOPS),
		gauge("disk_probe_timestamp_seconds", "When the disk probe result in use was measured (Unix time).",
			float64(p.MeasuredAt.UnixNano())/1e9))
}
