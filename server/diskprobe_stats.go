package server

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/strata-db/strata/diskprobe"
	"github.com/strata-db/strata/server/config"
)

// The start-up probe's statistics. A probe is short, so it has few
// samples, and the first syncs of a new file (and of a new data dir) also
// commit the file system's journal for the file's creation and
// preallocation: one of them can take 100 times a steady sync. The rules
// below keep such a sync from becoming the probe's verdict or its tuning:
//
//   - the first probeWarmup syncs are done but left out;
//   - a percentile is reported only when the samples can estimate it:
//     at least minSamplesAbove samples lie above its nearest rank, so no
//     single slow sync can be the figure (p99 needs 200 samples, p90 20);
//   - the tuning uses the median and the highest percentile estimated,
//     never the mean or the maximum.
const (
	// probeWarmup is the number of syncs done before measuring.
	probeWarmup = 5
	// probeSamples is how many syncs one round measures after the
	// warm-up: enough for a p99 with two samples above it.
	probeSamples = 200
	// probeBudget bounds one round (warm-up included). A disk slower than
	// about 5 ms a sync yields fewer samples; the probe then reports p90
	// (or only the median) rather than a p99 it cannot estimate.
	probeBudget = time.Second
	// minSamplesAbove is how many samples must lie above a percentile's
	// rank for the percentile to be reported.
	minSamplesAbove = 2
)

// estimable reports whether the nearest-rank p-th percentile of n samples
// has at least minSamplesAbove samples above it.
func estimable(n int, p float64) bool {
	rank := int(math.Ceil(p/100*float64(n) - 1e-9))
	return n > 0 && n-rank >= minSamplesAbove
}

// probeStats are the figures of one probe round, warm-up excluded. A zero
// P90 or P99 means the round had too few samples to estimate it.
type probeStats struct {
	Samples int
	IOPS    float64 // measured writes (each followed by fdatasync) per second
	P50     time.Duration
	P90     time.Duration
	P99     time.Duration
	Max     time.Duration // reported, never used for a decision
}

// summarizeProbe computes a round's figures from a measurement: syncs[i]
// is the i-th fdatasync latency and ends[i] when it returned (time since
// the start of the round). The first warmup syncs are left out. It fails
// when nothing is left.
func summarizeProbe(syncs, ends []time.Duration, warmup int) (probeStats, error) {
	if len(ends) != len(syncs) {
		return probeStats{}, fmt.Errorf("disk probe: %d sync latencies but %d end times", len(syncs), len(ends))
	}
	if len(syncs) <= warmup {
		return probeStats{}, fmt.Errorf("disk probe: only %d fdatasyncs within %s, all of them warm-up", len(syncs), probeBudget)
	}
	s := slices.Clone(syncs[warmup:])
	slices.Sort(s)
	st := probeStats{Samples: len(s), Max: s[len(s)-1], P50: diskprobe.Percentile(s, 50)}
	if estimable(len(s), 90) {
		st.P90 = diskprobe.Percentile(s, 90)
	}
	if estimable(len(s), 99) {
		st.P99 = diskprobe.Percentile(s, 99)
	}
	start := time.Duration(0)
	if warmup > 0 {
		start = ends[warmup-1]
	}
	if span := ends[len(ends)-1] - start; span > 0 {
		st.IOPS = float64(len(s)) / span.Seconds()
	}
	return st, nil
}

// tail is the highest percentile the round estimates, and its name.
func (st probeStats) tail() (string, time.Duration) {
	switch {
	case st.P99 > 0:
		return "p99", st.P99
	case st.P90 > 0:
		return "p90", st.P90
	}
	return "p50", st.P50
}

// slow reports whether the round shows a disk slower than etcd asks: its
// highest estimated percentile at or above 10 ms. A p90 or median that
// high means the p99 is too.
func (st probeStats) slow() bool {
	_, d := st.tail()
	return d >= diskprobe.MaxP99
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

// tuneForDisk is the rule docs/disks.md documents, from the median and the
// tail (the highest percentile estimated, see probeStats.tail):
//
//   - WAL group-commit window = tail/4, within [50 µs, 10 ms]. Under load
//     the WAL waits up to a quarter of its last sync for returning writers
//     before the next batch; the window caps that wait at a quarter of the
//     disk's usual worst case, so one stray slow sync does not stretch the
//     next batch.
//   - Backend batch interval = 100 × median fdatasync, within
//     [100 ms, 1 s]. A backend commit costs a few fdatasyncs; committing
//     no more often than every 100 syncs keeps them to a few percent of
//     the disk's time, leaving it to the WAL that clients wait on. Disks
//     with a median of 1 ms or less keep etcd's 100 ms; 1 s bounds the
//     uncommitted work held in memory and replayed after a crash.
//
// Neither input can be set by one slow sync (see estimable), and the
// bounds cap what a slow disk does to either value.
func tuneForDisk(p50, tail time.Duration) diskTuning {
	return diskTuning{
		WALGroupCommitWindow: min(max(tail/4, minGroupCommitWindow), maxGroupCommitWindow),
		BackendBatchInterval: min(max(100*p50, minBackendInterval), maxBackendInterval),
	}
}
