package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/strata-db/strata/grpcproxy"
	"github.com/strata-db/strata/server"
	"github.com/strata-db/strata/server/config"
)

const grpcProxyUsage = `Usage:
  strata grpc-proxy start [flags]
    Run etcd's stateless gRPC proxy in front of a cluster: every client
    RPC goes to one member (failing over to the next endpoint), watchers of
    the same range share one watch on the member, and member list lists the
    proxies (those registered under --resolver-prefix).

Example:
  strata grpc-proxy start --endpoints=10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379 --listen-addr=127.0.0.1:23790

Flags:
`

// grpcProxyFlags are etcd's grpc-proxy start flags, with its defaults.
type grpcProxyFlags struct {
	endpoints                            endpointsValue
	listenAddr, advertiseClientURL       string
	discoverySRV, srvName, srvServer     string
	insecureDiscovery                    bool
	metricsAddr                          string
	autoSync                             time.Duration
	dialKeepAliveTime, dialKeepAliveTO   time.Duration
	permitWithoutStream                  bool
	resolverPrefix                       string
	resolverTTL                          int
	namespace                            string
	enablePprof                          bool
	dataDir                              string
	maxSend, maxRecv                     int
	keepAliveMin, keepAlive, keepAliveTO time.Duration
	cert, key, cacert                    string
	insecureSkipVerify                   bool
	certFile, keyFile, trustedCA, crl    string
	cipherSuites                         string
	autoTLS                              bool
	certValidity                         uint
	tlsMin, tlsMax                       string
	ordering                             bool
	leasingPrefix                        string
	grpcLogging, debug                   bool
	maxStreams                           uint
}

func (f *grpcProxyFlags) set(fs *flag.FlagSet) {
	f.endpoints = endpointsValue{list: []string{"127.0.0.1:2379"}}
	fs.Var(&f.endpoints, "endpoints", "comma separated etcd cluster endpoints")
	fs.StringVar(&f.listenAddr, "listen-addr", "127.0.0.1:23790", "listen address")
	fs.StringVar(&f.discoverySRV, "discovery-srv", "", "domain name to query for SRV records describing cluster endpoints")
	fs.StringVar(&f.srvName, "discovery-srv-name", "", "service name to query when using DNS discovery")
	fs.StringVar(&f.srvServer, "discovery-srv-server", "", "DNS server (host:port) for --discovery-srv lookups instead of the system resolver (Strata only)")
	fs.StringVar(&f.metricsAddr, "metrics-addr", "", "listen for endpoint /metrics requests on an additional interface")
	fs.BoolVar(&f.insecureDiscovery, "insecure-discovery", false, "accept insecure SRV records")
	fs.DurationVar(&f.autoSync, "endpoints-auto-sync-interval", 0, "etcd endpoints auto sync interval (disabled by default)")
	fs.DurationVar(&f.dialKeepAliveTime, "dial-keepalive-time", 0, "keepalive time for client(grpc-proxy) connections (default 0, disable).")
	fs.DurationVar(&f.dialKeepAliveTO, "dial-keepalive-timeout", 20*time.Second, "keepalive timeout for client(grpc-proxy) connections (default 20s).")
	fs.BoolVar(&f.permitWithoutStream, "permit-without-stream", false, "Enable client(grpc-proxy) to send keepalive pings even with no active RPCs.")
	fs.StringVar(&f.advertiseClientURL, "advertise-client-url", "127.0.0.1:23790", "advertise address to register (must be reachable by client)")
	fs.StringVar(&f.resolverPrefix, "resolver-prefix", "", "prefix to use for registering proxy (must be shared with other grpc-proxy members)")
	fs.IntVar(&f.resolverTTL, "resolver-ttl", 0, "specify TTL, in seconds, when registering proxy endpoints")
	fs.StringVar(&f.namespace, "namespace", "", "string to prefix to all keys for namespacing requests")
	fs.BoolVar(&f.enablePprof, "enable-pprof", false, `Enable runtime profiling data via HTTP server. Address is at client URL + "/debug/pprof/"`)
	fs.StringVar(&f.dataDir, "data-dir", "default.proxy", "Data directory for persistent data")
	fs.IntVar(&f.maxSend, "max-send-bytes", 1536*1024, "message send limits in bytes (default value is 1.5 MiB)")
	fs.IntVar(&f.maxRecv, "max-recv-bytes", math.MaxInt32, "message receive limits in bytes (default value is math.MaxInt32)")
	fs.DurationVar(&f.keepAliveMin, "grpc-keepalive-min-time", 5*time.Second, "Minimum interval duration that a client should wait before pinging proxy.")
	fs.DurationVar(&f.keepAlive, "grpc-keepalive-interval", 2*time.Hour, "Frequency duration of server-to-client ping to check if a connection is alive (0 to disable).")
	fs.DurationVar(&f.keepAliveTO, "grpc-keepalive-timeout", 20*time.Second, "Additional duration of wait before closing a non-responsive connection (0 to disable).")
	fs.StringVar(&f.cert, "cert", "", "identify secure connections with etcd servers using this TLS certificate file")
	fs.StringVar(&f.key, "key", "", "identify secure connections with etcd servers using this TLS key file")
	fs.StringVar(&f.cacert, "cacert", "", "verify certificates of TLS-enabled secure etcd servers using this CA bundle")
	fs.BoolVar(&f.insecureSkipVerify, "insecure-skip-tls-verify", false, "skip authentication of etcd server TLS certificates (CAUTION: this option should be enabled only for testing purposes)")
	fs.StringVar(&f.certFile, "cert-file", "", "identify secure connections to the proxy using this TLS certificate file")
	fs.StringVar(&f.keyFile, "key-file", "", "identify secure connections to the proxy using this TLS key file")
	fs.StringVar(&f.trustedCA, "trusted-ca-file", "", "verify certificates of TLS-enabled secure proxy using this CA bundle")
	fs.StringVar(&f.cipherSuites, "listen-cipher-suites", "", "Comma-separated list of supported TLS cipher suites between client/proxy (empty will be auto-populated by Go).")
	fs.BoolVar(&f.autoTLS, "auto-tls", false, "proxy TLS using generated certificates")
	fs.StringVar(&f.crl, "client-crl-file", "", "proxy client certificate revocation list file.")
	fs.UintVar(&f.certValidity, "self-signed-cert-validity", 1, "The validity period of the proxy certificates, unit is year")
	fs.StringVar(&f.tlsMin, "tls-min-version", "TLS1.2", "Minimum TLS version supported by grpc proxy. Possible values: TLS1.2, TLS1.3.")
	fs.StringVar(&f.tlsMax, "tls-max-version", "", "Maximum TLS version supported by grpc proxy. Possible values: TLS1.2, TLS1.3 (empty defers to Go).")
	fs.BoolVar(&f.ordering, "experimental-serializable-ordering", false, "Ensure serializable reads have monotonically increasing store revisions across endpoints.")
	fs.StringVar(&f.leasingPrefix, "experimental-leasing-prefix", "", "leasing metadata prefix for disconnected linearized reads.")
	fs.BoolVar(&f.grpcLogging, "experimental-enable-grpc-logging", false, "logging all grpc requests and responses")
	fs.BoolVar(&f.debug, "debug", false, "Enable debug-level logging for grpc-proxy.")
	fs.UintVar(&f.maxStreams, "max-concurrent-streams", math.MaxUint32, "Maximum concurrent streams that each client can open at a time.")
}

// runGRPCProxy is `strata grpc-proxy start`. It returns the exit code.
func runGRPCProxy(args []string, stdout, stderr io.Writer) int {
	if rest, ok := withoutSubcommand(args, "start"); ok {
		args = append([]string{"start"}, rest...)
	}
	var f grpcProxyFlags
	fs := flag.NewFlagSet("strata grpc-proxy start", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f.set(fs)
	fs.Usage = func() {
		fmt.Fprint(stdout, grpcProxyUsage)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
	}
	if len(args) == 0 || args[0] != "start" {
		if len(args) > 0 && args[0] != "-h" && args[0] != "--help" && args[0] != "help" {
			fmt.Fprintf(stderr, "unknown grpc-proxy command %q\n", args[0])
			fs.Usage()
			return 2
		}
		fs.Usage()
		return 0
	}
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	level := slog.LevelInfo
	if f.debug {
		level = slog.LevelDebug
	}
	lg := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))
	if err := f.check(); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	cfg, err := f.config(lg)
	if err != nil {
		lg.Error("grpc-proxy: bad configuration", "error", err)
		return 1
	}
	p, err := grpcproxy.New(cfg)
	if err != nil {
		lg.Error("grpc-proxy: cannot start", "error", err)
		return 1
	}
	l, err := net.Listen("tcp", f.listenAddr)
	if err != nil {
		lg.Error("grpc-proxy: cannot listen", "address", f.listenAddr, "error", err)
		return 1
	}
	if err := server.NotifySystemd("READY=1"); err != nil {
		lg.Warn("failed to notify systemd for readiness", "error", err)
	}
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM)
	go func() { <-sigc; p.Stop() }()
	if err := p.Serve(l); err != nil {
		lg.Error("grpc-proxy stopped", "error", err)
		return 1
	}
	return 0
}

// check refuses what Strata's proxy does not do, rather than ignore it.
func (f *grpcProxyFlags) check() error {
	switch {
	case f.leasingPrefix != "":
		return errors.New("grpc-proxy: --experimental-leasing-prefix is not supported by strata grpc-proxy yet")
	}
	return nil
}

func (f *grpcProxyFlags) config(lg *slog.Logger) (grpcproxy.Config, error) {
	profileMemory(f.enablePprof)
	cfg := grpcproxy.Config{
		Namespace: f.namespace, AutoSyncInterval: f.autoSync, ListenAddr: f.listenAddr, AdvertiseClientURL: f.advertiseClientURL,
		ResolverPrefix: f.resolverPrefix, ResolverTTL: f.resolverTTL, EnablePprof: f.enablePprof,
		MetricsAddr: f.metricsAddr, MaxSendBytes: f.maxSend, MaxRecvBytes: f.maxRecv,
		DialKeepAliveTime: f.dialKeepAliveTime, DialKeepAliveTimeout: f.dialKeepAliveTO,
		PermitWithoutStream: f.permitWithoutStream, Logger: lg,
		SerializableOrdering: f.ordering, LogRequests: f.grpcLogging,
		MaxConcurrentStreams: uint32(min(f.maxStreams, math.MaxUint32)),
		KeepAliveInterval:    f.keepAlive, KeepAliveTimeout: f.keepAliveTO,
	}
	cfg.Endpoints = f.endpoints.list
	if f.discoverySRV != "" {
		eps, err := discoverSRV(lg, server.SRVResolver(f.srvServer), f.discoverySRV, f.srvName, f.insecureDiscovery)
		if err != nil {
			return cfg, err
		}
		cfg.Endpoints = nil
		for _, e := range eps {
			cfg.Endpoints = append(cfg.Endpoints, e.Addr())
		}
	}
	// To the members: TLS when any client certificate or CA is given, or
	// an endpoint is https.
	anyTLS := f.cert != "" || f.cacert != "" || f.insecureSkipVerify
	for _, e := range cfg.Endpoints {
		anyTLS = anyTLS || strings.HasPrefix(e, "https://")
	}
	if anyTLS {
		c := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: f.insecureSkipVerify}
		if f.cacert != "" {
			pem, err := os.ReadFile(f.cacert)
			if err != nil {
				return cfg, err
			}
			c.RootCAs = x509.NewCertPool()
			if !c.RootCAs.AppendCertsFromPEM(pem) {
				return cfg, fmt.Errorf("no certificate in %s", f.cacert)
			}
		}
		if f.cert != "" {
			kp, err := tls.LoadX509KeyPair(f.cert, f.key)
			if err != nil {
				return cfg, err
			}
			// As etcd's proxy: the members would take a Common Name in
			// its client certificate for a user name, so it must have none.
			if kp.Leaf == nil && len(kp.Certificate) > 0 {
				if kp.Leaf, err = x509.ParseCertificate(kp.Certificate[0]); err != nil {
					return cfg, fmt.Errorf("%s: %w", f.cert, err)
				}
			}
			if kp.Leaf != nil && kp.Leaf.Subject.CommonName != "" {
				cn := kp.Leaf.Subject.CommonName
				return cfg, fmt.Errorf("cert has non empty Common Name (%s): %s", cn, f.cert)
			}
			c.Certificates = []tls.Certificate{kp}
		}
		cfg.ClientTLS = c
	}
	// To the clients: the member's own TLS setup for its client listener,
	// built from the proxy's flags.
	if f.certFile != "" || f.autoTLS {
		mc := &config.Config{DataDir: f.dataDir, TLSMinVersion: f.tlsMin, TLSMaxVersion: f.tlsMax,
			CipherSuites: splitList(f.cipherSuites), SelfSignedCertValidity: f.certValidity,
			ClientSecurity: config.TLSInfo{CertFile: f.certFile, KeyFile: f.keyFile, TrustedCAFile: f.trustedCA,
				ClientCertAuth: f.trustedCA != "", CRLFile: f.crl, AutoTLS: f.autoTLS}}
		if u, err := url.Parse("https://" + f.listenAddr); err == nil {
			mc.ListenClientURLs = []url.URL{*u}
		}
		c, err := mc.ClientTLS()
		if err != nil {
			return cfg, err
		}
		cfg.ServerTLS = c
	}
	return cfg, nil
}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}
