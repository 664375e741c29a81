package server

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/strata-db/strata/wal"
)

// metrics holds the server's instruments under etcd's metric names, so
// the etcd-mixin dashboards and alerts work unchanged.
type metrics struct {
	reg *prometheus.Registry
	wal *wal.Metrics

	proposalsCommitted prometheus.Gauge
	proposalsApplied   prometheus.Gauge
	proposalsPending   prometheus.Gauge
	proposalsFailed    prometheus.Counter
	slowApply          prometheus.Counter
	backendCommit      prometheus.Histogram
	rangeTotal         prometheus.Counter
	putTotal           prometheus.Counter
	deleteTotal        prometheus.Counter
	txnTotal           prometheus.Counter
	grpcSent           prometheus.Counter
	grpcReceived       prometheus.Counter
	grpcStarted        *prometheus.CounterVec
	grpcHandled        *prometheus.CounterVec
}

func newMetrics() *metrics {
	g := func(sub, name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "etcd", Subsystem: sub, Name: name, Help: help})
	}
	c := func(sub, name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "etcd", Subsystem: sub, Name: name, Help: help})
	}
	return &metrics{
		reg:                prometheus.NewRegistry(),
		wal:                wal.NewMetrics(),
		proposalsCommitted: g("server", "proposals_committed_total", "The total number of consensus proposals committed."),
		proposalsApplied:   g("server", "proposals_applied_total", "The total number of consensus proposals applied."),
		proposalsPending:   g("server", "proposals_pending", "The current number of pending proposals to commit."),
		proposalsFailed:    c("server", "proposals_failed_total", "The total number of failed proposals seen."),
		slowApply:          c("server", "slow_apply_total", "The total number of slow apply requests (likely overloaded from slow disk)."),
		backendCommit: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "etcd", Subsystem: "disk",
			Name: "backend_commit_duration_seconds", Help: "The latency distributions of commit called by backend.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
		rangeTotal:   c("mvcc", "range_total", "Total number of ranges seen by this member."),
		putTotal:     c("mvcc", "put_total", "Total number of puts seen by this member."),
		deleteTotal:  c("mvcc", "delete_total", "Total number of deletes seen by this member."),
		txnTotal:     c("mvcc", "txn_total", "Total number of txns seen by this member."),
		grpcSent:     c("network", "client_grpc_sent_bytes_total", "The total number of bytes sent to grpc clients."),
		grpcReceived: c("network", "client_grpc_received_bytes_total", "The total number of bytes received from grpc clients."),
		grpcStarted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "grpc_server_started_total",
			Help: "Total number of RPCs started on the server."}, []string{"grpc_type", "grpc_service", "grpc_method"}),
		grpcHandled: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "grpc_server_handled_total",
			Help: "Total number of RPCs completed on the server, regardless of success or failure."},
			[]string{"grpc_type", "grpc_service", "grpc_method", "grpc_code"}),
	}
}

func (m *metrics) observeBackendCommit(d time.Duration) { m.backendCommit.Observe(d.Seconds()) }

// slowApplyThreshold is etcd's --warning-apply-duration default.
const slowApplyThreshold = 100 * time.Millisecond

func (m *metrics) observeApply(d time.Duration) {
	if d > slowApplyThreshold {
		m.slowApply.Inc()
	}
}

// register adds every instrument, including gauges computed from the
// server's state at scrape time, to the registry.
func (m *metrics) register(s *Server) {
	gf := func(sub, name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "etcd", Subsystem: sub, Name: name, Help: help}, f)
	}
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	info := func(name, label, value, help string) prometheus.Collector {
		gv := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "etcd", Name: name, Help: help}, []string{label})
		gv.WithLabelValues(value).Set(1)
		return gv
	}
	quota := float64(s.quotaBytes())
	cs := []prometheus.Collector{
		m.proposalsCommitted, m.proposalsApplied, m.proposalsPending, m.proposalsFailed, m.slowApply,
		m.backendCommit, m.rangeTotal, m.putTotal, m.deleteTotal, m.txnTotal,
		m.grpcSent, m.grpcReceived, m.grpcStarted, m.grpcHandled,
		gf("debugging_mvcc", "watcher_total", "Total number of watchers.", func() float64 { return float64(s.watch.WatcherTotal()) }),
		gf("debugging_mvcc", "slow_watcher_total", "Total number of unsynced slow watchers.",
			func() float64 { return float64(s.watch.SlowWatcherTotal()) }),
		gf("server", "has_leader", "Whether or not a leader exists. 1 is existence, 0 is not.",
			func() float64 { return b2f(s.node.Status().Leader != 0) }),
		gf("server", "is_leader", "Whether or not this member is a leader. 1 if is, 0 otherwise.",
			func() float64 { return b2f(s.node.IsLeader()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "etcd", Subsystem: "server", Name: "leader_changes_seen_total",
			Help: "The number of leader changes seen."}, func() float64 { return float64(s.node.Status().LeaderChanges) }),
		gf("server", "quota_backend_bytes", "Current backend storage quota size in bytes.", func() float64 { return quota }),
		info("server_version", "server_version", EtcdVersion, "Which version is running. 1 for 'server_version' label with current version."),
		info("server_id", "server_id", hexID(s.id), "Server or member ID in hexadecimal format. 1 for 'server_id' label with current ID."),
		info("cluster_version", "cluster_version", ClusterVersion, "Which version is running. 1 for 'cluster_version' label with current cluster version"),
		gf("mvcc", "db_total_size_in_bytes", "Total size of the underlying database physically allocated in bytes.",
			func() float64 { return float64(s.db.Stats().FileSize) }),
		gf("mvcc", "db_total_size_in_use_in_bytes", "Total size of the underlying database logically in use in bytes.",
			func() float64 { return float64(s.db.Stats().InUseBytes) }),
		gf("debugging_mvcc", "keys_total", "Total number of keys.", func() float64 { return float64(s.kv.KeyCount()) }),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewGoCollector(),
	}
	cs = append(cs, m.wal.Collectors()...)
	cs = append(cs, s.disk.collectors()...)
	cs = append(cs, s.diskFull.collectors()...)
	for _, c := range cs {
		m.reg.MustRegister(c)
	}
	m.proposalsCommitted.Add(0)
}

// splitMethod splits "/etcdserverpb.KV/Range" into service and method.
func splitMethod(full string) (string, string) {
	full = strings.TrimPrefix(full, "/")
	if i := strings.Index(full, "/"); i >= 0 {
		return full[:i], full[i+1:]
	}
	return "unknown", full
}

func (m *metrics) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	svc, meth := splitMethod(info.FullMethod)
	m.grpcStarted.WithLabelValues("unary", svc, meth).Inc()
	resp, err := h(ctx, req)
	m.grpcHandled.WithLabelValues("unary", svc, meth, status.Code(err).String()).Inc()
	return resp, err
}

func (m *metrics) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	svc, meth := splitMethod(info.FullMethod)
	typ := "bidi_stream"
	switch {
	case info.IsClientStream && !info.IsServerStream:
		typ = "client_stream"
	case !info.IsClientStream && info.IsServerStream:
		typ = "server_stream"
	}
	m.grpcStarted.WithLabelValues(typ, svc, meth).Inc()
	err := h(srv, ss)
	m.grpcHandled.WithLabelValues(typ, svc, meth, status.Code(err).String()).Inc()
	return err
}

// statsHandler counts payload bytes for the network metrics.
type statsHandler struct{ m *metrics }

func (h statsHandler) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (h statsHandler) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (h statsHandler) HandleConn(context.Context, stats.ConnStats) {}
func (h statsHandler) HandleRPC(_ context.Context, s stats.RPCStats) {
	switch p := s.(type) {
	case *stats.InPayload:
		h.m.grpcReceived.Add(float64(p.WireLength))
	case *stats.OutPayload:
		h.m.grpcSent.Add(float64(p.WireLength))
	}
}
