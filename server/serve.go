package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/strata-db/strata/server/v3electionpb"
	"github.com/strata-db/strata/server/v3lockpb"
)

// grpcOverheadBytes is the allowance gRPC framing gets on top of
// --max-request-bytes, as in etcd.
const grpcOverheadBytes = 512 * 1024

// Serve opens the client and metrics listeners and serves until Stop. It
// returns once every listener is accepting; the "ready to serve client
// requests" line is logged when the member can serve.
func (s *Server) Serve() error {
	opts := append(clientTransportOptions(s.cfg.MaxRequestBytes, s.cfg.MaxConcurrentStreams,
		wireCodec{sent: s.metrics.grpc.sentBytes, received: s.metrics.grpc.receivedBytes}),
		grpc.UnaryInterceptor(s.unaryInterceptor),
		grpc.ChainStreamInterceptor(s.metrics.grpc.streamInterceptor, s.learnerStream, s.authStream),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: s.cfg.GRPCKeepAliveMinTime, PermitWithoutStream: false}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: s.cfg.GRPCKeepAliveInterval, Timeout: s.cfg.GRPCKeepAliveTimeout}),
	)
	var clientTLS *tls.Config
	if needsTLS(s.cfg.ListenClientURLs) || needsTLS(s.cfg.ListenClientHTTPURLs) {
		var err error
		if clientTLS, err = s.cfg.ClientTLS(); err != nil {
			return err
		}
		// gRPC clients require ALPN to select h2; HTTP/1.1 clients
		// (curl, the gateway's users) negotiate http/1.1.
		clientTLS = clientTLS.Clone()
		clientTLS.NextProtos = []string{"h2", "http/1.1"}
		// TLS is terminated by the mux listener; gRPC sees the state
		// through the connection for peer authentication.
		opts = append(opts, grpc.Creds(handshakeDone{}))
	}
	s.grpc = grpc.NewServer(opts...)
	pb.RegisterKVServer(s.grpc, &kvServer{s: s, wire: true, chunks: newChunkPool(2 * int(s.cfg.MaxRequestBytes))})
	pb.RegisterMaintenanceServer(s.grpc, &maintenanceServer{s: s})
	pb.RegisterClusterServer(s.grpc, &clusterServer{s: s})
	pb.RegisterLeaseServer(s.grpc, &leaseServer{s: s})
	pb.RegisterAuthServer(s.grpc, &authServer{s: s})
	pb.RegisterWatchServer(s.grpc, &watchServer{s: s})
	s.health = health.NewServer()
	s.startServing()
	healthpb.RegisterHealthServer(s.grpc, s.health)
	// etcd creates the gRPC metrics' series of the services registered
	// so far, and registers Lock and Election after.
	s.metrics.grpc.preinit(s.grpc.GetServiceInfo())
	v3lockpb.RegisterLockServer(s.grpc, &lockServer{s: s})
	v3electionpb.RegisterElectionServer(s.grpc, &electionServer{s: s})

	if err := s.corruptChecksAtStart(); err != nil {
		return err
	}
	if err := s.serveClients(clientTLS); err != nil {
		s.stopListeners()
		return err
	}
	for _, u := range s.cfg.ListenMetricsURLs {
		l, err := listen(u)
		if err != nil {
			s.stopListeners()
			return fmt.Errorf("listen on metrics url %s: %w", u.String(), err)
		}
		s.listeners = append(s.listeners, l)
		if u.Scheme == "https" {
			l = tls.NewListener(l, clientTLS)
		}
		hsrv := &http.Server{Handler: s.httpHandler(false, nil), ReadHeaderTimeout: 10 * time.Second}
		s.httpSrv = append(s.httpSrv, hsrv)
		go hsrv.Serve(l)
		s.lg.Info("serving metrics", "address", u.String())
	}
	s.bg.Add(8)
	go func() { defer s.bg.Done(); s.runVersionMonitor(s.leading) }()
	go func() { defer s.bg.Done(); s.runDowngradeMonitor() }()
	go func() { defer s.bg.Done(); s.runCorruptCheck() }()
	go func() { defer s.bg.Done(); s.runCompactHashCheck() }()
	go func() { defer s.bg.Done(); s.runIdleTrim() }()
	go func() { defer s.bg.Done(); s.runLeases() }()
	go func() { defer s.bg.Done(); s.runAutoCompaction() }()
	go func() { defer s.bg.Done(); s.diskFull.run() }()
	go s.watchNode()
	go func() {
		s.waitReady()
		select {
		case <-s.readyc:
			s.lg.Info("ready to serve client requests")
			if err := sdNotify("READY=1"); err != nil {
				s.lg.Warn("failed to notify systemd for readiness", "error", err)
			}
		default:
		}
	}()
	return nil
}

// clientTransportOptions are the client API's gRPC transport and codec
// options: what every request pays in gRPC before and after a handler.
// The floor server (floor.go) runs on the same ones.
func clientTransportOptions(maxRequestBytes uint, maxConcurrentStreams uint32, codec wireCodec) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(int(maxRequestBytes) + grpcOverheadBytes),
		grpc.MaxSendMsgSize(math.MaxInt32),
		grpc.MaxConcurrentStreams(maxStreams(maxConcurrentStreams)),
		// Fixed flow-control windows, which also turn off gRPC's
		// bandwidth-delay probe: with it, the member answers requests
		// with PINGs that both sides then write, read and acknowledge
		// (about 1 us of CPU per 1-key read on each side at 1000
		// clients). A request is at most --max-request-bytes plus
		// framing; 1 MiB per stream and 8 MiB per connection keep a
		// LAN's client streams from waiting on window updates.
		grpc.InitialWindowSize(1 << 20), grpc.InitialConnWindowSize(1 << 23),
		// Reuse a pool of goroutines for incoming streams instead of
		// starting one per RPC: a new goroutine may have to grow its
		// stack (see internal/stacks). A write's handler blocks until its
		// raft entry is committed and applied, and a watch or keep-alive
		// stream holds its worker for its lifetime, so the pool is sized
		// for requests in flight rather than for the CPUs; beyond it,
		// gRPC starts a goroutine per RPC. Not more: a worker keeps the
		// stack it grew to (8 KiB or so), so 1024 workers, enough to run
		// every handler of 1000 clients' puts on a worker, kept several
		// MiB more resident after a burst than this pool does.
		grpc.NumStreamWorkers(uint32(max(256, 4*runtime.GOMAXPROCS(0)))),
		grpc.ForceServerCodecV2(codec),
		experimental.BufferPool(wireBufferPool),
	}
}

func maxStreams(n uint32) uint32 {
	if n == 0 {
		return math.MaxUint32
	}
	return n
}

func needsTLS(us []url.URL) bool {
	for _, u := range us {
		if u.Scheme == "https" || u.Scheme == "unixs" {
			return true
		}
	}
	return false
}

func listen(u url.URL) (net.Listener, error) {
	switch u.Scheme {
	case "unix", "unixs":
		path := u.Host + u.Path
		os.Remove(path)
		return net.Listen("unix", path)
	}
	return net.Listen("tcp", u.Host)
}

// stopListeners stops accepting, lets running RPCs finish for a moment,
// then closes everything.
func (s *Server) stopListeners() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, h := range s.httpSrv {
		h.Shutdown(ctx)
	}
	if s.grpc != nil {
		done := make(chan struct{})
		go func() { s.grpc.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			s.grpc.Stop()
		}
	}
	for _, l := range s.listeners {
		l.Close()
	}
}

// handshakeDone is transport credentials for connections whose TLS
// handshake the mux listener already did: it only exposes the state.
type handshakeDone struct{}

func (handshakeDone) ClientHandshake(ctx context.Context, _ string, c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return c, nil, fmt.Errorf("server-side credentials only")
}

func (handshakeDone) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if p, ok := c.(*peekedTLSConn); ok {
		return c, credentials.TLSInfo{State: p.ConnectionState(), CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
	}
	return c, nil, nil
}

func (handshakeDone) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls", SecurityVersion: "1.2"}
}
func (h handshakeDone) Clone() credentials.TransportCredentials { return h }
func (handshakeDone) OverrideServerName(string) error           { return nil }

// startServing sets the gRPC health service to SERVING, with etcd's log
// line: at start, and after every defragmentation (whether or not the
// StopGRPCServiceOnDefrag gate stopped it).
func (s *Server) startServing() {
	s.lg.Info("grpc service status changed", "service", "", "status", healthpb.HealthCheckResponse_SERVING.String())
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
}

// stopServing sets the gRPC health service to NOT_SERVING, so that
// clients that watch it (clientv3 with health checking, load balancers)
// move to another member; etcd does it during a defragmentation when
// the StopGRPCServiceOnDefrag gate is on.
func (s *Server) stopServing(reason string) {
	s.lg.Warn("grpc service status changed", "service", "", "status", healthpb.HealthCheckResponse_NOT_SERVING.String(), "reason", reason)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
}
