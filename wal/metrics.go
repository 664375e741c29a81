package wal

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the WAL's instruments under etcd's metric names. The WAL
// only observes them; the server registers Collectors() with its registry.
type Metrics struct {
	FsyncDuration prometheus.Histogram // etcd_disk_wal_fsync_duration_seconds
	WriteDuration prometheus.Histogram // etcd_disk_wal_write_duration_seconds
	WriteBytes    prometheus.Gauge     // etcd_disk_wal_write_bytes_total (a gauge in etcd)
	// GroupCommit is Strata's own: the Saves one fdatasync made durable
	// (strata_wal_group_commit_saves), how much group commit gains.
	GroupCommit prometheus.Histogram
}

// NewMetrics builds unregistered instruments with etcd's names, help texts
// in substance, and buckets (1 ms doubling to about 8 s).
func NewMetrics() *Metrics {
	buckets := prometheus.ExponentialBuckets(0.001, 2, 14)
	return &Metrics{
		FsyncDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "etcd", Subsystem: "disk", Name: "wal_fsync_duration_seconds",
			Help:    "Latency distribution of fdatasync calls made by the WAL.",
			Buckets: buckets,
		}),
		WriteDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "etcd", Subsystem: "disk", Name: "wal_write_duration_seconds",
			Help:    "Latency distribution of write calls made by the WAL.",
			Buckets: buckets,
		}),
		WriteBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "etcd", Subsystem: "disk", Name: "wal_write_bytes_total",
			Help: "Total number of bytes written to the WAL.",
		}),
		GroupCommit: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "strata_wal_group_commit_saves",
			Help:    "Saves (raft Readies) made durable by one fdatasync of the WAL: the group commit's batch size.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 10),
		}),
	}
}

// Collectors returns the instruments for registration.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.FsyncDuration, m.WriteDuration, m.WriteBytes, m.GroupCommit}
}

func (m *Metrics) observeWrite(d time.Duration, n int) {
	if m == nil {
		return
	}
	m.WriteDuration.Observe(d.Seconds())
	m.WriteBytes.Add(float64(n))
}

func (m *Metrics) observeFsync(d time.Duration) {
	if m == nil {
		return
	}
	m.FsyncDuration.Observe(d.Seconds())
}

func (m *Metrics) observeGroup(saves int) {
	if m == nil || saves == 0 {
		return
	}
	m.GroupCommit.Observe(float64(saves))
}
