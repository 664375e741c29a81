package server

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// grpcMetrics are the gRPC server metrics etcd exports through
// go-grpc-middleware's prometheus provider (which Strata does not
// depend on), with the same names, labels and counting rules:
//
//   - started_total when a call reaches the server, handled_total with
//     its status code when the handler returns (a context error counts
//     as its code, Canceled or DeadlineExceeded);
//   - msg_received_total and msg_sent_total: for a unary call one each,
//     also when the call fails; for a stream every RecvMsg and SendMsg
//     the handler makes, whatever they return (the RecvMsg that sees the
//     client's end of stream counts too);
//   - handling_seconds (only with --metrics=extensive): the call's
//     duration, by method;
//   - every label combination of the services etcd registers before it
//     initializes them (KV, Watch, Lease, Cluster, Auth, Maintenance and
//     gRPC health; not Lock and Election) exists from the start, at 0.
//
// Also etcd's own: etcd_server_client_requests_total by call type and the
// client-api-version metadata clientv3 sends, and the payload bytes
// received from and sent to clients.
type grpcMetrics struct {
	started, handled, received, sent *prometheus.CounterVec
	handling                         *prometheus.HistogramVec // nil unless extensive
	clientRequests                   *prometheus.CounterVec
	sentBytes, receivedBytes         prometheus.Counter

	// methods caches each method's counters, so a call does not hash its
	// labels; keyed by full method name. Entries are never removed.
	methods sync.Map // string -> *methodMetrics
	// byVersion caches, for unary calls (0) and streams (1), the
	// client_requests_total series of the client API version last seen:
	// clients of one version, the usual case, do not hash their labels.
	byVersion [2]atomic.Pointer[versionSeries]
}

type versionSeries struct {
	ver string
	c   prometheus.Counter
}

// methodMetrics are one method's series.
type methodMetrics struct {
	started, received, sent prometheus.Counter
	handling                prometheus.Observer // nil unless extensive
	handled                 [codes.Unauthenticated + 1]prometheus.Counter
	labels                  [3]string // grpc_type, grpc_service, grpc_method
	handledVec              *prometheus.CounterVec
}

func newGRPCMetrics(extensive bool) *grpcMetrics {
	lbl := []string{"grpc_type", "grpc_service", "grpc_method"}
	g := &grpcMetrics{
		started: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "grpc_server_started_total",
			Help: "Total number of RPCs started on the server."}, lbl),
		handled: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "grpc_server_handled_total",
			Help: "Total number of RPCs completed on the server, regardless of success or failure."},
			append(lbl[:3:3], "grpc_code")),
		received: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "grpc_server_msg_received_total",
			Help: "Total number of RPC stream messages received on the server."}, lbl),
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "grpc_server_msg_sent_total",
			Help: "Total number of gRPC stream messages sent by the server."}, lbl),
		clientRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "etcd", Subsystem: "server",
			Name: "client_requests_total", Help: "The total number of client requests per client version."},
			[]string{"type", "client_api_version"}),
		sentBytes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "etcd", Subsystem: "network",
			Name: "client_grpc_sent_bytes_total", Help: "The total number of bytes sent to grpc clients."}),
		receivedBytes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "etcd", Subsystem: "network",
			Name: "client_grpc_received_bytes_total", Help: "The total number of bytes received from grpc clients."}),
	}
	if extensive {
		g.handling = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "grpc_server_handling_seconds",
			Help:    "Histogram of response latency (seconds) of gRPC that had been application-level handled by the server.",
			Buckets: prometheus.DefBuckets}, lbl)
	}
	return g
}

func (g *grpcMetrics) collectors() []prometheus.Collector {
	cs := []prometheus.Collector{g.started, g.handled, g.received, g.sent, g.clientRequests, g.sentBytes, g.receivedBytes}
	if g.handling != nil {
		cs = append(cs, g.handling)
	}
	return cs
}

// method returns (creating the series if needed) the metrics of one
// method; typ is etcd's grpc_type.
func (g *grpcMetrics) method(full, typ string) *methodMetrics {
	if mm, ok := g.methods.Load(full); ok {
		return mm.(*methodMetrics)
	}
	svc, name := splitMethod(full)
	mm := &methodMetrics{
		started: g.started.WithLabelValues(typ, svc, name), received: g.received.WithLabelValues(typ, svc, name),
		sent: g.sent.WithLabelValues(typ, svc, name), labels: [3]string{typ, svc, name}, handledVec: g.handled,
	}
	if g.handling != nil {
		mm.handling = g.handling.WithLabelValues(typ, svc, name)
	}
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		mm.handled[c] = g.handled.WithLabelValues(typ, svc, name, c.String())
	}
	actual, _ := g.methods.LoadOrStore(full, mm)
	return actual.(*methodMetrics)
}

// done records the end of a call.
func (mm *methodMetrics) done(err error, start time.Time) {
	code := errCode(err)
	if int(code) < len(mm.handled) {
		mm.handled[code].Inc()
	} else {
		mm.handledVec.WithLabelValues(mm.labels[0], mm.labels[1], mm.labels[2], code.String()).Inc()
	}
	if mm.handling != nil {
		mm.handling.Observe(time.Since(start).Seconds())
	}
}

// errCode is the status code a handler's error reports, context errors
// included (as the gRPC server itself maps them).
func errCode(err error) codes.Code {
	if st, ok := status.FromError(err); ok {
		return st.Code()
	}
	return status.FromContextError(err).Code()
}

// preinit creates every series of the given services at 0, as etcd's
// InitializeMetrics does for the services registered before it.
func (g *grpcMetrics) preinit(services map[string]grpc.ServiceInfo) {
	for svc, info := range services {
		for _, m := range info.Methods {
			typ := "unary"
			switch {
			case m.IsClientStream && m.IsServerStream:
				typ = "bidi_stream"
			case m.IsClientStream:
				typ = "client_stream"
			case m.IsServerStream:
				typ = "server_stream"
			}
			g.method("/"+svc+"/"+m.Name, typ)
		}
	}
}

// splitMethod splits "/etcdserverpb.KV/Range" into service and method.
func splitMethod(full string) (string, string) {
	full = strings.TrimPrefix(full, "/")
	if i := strings.Index(full, "/"); i >= 0 {
		return full[:i], full[i+1:]
	}
	return "unknown", "unknown"
}

// countClient counts a call by the client API version it declares, as
// etcd does; a version that is not UTF-8 is refused with etcd's error.
func (g *grpcMetrics) countClient(ctx context.Context, typ string) error {
	// Not FromIncomingContext: that copies every header of every call.
	// Every call over gRPC has incoming metadata (its pseudo-headers).
	ver := "unknown"
	if vs := metadata.ValueFromIncomingContext(ctx, rpctypes.MetadataClientAPIVersionKey); len(vs) > 0 {
		ver = vs[0]
	}
	if !utf8.ValidString(ver) {
		return rpctypes.ErrGRPCInvalidClientAPIVersion
	}
	i := 0
	if typ != "unary" {
		i = 1
	}
	if vs := g.byVersion[i].Load(); vs != nil && vs.ver == ver {
		vs.c.Inc()
		return nil
	}
	vs := &versionSeries{ver: ver, c: g.clientRequests.WithLabelValues(typ, ver)}
	g.byVersion[i].Store(vs)
	vs.c.Inc()
	return nil
}

func (g *grpcMetrics) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	start := time.Now()
	typ := "bidi_stream"
	switch {
	case info.IsClientStream && !info.IsServerStream:
		typ = "client_stream"
	case !info.IsClientStream && info.IsServerStream:
		typ = "server_stream"
	}
	mm := g.method(info.FullMethod, typ)
	mm.started.Inc()
	err := g.countClient(ss.Context(), "stream")
	if err == nil {
		err = h(srv, &countedStream{ServerStream: ss, mm: mm})
	}
	mm.done(err, start)
	return err
}

// countedStream counts a stream's messages.
type countedStream struct {
	grpc.ServerStream
	mm *methodMetrics
}

func (s *countedStream) SendMsg(m any) error {
	err := s.ServerStream.SendMsg(m)
	s.mm.sent.Inc()
	return err
}

func (s *countedStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	s.mm.received.Inc()
	return err
}
