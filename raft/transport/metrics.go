package transport

import "github.com/prometheus/client_golang/prometheus"

// metrics are etcd's rafthttp metrics, with etcd's names, help texts and
// labels, so dashboards and alerts written for etcd work unchanged. Each
// Transport has its own set (tests run several in one process); the
// server registers Collectors() once.
type metrics struct {
	activePeers       *prometheus.GaugeVec   // Local, Remote
	disconnectedPeers *prometheus.CounterVec // Local, Remote
	sentBytes         *prometheus.CounterVec // To
	receivedBytes     *prometheus.CounterVec // From
	sentFailures      *prometheus.CounterVec // To
	recvFailures      *prometheus.CounterVec // From

	snapshotSend          *prometheus.CounterVec   // To
	snapshotSendInflights *prometheus.GaugeVec     // To
	snapshotSendFailures  *prometheus.CounterVec   // To
	snapshotSendSeconds   *prometheus.HistogramVec // To

	snapshotReceive          *prometheus.CounterVec   // From
	snapshotReceiveInflights *prometheus.GaugeVec     // From
	snapshotReceiveFailures  *prometheus.CounterVec   // From
	snapshotReceiveSeconds   *prometheus.HistogramVec // From

	rtt *prometheus.HistogramVec // To

	// A received image's save (saveImage), etcd's snap.SaveDBFrom: the
	// whole write and its fsync.
	snapDBSave, snapDBFsync prometheus.Histogram
}

func newMetrics() *metrics {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "etcd", Subsystem: "network", Name: name, Help: help}, labels)
	}
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "etcd", Subsystem: "network", Name: name, Help: help}, labels)
	}
	hist := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "etcd", Subsystem: "network", Name: name, Help: help, Buckets: buckets}, labels)
	}
	// 100 ms .. 51.2 s for snapshots; 0.1 ms .. 3.2768 s for round trips.
	snapBuckets := prometheus.ExponentialBuckets(0.1, 2, 10)
	return &metrics{
		activePeers:       gauge("active_peers", "The current number of active peer connections.", "Local", "Remote"),
		disconnectedPeers: counter("disconnected_peers_total", "The total number of disconnected peers.", "Local", "Remote"),
		sentBytes:         counter("peer_sent_bytes_total", "The total number of bytes sent to peers.", "To"),
		receivedBytes:     counter("peer_received_bytes_total", "The total number of bytes received from peers.", "From"),
		sentFailures:      counter("peer_sent_failures_total", "The total number of send failures from peers.", "To"),
		recvFailures:      counter("peer_received_failures_total", "The total number of receive failures from peers.", "From"),

		snapshotSend:          counter("snapshot_send_success", "Total number of successful snapshot sends", "To"),
		snapshotSendInflights: gauge("snapshot_send_inflights_total", "Total number of inflight snapshot sends", "To"),
		snapshotSendFailures:  counter("snapshot_send_failures", "Total number of snapshot send failures", "To"),
		snapshotSendSeconds:   hist("snapshot_send_total_duration_seconds", "Total latency distributions of v3 snapshot sends", snapBuckets, "To"),

		snapshotReceive:          counter("snapshot_receive_success", "Total number of successful snapshot receives", "From"),
		snapshotReceiveInflights: gauge("snapshot_receive_inflights_total", "Total number of inflight snapshot receives", "From"),
		snapshotReceiveFailures:  counter("snapshot_receive_failures", "Total number of snapshot receive failures", "From"),
		snapshotReceiveSeconds:   hist("snapshot_receive_total_duration_seconds", "Total latency distributions of v3 snapshot receives", snapBuckets, "From"),

		rtt: hist("peer_round_trip_time_seconds", "Round-Trip-Time histogram between peers", prometheus.ExponentialBuckets(0.0001, 2, 16), "To"),

		snapDBSave: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "etcd", Subsystem: "snap_db", Name: "save_total_duration_seconds",
			Help: "The total latency distributions of v3 snapshot save", Buckets: snapBuckets}),
		snapDBFsync: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "etcd", Subsystem: "snap_db", Name: "fsync_duration_seconds",
			Help: "The latency distributions of fsyncing .snap.db file", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		m.activePeers, m.disconnectedPeers, m.sentBytes, m.receivedBytes, m.sentFailures, m.recvFailures,
		m.snapshotSend, m.snapshotSendInflights, m.snapshotSendFailures, m.snapshotSendSeconds,
		m.snapshotReceive, m.snapshotReceiveInflights, m.snapshotReceiveFailures, m.snapshotReceiveSeconds,
		m.rtt, m.snapDBSave, m.snapDBFsync,
	}
}

// unknownSnapshotSender labels snapshot receive failures that happen
// before the sender is known, as etcd does.
const unknownSnapshotSender = "UNKNOWN_SNAPSHOT_SENDER"
