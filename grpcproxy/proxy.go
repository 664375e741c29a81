// Package grpcproxy is `strata grpc-proxy start`: etcd's stateless gRPC
// proxy in front of a cluster, with etcd's flags and behaviour.
//
// Every client RPC is forwarded to one upstream member over one gRPC
// connection, as raw protobuf frames with the caller's metadata (auth
// token, leader requirement), so each service behaves exactly as the
// member does, streaming ones included. Four things are the proxy's
// own:
//
//   - Watch coalescing (watch.go): watchers of the same range that start
//     at the current revision, from any client, share one upstream watch,
//     whose events the proxy fans out.
//   - Lease keep-alive coalescing (lease.go): the keep-alive streams of
//     all clients with the same credentials share one upstream stream,
//     and concurrent keep-alives of one lease become one request.
//   - Cluster.MemberList (cluster.go) lists the proxies, as etcd's does:
//     those registered under --resolver-prefix, or this one.
//   - Endpoints: the upstream connection picks the first endpoint that
//     answers and fails over to the next when it dies;
//     --endpoints-auto-sync-interval replaces the list with the members'
//     client URLs from MemberList.
//
// HTTP on the same port: /proxy/health, /health, /metrics and, with
// --enable-pprof, /debug/pprof.
package grpcproxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/h2c"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"
)

// Config is the proxy's configuration, from etcd's grpc-proxy flags.
type Config struct {
	Endpoints            []string // host:port or URLs
	AutoSyncInterval     time.Duration
	ListenAddr           string
	AdvertiseClientURL   string
	ResolverPrefix       string
	ResolverTTL          int
	Namespace            string
	EnablePprof          bool
	MetricsAddr          string
	MaxSendBytes         int
	MaxRecvBytes         int
	DialKeepAliveTime    time.Duration
	DialKeepAliveTimeout time.Duration
	PermitWithoutStream  bool
	// SerializableOrdering (--experimental-serializable-ordering): a
	// serializable range never answers from a revision older than one
	// this proxy already returned; one that would is answered by a
	// linearizable read instead.
	SerializableOrdering bool
	// LogRequests (--experimental-enable-grpc-logging) logs every call
	// with its method, duration and outcome.
	LogRequests bool
	// MaxConcurrentStreams bounds the streams of one client connection
	// (--max-concurrent-streams).
	MaxConcurrentStreams uint32
	// KeepAliveInterval and KeepAliveTimeout (--grpc-keepalive-interval,
	// --grpc-keepalive-timeout): a client connection idle that long is
	// pinged, and closed when the ping is not answered in time.
	KeepAliveInterval, KeepAliveTimeout time.Duration
	// ClientTLS is for the connection to the members (--cert, --key,
	// --cacert, --insecure-skip-tls-verify); nil is plaintext.
	ClientTLS *tls.Config
	// ServerTLS is for clients of the proxy (--cert-file, --key-file,
	// --trusted-ca-file, --auto-tls); nil is plaintext.
	ServerTLS *tls.Config
	Logger    *slog.Logger
}

// Proxy is a running grpc-proxy.
type Proxy struct {
	cfg      Config
	lg       *slog.Logger
	res      *manual.Resolver
	cc       *grpc.ClientConn
	srv      *grpc.Server
	http     *http.Server
	metrics  *http.Server
	reg      *prometheus.Registry
	m        *metrics
	h2       *http2.Server
	lastRev  atomic.Int64 // the highest revision a range returned (ordering)
	ns       *namespace   // --namespace, or nil
	cache    *rangeCache
	kvm      *kvMetrics
	watch    *watchProxy
	leases   *leaseProxy
	cluster  *clusterProxy
	mu       sync.Mutex
	eps      []string
	stopc    chan struct{}
	stopOnce sync.Once
	bg       sync.WaitGroup
}

type metrics struct {
	watchersCoalescing prometheus.Gauge
	eventsCoalescing   prometheus.Counter
	upstreamWatches    prometheus.Gauge
}

// New connects to the members and prepares the servers.
func New(cfg Config) (*Proxy, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("grpc-proxy: no endpoints")
	}
	p := &Proxy{cfg: cfg, lg: cfg.Logger, stopc: make(chan struct{}), reg: prometheus.NewRegistry()}
	p.m = &metrics{
		watchersCoalescing: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "etcd", Subsystem: "grpc_proxy",
			Name: "watchers_coalescing_total", Help: "Total number of current watchers coalescing"}),
		eventsCoalescing: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "etcd", Subsystem: "grpc_proxy",
			Name: "events_coalescing_total", Help: "Total number of events coalescing"}),
		upstreamWatches: prometheus.NewGauge(prometheus.GaugeOpts{Name: "strata_grpc_proxy_upstream_watches",
			Help: "Watches the proxy holds open on the members (one per group of coalesced watchers, one per other watcher)."}),
	}
	p.reg.MustRegister(p.m.watchersCoalescing, p.m.eventsCoalescing, p.m.upstreamWatches,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))

	p.cache, p.kvm = newRangeCache(), newKVMetrics(p.reg)
	if cfg.Namespace != "" {
		p.ns = &namespace{pfx: []byte(cfg.Namespace)}
	}
	p.res = manual.NewBuilderWithScheme("strata-proxy")
	p.eps = hostPorts(cfg.Endpoints)
	p.res.InitialState(resolver.State{Endpoints: endpointsOf(p.eps)})
	creds := insecure.NewCredentials()
	if cfg.ClientTLS != nil {
		creds = credentials.NewTLS(cfg.ClientTLS)
	}
	opts := []grpc.DialOption{
		grpc.WithResolvers(p.res),
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"pick_first":{}}]}`),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(cfg.MaxSendBytes), grpc.MaxCallRecvMsgSize(cfg.MaxRecvBytes)),
	}
	if cfg.DialKeepAliveTime > 0 {
		opts = append(opts, grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: cfg.DialKeepAliveTime,
			Timeout: cfg.DialKeepAliveTimeout, PermitWithoutStream: cfg.PermitWithoutStream}))
	}
	cc, err := grpc.NewClient(p.res.Scheme()+":///members", opts...)
	if err != nil {
		return nil, fmt.Errorf("grpc-proxy: %w", err)
	}
	p.cc = cc
	p.watch = newWatchProxy(p)
	p.leases = newLeaseProxy(p)
	p.cluster = newClusterProxy(p)

	sopts := []grpc.ServerOption{
		grpc.ForceServerCodecV2(rawCodec{}),
		grpc.UnknownServiceHandler(p.forward),
		grpc.MaxRecvMsgSize(cfg.MaxRecvBytes),
		grpc.MaxSendMsgSize(cfg.MaxSendBytes),
	}
	p.srv = grpc.NewServer(sopts...)
	pb.RegisterWatchServer(p.srv, p.watch)
	pb.RegisterClusterServer(p.srv, p.cluster)

	mux := http.NewServeMux()
	mux.HandleFunc("/proxy/health", p.proxyHealth)
	mux.HandleFunc("/health", p.memberHealth)
	mux.Handle("/metrics", promhttp.HandlerFor(p.reg, promhttp.HandlerOpts{}))
	if cfg.EnablePprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	both := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			p.srv.ServeHTTP(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
	h2 := &http2.Server{MaxConcurrentStreams: cfg.MaxConcurrentStreams,
		ReadIdleTimeout: cfg.KeepAliveInterval, PingTimeout: cfg.KeepAliveTimeout}
	p.h2 = h2
	h := http.Handler(both)
	if cfg.ServerTLS == nil {
		h = h2c.NewHandler(both, h2)
	}
	p.http = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, TLSConfig: cfg.ServerTLS}
	if cfg.MetricsAddr != "" {
		mm := http.NewServeMux()
		mm.Handle("/metrics", promhttp.HandlerFor(p.reg, promhttp.HandlerOpts{}))
		mm.HandleFunc("/proxy/health", p.proxyHealth)
		p.metrics = &http.Server{Handler: mm, ReadHeaderTimeout: 10 * time.Second}
	}
	return p, nil
}

// Serve serves clients on l (and the metrics address) until Stop.
func (p *Proxy) Serve(l net.Listener) error {
	if p.cfg.AutoSyncInterval > 0 {
		p.bg.Add(1)
		go func() { defer p.bg.Done(); p.autoSync() }()
	}
	if p.cfg.ResolverPrefix != "" {
		p.bg.Add(1)
		go func() { defer p.bg.Done(); p.register() }()
	}
	if p.metrics != nil {
		ml, err := net.Listen("tcp", strings.TrimPrefix(strings.TrimPrefix(p.cfg.MetricsAddr, "http://"), "https://"))
		if err != nil {
			return fmt.Errorf("grpc-proxy: metrics listener: %w", err)
		}
		go p.metrics.Serve(ml)
	}
	p.lg.Info("started gRPC proxy", "address", l.Addr().String())
	var err error
	if p.cfg.ServerTLS != nil {
		if err := http2.ConfigureServer(p.http, p.h2); err != nil {
			return err
		}
		err = p.http.Serve(tls.NewListener(l, p.http.TLSConfig))
	} else {
		err = p.http.Serve(l)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Stop stops serving and closes the upstream connection.
func (p *Proxy) Stop() {
	p.stopOnce.Do(func() {
		close(p.stopc)
		p.watch.stop()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = p.http.Shutdown(ctx)
		cancel()
		p.http.Close()
		if p.metrics != nil {
			p.metrics.Close()
		}
		p.srv.Stop()
		p.bg.Wait()
		p.cc.Close()
	})
}

// outgoing is the context for an upstream call made for a client's call:
// the client's metadata (its auth token, its leader requirement) goes
// with it, without the transport's own headers.
func outgoing(ctx context.Context) context.Context {
	md, _ := metadata.FromIncomingContext(ctx)
	out := metadata.MD{}
	for k, v := range md {
		if strings.HasPrefix(k, ":") || strings.HasPrefix(k, "grpc-") || k == "content-type" || k == "user-agent" || k == "te" {
			continue
		}
		out[k] = slices.Clone(v)
	}
	return metadata.NewOutgoingContext(ctx, out)
}

// frame is a message the proxy passes through undecoded.
type frame struct{ b []byte }

// rawCodec passes frames through as they are and encodes everything else
// as protobuf (the services the proxy implements itself).
type rawCodec struct{}

func (rawCodec) proto() encoding.CodecV2 { return encoding.GetCodecV2("proto") }

func (c rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	if f, ok := v.(*frame); ok {
		return mem.BufferSlice{mem.SliceBuffer(f.b)}, nil
	}
	return c.proto().Marshal(v)
}

func (c rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if f, ok := v.(*frame); ok {
		f.b = data.Materialize()
		return nil
	}
	return c.proto().Unmarshal(data, v)
}

func (rawCodec) Name() string { return "proto" }

var streamBoth = &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}

// forward carries one client call of any method the proxy does not
// implement to the upstream member, frame by frame both ways, with its
// metadata, headers, trailers and final status.
func (p *Proxy) forward(_ any, ss grpc.ServerStream) (err error) {
	method, ok := grpc.MethodFromServerStream(ss)
	if !ok {
		return errors.New("grpc-proxy: no method")
	}
	if p.cfg.LogRequests {
		start := time.Now()
		defer func() {
			p.lg.Info("grpc request", "method", method, "took", time.Since(start).String(), "code", status.Code(err).String())
		}()
	}
	if method == "/etcdserverpb.KV/RangeStream" {
		// etcd's proxy serves KV through its cache and does not stream.
		return status.Error(codes.Unimplemented, "RangeStream is not supported by the gRPC proxy")
	}
	if kvMethods[method] {
		return p.forwardKV(ss, method)
	}
	if method == "/etcdserverpb.Lease/LeaseKeepAlive" {
		return p.leases.keepAlive(ss)
	}
	if p.ns != nil {
		if rw, ok := nsMethods[method]; ok {
			return p.forwardNamespaced(ss, method, rw)
		}
	}
	ctx, cancel := context.WithCancel(outgoing(ss.Context()))
	defer cancel()
	cs, err := p.cc.NewStream(ctx, streamBoth, method, grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		return err
	}
	go func() {
		for {
			f := &frame{}
			if err := ss.RecvMsg(f); err != nil {
				if errors.Is(err, io.EOF) {
					_ = cs.CloseSend()
				} else {
					cancel()
				}
				return
			}
			if err := cs.SendMsg(f); err != nil {
				return // RecvMsg below reports the status
			}
		}
	}()
	sentHeader := false
	for {
		f := &frame{}
		err := cs.RecvMsg(f)
		if !sentHeader {
			if md, herr := cs.Header(); herr == nil && len(md) > 0 {
				_ = ss.SendHeader(md)
			}
			sentHeader = true
		}
		if err != nil {
			ss.SetTrailer(cs.Trailer())
			if errors.Is(err, io.EOF) {
				return nil
			}
			return asEtcdProxyError(method, err)
		}
		if err := ss.SendMsg(f); err != nil {
			return err
		}
	}
}

// hostPorts turns --endpoints (host:port or URLs) into host:port.
func hostPorts(eps []string) []string {
	var out []string
	for _, e := range eps {
		e = strings.TrimSpace(e)
		if i := strings.Index(e, "://"); i >= 0 {
			e = e[i+3:]
		}
		if e != "" && !slices.Contains(out, e) {
			out = append(out, e)
		}
	}
	return out
}

func endpointsOf(eps []string) []resolver.Endpoint {
	out := make([]resolver.Endpoint, len(eps))
	for i, e := range eps {
		out[i] = resolver.Endpoint{Addresses: []resolver.Address{{Addr: e}}}
	}
	return out
}

// autoSync replaces the endpoints with the members' client URLs every
// --endpoints-auto-sync-interval.
func (p *Proxy) autoSync() {
	t := time.NewTicker(p.cfg.AutoSyncInterval)
	defer t.Stop()
	for {
		select {
		case <-p.stopc:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := pb.NewClusterClient(p.cc).MemberList(ctx, &pb.MemberListRequest{Linearizable: true})
		cancel()
		if err != nil {
			p.lg.Warn("failed to sync endpoints", "error", err)
			continue
		}
		var urls []string
		for _, m := range resp.Members {
			if !m.IsLearner {
				urls = append(urls, m.ClientURLs...)
			}
		}
		eps := hostPorts(urls)
		if len(eps) == 0 {
			continue
		}
		p.mu.Lock()
		same := slices.Equal(eps, p.eps)
		p.eps = eps
		p.mu.Unlock()
		if !same {
			p.lg.Info("synced endpoints from the members", "endpoints", strings.Join(urls, ","))
			p.res.UpdateState(resolver.State{Endpoints: endpointsOf(eps)})
		}
	}
}

// proxyHealth is /proxy/health: the proxy can reach a member.
func (p *Proxy) proxyHealth(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	_, err := pb.NewMaintenanceClient(p.cc).Status(ctx, &pb.StatusRequest{})
	writeHealth(w, err)
}

// memberHealth is /health: a member answers a linearizable read
// through the proxy, as etcd's /health checks.
func (p *Proxy) memberHealth(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	_, err := pb.NewKVClient(p.cc).Range(ctx, &pb.RangeRequest{Key: []byte("health")})
	if err != nil && strings.Contains(err.Error(), "permission denied") {
		err = nil // auth is on: the member answered
	}
	writeHealth(w, err)
}

func writeHealth(w http.ResponseWriter, err error) {
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, `{"health":"false","reason":%q}`, err.Error())
		return
	}
	fmt.Fprint(w, `{"health":"true","reason":""}`)
}

// viaClientv3 are the methods etcd's proxy serves through clientv3 (KV,
// and the lessor's revoke, time-to-live and list), which turns a known
// etcd error into a plain error: its clients get the same message with
// code Unknown. The others it forwards on a raw connection, codes kept.
var viaClientv3 = map[string]bool{
	"/etcdserverpb.KV/Range": true, "/etcdserverpb.KV/Put": true, "/etcdserverpb.KV/DeleteRange": true,
	"/etcdserverpb.KV/Txn": true, "/etcdserverpb.KV/Compact": true,
	"/etcdserverpb.Lease/LeaseRevoke": true, "/etcdserverpb.Lease/LeaseTimeToLive": true,
	"/etcdserverpb.Lease/LeaseLeases": true,
}

// asEtcdProxyError is err as etcd's proxy returns it for method.
func asEtcdProxyError(method string, err error) error {
	if !viaClientv3[method] {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	if _, known := rpctypes.Error(err).(rpctypes.EtcdError); known {
		return status.Error(codes.Unknown, st.Message())
	}
	return err
}
