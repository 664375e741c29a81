package raft

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the node's instruments under etcd 3.7's names; the server
// registers Collectors(). A nil *Metrics records nothing.
type Metrics struct {
	// SlowReadIndexes counts, for each raft ReadIndex request, every
	// slowReadIndexInterval it waited for its answer: etcd retries a read
	// index request after that long and counts each retry (and each stale
	// answer) as slow. ReadIndexesFailed counts requests that failed (no
	// leader, the node stopping or failing).
	SlowReadIndexes, ReadIndexesFailed prometheus.Counter

	// Snapshots. Strata writes no .snap file: a raft snapshot is the page
	// store's commit plus a snapshot marker in the WAL (see doc.go). The
	// histograms etcd times for saving a .snap file time the equivalent
	// steps: SnapMarshalling the in-memory raft snapshot (etcd marshals
	// it), SnapFsync writing the WAL marker, which ends with an
	// fdatasync (etcd fsyncs the file), and SnapSave both.
	SnapMarshalling, SnapSave, SnapFsync prometheus.Histogram

	// HeartbeatSendFailures counts heartbeats sent late (heartbeat.go).
	HeartbeatSendFailures prometheus.Counter
	// SnapshotApplyInProgress is 1 while a snapshot received from the
	// leader is installed into the state machine.
	SnapshotApplyInProgress prometheus.Gauge
}

// slowReadIndexInterval is etcd's readIndexRetryTime.
const slowReadIndexInterval = 500 * time.Millisecond

// NewMetrics builds unregistered instruments with etcd's names, help
// texts and buckets.
func NewMetrics() *Metrics {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "etcd", Subsystem: "server", Name: name, Help: help})
	}
	h := func(ns, sub, name, help string) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: name, Help: help,
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)})
	}
	return &Metrics{
		SlowReadIndexes: c("slow_read_indexes_total",
			"The total number of pending read indexes not in sync with leader's or timed out read index requests."),
		ReadIndexesFailed: c("read_indexes_failed_total", "The total number of failed read indexes seen."),
		SnapMarshalling: h("etcd_debugging", "snap", "save_marshalling_duration_seconds",
			"The marshalling cost distributions of save called by snapshot."),
		SnapSave:  h("etcd_debugging", "snap", "save_total_duration_seconds", "The total latency distributions of save called by snapshot."),
		SnapFsync: h("etcd", "snap", "fsync_duration_seconds", "The latency distributions of fsync called by snap."),
		HeartbeatSendFailures: c("heartbeat_send_failures_total",
			"The total number of leader heartbeat send failures (likely overloaded from slow disk)."),
		SnapshotApplyInProgress: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "etcd", Subsystem: "server",
			Name: "snapshot_apply_in_progress_total", Help: "1 if the server is applying the incoming snapshot. 0 if none."}),
	}
}

// Collectors returns the instruments for registration.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.SlowReadIndexes, m.ReadIndexesFailed, m.SnapMarshalling, m.SnapSave, m.SnapFsync,
		m.HeartbeatSendFailures, m.SnapshotApplyInProgress}
}

// readAnswered records a read index request answered after d.
func (m *Metrics) readAnswered(d time.Duration) {
	if m != nil && d >= slowReadIndexInterval {
		m.SlowReadIndexes.Add(float64(d / slowReadIndexInterval))
	}
}

func (m *Metrics) readFailed() {
	if m != nil {
		m.ReadIndexesFailed.Inc()
	}
}

func (m *Metrics) snapshotSaved(marshal, marker time.Duration) {
	if m != nil {
		m.SnapMarshalling.Observe(marshal.Seconds())
		m.SnapFsync.Observe(marker.Seconds())
		m.SnapSave.Observe((marshal + marker).Seconds())
	}
}

func (m *Metrics) heartbeatLate() {
	if m != nil {
		m.HeartbeatSendFailures.Inc()
	}
}

// applyingSnapshot sets SnapshotApplyInProgress.
func (m *Metrics) applyingSnapshot(on bool) {
	if m != nil {
		v := 0.0
		if on {
			v = 1
		}
		m.SnapshotApplyInProgress.Set(v)
	}
}
