package server

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/strata-db/strata/lease"
	"github.com/strata-db/strata/mvcc"
	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/raft"
	"github.com/strata-db/strata/wal"
)

// metrics holds the server's instruments under etcd 3.7's metric names,
// types, labels and meaning, so the etcd-mixin dashboards and alerts (and
// etcd's own e2e tests) work unchanged. The storage packages own their
// instruments (wal, mvcc, lease, raft); this registry gathers them, the
// server's own, gauges read from the server's state at scrape time
// (metrics_state.go), and the gRPC server metrics (metrics_grpc.go).
// docs/monitoring.md lists where a figure is Strata's closest
// counterpart rather than etcd's own.
//
// Every instrument is safe for concurrent use; none is guarded by a
// server lock, and no scrape walks the database.
type metrics struct {
	reg *prometheus.Registry
	// handler serves /metrics on every listener, instrumented as etcd's
	// (promhttp_metric_handler_requests_total and _in_flight).
	handler http.Handler

	wal   *wal.Metrics
	mvcc  *mvcc.Metrics
	lease *lease.Metrics
	raft  *raft.Metrics
	grpc  *grpcMetrics

	proposalsPending prometheus.Gauge
	proposalsFailed  prometheus.Counter
	// slowApply counts applies, and read-only ranges and txns, slower than
	// --warning-apply-duration, as etcd's warning does.
	slowApply prometheus.Counter
	// applyDuration: every applied request, by op (etcd's apply op
	// names) and success (no error, or ErrCompacted), on every member.
	applyDuration *prometheus.HistogramVec
	// requestDuration: a proposal from submission to its result, by
	// request type; and Range and ReadonlyTxn requests served locally.
	requestDuration *prometheus.HistogramVec
	// rangeDuration: the store's range of a Range request (after any
	// linearizable wait), by success.
	rangeDuration *prometheus.HistogramVec
	// reqSeries, applySeries and rangeSeries cache the series of
	// requestDuration and applyDuration (for hotRequestTypes) and
	// rangeDuration, by success (index 1: true), each made on its first
	// use: a request does not hash its labels and take the vector's lock
	// (once per request, and again for every entry each member applies).
	// A series appears when first observed, as before.
	reqSeries   [len(hotRequestTypes)][2]atomic.Pointer[prometheus.Observer]
	applySeries [len(hotRequestTypes)][2]atomic.Pointer[prometheus.Observer]
	rangeSeries [2]atomic.Pointer[prometheus.Observer]

	backendCommit prometheus.Histogram
	// The page store's commit phases, under etcd's bbolt names (see
	// pagestore.CommitTimes).
	commitRebalance, commitSpill, commitWrite prometheus.Histogram
	// backendSnapshot times Maintenance.Snapshot streams sent whole.
	backendSnapshot prometheus.Histogram

	leaseExpired prometheus.Counter
	// health counts /health answers; healthCheck and healthChecks the
	// /livez and /readyz checks, by check.
	healthSuccess, healthFailed prometheus.Counter
	healthCheck                 *prometheus.GaugeVec
	healthChecks                *prometheus.CounterVec

	promoteSucceeded prometheus.Counter
	promoteFailed    *prometheus.CounterVec

	// The watch send loops (server/watch.go): a response with events
	// (or a progress or compaction notice) from taking it to having sent
	// it, also per event; and a created or canceled response.
	watchSendStream, watchSendPerEvent, watchSendControl prometheus.Histogram
	// streamFailures counts watch and keep-alive streams that failed for
	// a reason other than the client going away, by direction and API.
	streamFailures *prometheus.CounterVec
	// v2Reads and v2Writes are etcd's v2 store operation counters, by
	// action (v2StoreSnapshot).
	v2Reads, v2Writes *prometheus.CounterVec
}

// newMetrics builds the instruments; extensive is --metrics=extensive
// (which adds grpc_server_handling_seconds, as in etcd).
func newMetrics(extensive bool) *metrics {
	counter := func(sub, name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "etcd", Subsystem: sub, Name: name, Help: help})
	}
	hist := func(ns, sub, name, help string, buckets []float64) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: name, Help: help, Buckets: buckets})
	}
	exp := prometheus.ExponentialBuckets
	return &metrics{
		v2Reads: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "etcd_debugging", Subsystem: "store", Name: "reads_total",
			Help: "Total number of reads action by (get/getRecursive), local to this member."}, []string{"action"}),
		v2Writes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "etcd_debugging", Subsystem: "store", Name: "writes_total",
			Help: "Total number of writes (e.g. set/compareAndDelete) seen by this member."}, []string{"action"}),
		reg:   prometheus.NewRegistry(),
		wal:   wal.NewMetrics(),
		mvcc:  mvcc.NewMetrics(),
		lease: lease.NewMetrics(),
		raft:  raft.NewMetrics(),
		grpc:  newGRPCMetrics(extensive),

		proposalsPending: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "etcd", Subsystem: "server",
			Name: "proposals_pending", Help: "The current number of pending proposals to commit."}),
		proposalsFailed: counter("server", "proposals_failed_total", "The total number of failed proposals seen."),
		slowApply:       counter("server", "slow_apply_total", "The total number of slow apply requests (likely overloaded from slow disk)."),
		applyDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "etcd", Subsystem: "server",
			Name: "apply_duration_seconds", Help: "The latency distributions of v2 apply called by backend.",
			Buckets: exp(0.0001, 2, 20)}, []string{"version", "op", "success"}),
		requestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "etcd", Subsystem: "server",
			Name: "request_duration_seconds", Help: "Response latency distribution in seconds for each type.",
			Buckets: exp(0.001, 2, 14)}, []string{"type", "success"}),
		rangeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "etcd", Subsystem: "server",
			Name: "range_duration_seconds", Help: "The latency distributions of txn.Range",
			Buckets: exp(0.0001, 2, 20)}, []string{"success"}),

		backendCommit: hist("etcd", "disk", "backend_commit_duration_seconds",
			"The latency distributions of commit called by backend.", exp(0.001, 2, 14)),
		commitRebalance: hist("etcd_debugging", "disk", "backend_commit_rebalance_duration_seconds",
			"The latency distributions of commit.rebalance called by bboltdb backend.", exp(0.001, 2, 14)),
		commitSpill: hist("etcd_debugging", "disk", "backend_commit_spill_duration_seconds",
			"The latency distributions of commit.spill called by bboltdb backend.", exp(0.001, 2, 14)),
		commitWrite: hist("etcd_debugging", "disk", "backend_commit_write_duration_seconds",
			"The latency distributions of commit.write called by bboltdb backend.", exp(0.001, 2, 14)),
		backendSnapshot: hist("etcd", "disk", "backend_snapshot_duration_seconds",
			"The latency distribution of backend snapshots.", exp(.01, 2, 17)),

		leaseExpired: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "etcd_debugging", Subsystem: "server",
			Name: "lease_expired_total", Help: "The total number of expired leases."}),
		healthSuccess: counter("server", "health_success", "The total number of successful health checks"),
		healthFailed:  counter("server", "health_failures", "The total number of failed health checks"),
		healthCheck: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "etcd", Subsystem: "server",
			Name: "healthcheck", Help: "The result of each kind of healthcheck."}, []string{"type", "name"}),
		healthChecks: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "etcd", Subsystem: "server",
			Name: "healthchecks_total", Help: "The total number of each kind of healthcheck."}, []string{"type", "name", "status"}),

		promoteSucceeded: counter("server", "learner_promote_successes",
			"The total number of successful learner promotions while this member is leader."),
		promoteFailed: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "etcd", Subsystem: "server",
			Name: "learner_promote_failures",
			Help: "The total number of failed learner promotions (likely learner not ready) while this member is leader."},
			[]string{"Reason"}),

		watchSendStream: hist("etcd_debugging", "server", "watch_send_loop_watch_stream_duration_seconds",
			"The total duration in seconds of running through the send loop watch stream response all events.", exp(0.001, 2, 14)),
		watchSendPerEvent: hist("etcd_debugging", "server", "watch_send_loop_watch_stream_duration_per_event_seconds",
			"The average duration in seconds of running through the send loop watch stream response, per event.", exp(0.001, 2, 14)),
		watchSendControl: hist("etcd_debugging", "server", "watch_send_loop_control_stream_duration_seconds",
			"The total duration in seconds of running through the send loop control stream response.", exp(0.001, 2, 14)),
		streamFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "etcd", Subsystem: "network",
			Name: "server_stream_failures_total", Help: "The total number of stream failures from the local server."},
			[]string{"Type", "API"}),
	}
}

func (m *metrics) observeBackendCommit(d time.Duration) { m.backendCommit.Observe(d.Seconds()) }

// observeCommitPhases is the page store's OnCommit hook.
func (m *metrics) observeCommitPhases(c pagestore.CommitTimes) {
	m.commitRebalance.Observe(c.Rebalance.Seconds())
	m.commitSpill.Observe(c.Spill.Seconds())
	m.commitWrite.Observe(c.Write.Seconds())
}

// observeApply records one applied request: its op (etcd's names; ""
// for a request etcd does not name, which it reports as "unknown") and
// whether it succeeded as etcd counts success (a compacted revision is
// not a failure of the apply).
func (m *metrics) observeApply(op string, err error, d, slow time.Duration) {
	if op == "" {
		op = "unknown"
	}
	ok := err == nil || errors.Is(err, mvcc.ErrCompacted)
	// etcd truncates to whole microseconds.
	secs := float64(d.Microseconds()) / 1e6
	if i := hotRequestType(op); i >= 0 {
		p := &m.applySeries[i][successIndex(ok)]
		o := p.Load()
		if o == nil {
			o = keepSeries(p, m.applyDuration.WithLabelValues("v3", op, strconv.FormatBool(ok)))
		}
		(*o).Observe(secs)
	} else {
		m.applyDuration.WithLabelValues("v3", op, strconv.FormatBool(ok)).Observe(secs)
	}
	if d > slow {
		m.slowApply.Inc()
	}
}

// hotRequestTypes are the request types whose request_duration series
// are cached (metrics.reqSeries).
var hotRequestTypes = [...]string{"Range", "Put", "Txn", "DeleteRange", "ReadonlyTxn"}

func hotRequestType(typ string) int {
	for i, h := range hotRequestTypes {
		if typ == h {
			return i
		}
	}
	return -1
}

// keepSeries keeps o in p and returns it. The callers load p first and
// call this only when it is empty: building o's labels costs what the
// cache saves.
func keepSeries(p *atomic.Pointer[prometheus.Observer], o prometheus.Observer) *prometheus.Observer {
	p.Store(&o)
	return &o
}

func successIndex(ok bool) int {
	if ok {
		return 1
	}
	return 0
}

// observeRequest records a request's latency by type (etcd's
// request_duration_seconds).
func (m *metrics) observeRequest(typ string, ok bool, d time.Duration) {
	i := hotRequestType(typ)
	if i < 0 {
		m.requestDuration.WithLabelValues(typ, strconv.FormatBool(ok)).Observe(d.Seconds())
		return
	}
	p := &m.reqSeries[i][successIndex(ok)]
	o := p.Load()
	if o == nil {
		o = keepSeries(p, m.requestDuration.WithLabelValues(typ, strconv.FormatBool(ok)))
	}
	(*o).Observe(d.Seconds())
}

// observeRange records the store's part of a Range request (etcd's
// range_duration_seconds), truncated to whole microseconds as etcd does.
func (m *metrics) observeRange(ok bool, d time.Duration) {
	p := &m.rangeSeries[successIndex(ok)]
	o := p.Load()
	if o == nil {
		o = keepSeries(p, m.rangeDuration.WithLabelValues(strconv.FormatBool(ok)))
	}
	(*o).Observe(float64(d.Microseconds()) / 1e6)
}

// requestType is etcd's name for a raft request's type.
func requestType(r *pb.InternalRaftRequest) string {
	switch {
	case r.Range != nil:
		return "Range"
	case r.Put != nil:
		return "Put"
	case r.DeleteRange != nil:
		return "DeleteRange"
	case r.Txn != nil:
		return "Txn"
	case r.Compaction != nil:
		return "Compaction"
	case r.LeaseGrant != nil:
		return "LeaseGrant"
	case r.LeaseRevoke != nil:
		return "LeaseRevoke"
	case r.LeaseCheckpoint != nil:
		return "LeaseCheckpoint"
	case r.Alarm != nil:
		return "Alarm"
	case r.Authenticate != nil:
		return "Authenticate"
	case r.AuthEnable != nil:
		return "AuthEnable"
	case r.AuthDisable != nil:
		return "AuthDisable"
	case r.AuthStatus != nil:
		return "AuthStatus"
	case r.AuthUserAdd != nil:
		return "AuthUserAdd"
	case r.AuthUserDelete != nil:
		return "AuthUserDelete"
	case r.AuthUserChangePassword != nil:
		return "AuthUserChangePassword"
	case r.AuthUserGrantRole != nil:
		return "AuthUserGrantRole"
	case r.AuthUserGet != nil:
		return "AuthUserGet"
	case r.AuthUserRevokeRole != nil:
		return "AuthUserRevokeRole"
	case r.AuthRoleAdd != nil:
		return "AuthRoleAdd"
	case r.AuthRoleGrantPermission != nil:
		return "AuthRoleGrantPermission"
	case r.AuthRoleGet != nil:
		return "AuthRoleGet"
	case r.AuthRoleRevokePermission != nil:
		return "AuthRoleRevokePermission"
	case r.AuthRoleDelete != nil:
		return "AuthRoleDelete"
	case r.AuthUserList != nil:
		return "AuthUserList"
	case r.AuthRoleList != nil:
		return "AuthRoleList"
	case r.ClusterVersionSet != nil:
		return "ClusterVersionSet"
	case r.ClusterMemberAttrSet != nil:
		return "ClusterMemberAttrSet"
	case r.DowngradeInfoSet != nil:
		return "DowngradeInfoSet"
	case r.DowngradeVersionTest != nil:
		return "DowngradeVersionTest"
	}
	return "Unknown"
}

// applyOp is the op label etcd's applier gives a request: its request
// type, except that etcd leaves AuthStatus unnamed.
func applyOp(r *pb.InternalRaftRequest) string {
	if r.AuthStatus != nil {
		return ""
	}
	return requestType(r)
}

// observeWatchSend records how long a watch send loop took to send one
// of the store's responses: a created or canceled response is a control
// response; one with events (also timed per event), a progress
// notification or a compaction notice is a watch stream response.
func (m *metrics) observeWatchSend(r mvcc.WatchResponse, d time.Duration) {
	if r.Created || r.Canceled && r.CompactRevision == 0 {
		m.watchSendControl.Observe(d.Seconds())
		return
	}
	m.watchSendStream.Observe(d.Seconds())
	if n := len(r.Events); n > 0 {
		// etcd divides by the event count even when it is 0; a response
		// without events has no per-event time, so none is recorded.
		m.watchSendPerEvent.Observe(d.Seconds() / float64(n))
	}
}

// observeHealthCheck records one /livez or /readyz check.
func (m *metrics) observeHealthCheck(kind, name string, err error) {
	v, status := 1.0, "success"
	if err != nil {
		v, status = 0, "error"
	}
	m.healthCheck.WithLabelValues(kind, name).Set(v)
	m.healthChecks.WithLabelValues(kind, name, status).Inc()
}

// streamFailed counts a watch or keep-alive stream that failed to
// receive or send (dir "receive" or "send"; api "watch" or
// "lease-keepalive"), unless the failure is the client going away, which
// etcd does not count: its context is done, or the error is a
// cancellation, a deadline, or a disconnected client.
func (m *metrics) streamFailed(dir, api string, ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	if st, ok := status.FromError(err); ok {
		switch st.Code() {
		case codes.Canceled, codes.DeadlineExceeded:
			return
		case codes.Unavailable:
			if msg := st.Message(); msg == "client disconnected" ||
				strings.HasPrefix(msg, "stream error: ") && strings.HasSuffix(msg, "; CANCEL") {
				return
			}
		}
	}
	m.streamFailures.WithLabelValues(dir, api).Inc()
}

// register adds every instrument, including the gauges computed from the
// server's state at scrape time, to the registry, and builds the handler.
func (m *metrics) register(s *Server) {
	cs := []prometheus.Collector{
		m.proposalsPending, m.proposalsFailed, m.slowApply, m.applyDuration, m.requestDuration, m.rangeDuration,
		m.backendCommit, m.commitRebalance, m.commitSpill, m.commitWrite, m.backendSnapshot,
		m.leaseExpired, m.healthSuccess, m.healthFailed, m.healthCheck, m.healthChecks,
		m.promoteSucceeded, m.promoteFailed,
		m.watchSendStream, m.watchSendPerEvent, m.watchSendControl, m.streamFailures,
		// What etcd's default registry holds: the process and Go runtime
		// collectors.
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewGoCollector(),
	}
	cs = append(cs, m.grpc.collectors()...)
	cs = append(cs, m.wal.Collectors()...)
	cs = append(cs, m.mvcc.Collectors()...)
	cs = append(cs, m.lease.Collectors()...)
	cs = append(cs, m.raft.Collectors()...)
	cs = append(cs, s.peers.tr.Collectors()...)
	cs = append(cs, stateCollectors(s)...)
	cs = append(cs, m.v2Reads, m.v2Writes)
	cs = append(cs, etcdOnlyCollectors()...)
	cs = append(cs, s.disk.collectors()...)
	cs = append(cs, s.diskFull.collectors()...)
	for _, c := range cs {
		m.reg.MustRegister(c)
	}
	m.handler = promhttp.InstrumentMetricHandler(m.reg, promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
}
