package mvcc

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the instruments of the store, the watchable store and the
// backend, under etcd 3.7's names and with etcd's meaning, so that
// dashboards and alerts written for etcd read Strata's figures right. The
// package only observes them; the server registers Collectors() with its
// registry. A nil *Metrics observes nothing (tests, offline tools).
//
// Gauges that are a function of state the server can read cheaply (keys,
// revisions, watchers, database sizes) are not here: the server exports
// them as gauge functions.
type Metrics struct {
	// Operations seen by this member, counted as etcd counts them: per
	// operation inside each read or write transaction of the store, on
	// apply for writes and when served for reads. A range is every read of
	// the index: a Range request, each range op of a txn, each txn
	// compare, the previous value a put or delete with prev_kv (or a put
	// with ignore_value/ignore_lease) reads, the previous value of a watch
	// event with prev_kv. A txn is a store transaction with more than one
	// operation in all, which is how etcd counts them: a write txn's
	// compares and its writes are two transactions, and a put with prev_kv
	// is one txn of two operations.
	Range, Put, Delete, Txn prometheus.Counter
	// PutSize is the sum of len(key)+len(value) of every put (a gauge in
	// etcd).
	PutSize prometheus.Gauge

	// Events counts watch events taken by the server's send loops for
	// their gRPC streams (also those dropped when a stream closes, as
	// etcd). PendingEvents are events the store has handed to a stream
	// that its send loop has not yet taken.
	Events        prometheus.Counter
	PendingEvents prometheus.Gauge
	// WatchStreams is the number of open watch streams.
	WatchStreams prometheus.Gauge
	// ProgressLoop times each stream's periodic progress round (etcd's
	// send loop does it on its progress ticker; here the stream's
	// forwarder does).
	ProgressLoop prometheus.Histogram

	// Compaction. IndexCompactionPause is the time the in-memory index
	// compaction took; DBCompactionPause, per batch of record deletions,
	// the time the batch competed with the write path (its delete and its
	// commit); DBCompactionTotal the whole compaction. DBCompactionLast
	// is the Unix time the last compaction finished (0 after a start) and
	// DBCompactionKeys counts the records it deleted.
	IndexCompactionPause prometheus.Histogram
	DBCompactionPause    prometheus.Histogram
	DBCompactionTotal    prometheus.Histogram
	DBCompactionLast     prometheus.Gauge
	DBCompactionKeys     prometheus.Counter

	// Hash and HashRev time Maintenance.Hash and Maintenance.HashKV.
	Hash, HashRev prometheus.Histogram

	// Defrag times each online defragmentation; DefragInflight is 1 while
	// one runs.
	Defrag         prometheus.Histogram
	DefragInflight prometheus.Gauge
	// DefragMovedPages counts the pages online defrag moved to the front
	// of the file (Strata's own: its progress, with the file's size and
	// the bytes in use).
	DefragMovedPages prometheus.Counter
}

// NewMetrics builds unregistered instruments with etcd's names, help
// texts and buckets.
func NewMetrics() *Metrics {
	c := func(ns, sub, name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: name, Help: help})
	}
	g := func(ns, sub, name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: name, Help: help})
	}
	h := func(ns, sub, name, help string, buckets []float64) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: name, Help: help, Buckets: buckets})
	}
	exp := prometheus.ExponentialBuckets
	return &Metrics{
		Range:   c("etcd", "mvcc", "range_total", "Total number of ranges seen by this member."),
		Put:     c("etcd", "mvcc", "put_total", "Total number of puts seen by this member."),
		Delete:  c("etcd", "mvcc", "delete_total", "Total number of deletes seen by this member."),
		Txn:     c("etcd", "mvcc", "txn_total", "Total number of txns seen by this member."),
		PutSize: g("etcd_debugging", "mvcc", "total_put_size_in_bytes", "The total size of put kv pairs seen by this member."),

		Events:        c("etcd_debugging", "mvcc", "events_total", "Total number of events sent by this member."),
		PendingEvents: g("etcd_debugging", "mvcc", "pending_events_total", "Total number of pending events to be sent."),
		WatchStreams:  g("etcd_debugging", "mvcc", "watch_stream_total", "Total number of watch streams."),
		ProgressLoop: h("etcd_debugging", "server", "watch_send_loop_progress_duration_seconds",
			"The total duration in seconds of running through the progress loop control stream response.", exp(0.001, 2, 14)),

		IndexCompactionPause: h("etcd_debugging", "mvcc", "index_compaction_pause_duration_milliseconds",
			"Bucketed histogram of index compaction pause duration.", exp(0.5, 2, 14)),
		DBCompactionPause: h("etcd_debugging", "mvcc", "db_compaction_pause_duration_milliseconds",
			"Bucketed histogram of db compaction pause duration.", exp(1, 2, 13)),
		DBCompactionTotal: h("etcd_debugging", "mvcc", "db_compaction_total_duration_milliseconds",
			"Bucketed histogram of db compaction total duration.", exp(100, 2, 14)),
		DBCompactionLast: g("etcd_debugging", "mvcc", "db_compaction_last",
			"The unix time of the last db compaction. Resets to 0 on start."),
		DBCompactionKeys: c("etcd_debugging", "mvcc", "db_compaction_keys_total", "Total number of db keys compacted."),

		Hash: h("etcd", "mvcc", "hash_duration_seconds", "The latency distribution of storage hash operation.", exp(.01, 2, 15)),
		HashRev: h("etcd", "mvcc", "hash_rev_duration_seconds",
			"The latency distribution of storage hash by revision operation.", exp(.01, 2, 15)),

		Defrag: h("etcd", "disk", "backend_defrag_duration_seconds",
			"The latency distribution of backend defragmentation.", exp(.1, 2, 13)),
		DefragInflight: g("etcd", "disk", "defrag_inflight",
			"Whether or not defrag is active on the member. 1 means active, 0 means not."),
		DefragMovedPages: c("strata", "defrag", "moved_pages_total",
			"Pages online defragmentation moved toward the front of the page store."),
	}
}

// Collectors returns the instruments for registration.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{
		m.Range, m.Put, m.Delete, m.Txn, m.PutSize,
		m.Events, m.PendingEvents, m.WatchStreams, m.ProgressLoop,
		m.IndexCompactionPause, m.DBCompactionPause, m.DBCompactionTotal, m.DBCompactionLast, m.DBCompactionKeys,
		m.Hash, m.HashRev, m.Defrag, m.DefragInflight, m.DefragMovedPages,
	}
}

// opCounts are the operations of one store transaction (a view or a
// write), reported when it ends.
type opCounts struct {
	ranges, puts, deletes int
	putSize               int64
}

// report adds one ended transaction's operations and resets c.
func (m *Metrics) report(c *opCounts) {
	if m != nil {
		if c.ranges+c.puts+c.deletes > 1 {
			m.Txn.Inc()
		}
		m.Range.Add(float64(c.ranges))
		m.Put.Add(float64(c.puts))
		m.PutSize.Add(float64(c.putSize))
		m.Delete.Add(float64(c.deletes))
	}
	*c = opCounts{}
}

// EventsTaken records that a send loop took n events off a stream for
// sending (etcd's ReportEventReceived).
func (m *Metrics) EventsTaken(n int) {
	if m == nil || n == 0 {
		return
	}
	m.PendingEvents.Sub(float64(n))
	m.Events.Add(float64(n))
}

func (m *Metrics) eventsQueued(n int) {
	if m != nil && n > 0 {
		m.PendingEvents.Add(float64(n))
	}
}
