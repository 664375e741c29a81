package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/strata-db/strata/server"
	"github.com/strata-db/strata/tcpproxy"
)

const gatewayUsage = `Usage:

  strata gateway start [flags]
    Run etcd's stateless gateway: a TCP proxy that forwards each client
    connection, unread, to one of the cluster's client endpoints (round
    robin; an endpoint that refuses a connection is skipped until it
    answers again). Clients use it as a single endpoint:
    etcdctl --endpoints=127.0.0.1:23790 ...

Examples:

  strata gateway start --endpoints=10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379
  strata gateway start --listen-addr=0.0.0.0:23790 --discovery-srv=example.com

Flags:
`

// runGateway is `strata gateway start` with etcd's flags, defaults and
// messages. It returns the exit code.
func runGateway(args []string, stdout, stderr io.Writer) int {
	if rest, ok := withoutSubcommand(args, "start"); ok {
		args = append([]string{"start"}, rest...)
	}
	if len(args) == 0 || args[0] != "start" {
		if len(args) > 0 && args[0] != "-h" && args[0] != "--help" && args[0] != "help" {
			fmt.Fprintf(stderr, "unknown gateway command %q\n", args[0])
		}
		fmt.Fprint(stdout, gatewayUsage)
		gatewayFlags(new(gatewayConfig), stdout).PrintDefaults()
		if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
			return 0
		}
		return 2
	}
	var gc gatewayConfig
	fs := gatewayFlags(&gc, stderr)
	fs.Usage = func() {
		fmt.Fprint(stdout, gatewayUsage)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	lg := slog.New(slog.NewJSONHandler(stderr, nil))
	lg.Info("Running: ", "args", os.Args)
	eps, err := gc.resolve(lg)
	if err != nil {
		// etcd prints these on stdout; the one for an endpoint without a
		// port ends without a newline.
		fmt.Fprint(stdout, err.Error())
		if !errors.Is(err, errBadEndpoint) {
			fmt.Fprintln(stdout)
		}
		return 1
	}
	l, err := net.Listen("tcp", gc.listenAddr)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	p := &tcpproxy.Proxy{Logger: lg, Listener: l, Endpoints: eps, RetryDelay: gc.retryDelay}
	if err := server.NotifySystemd("READY=1"); err != nil {
		lg.Warn("failed to notify systemd for readiness", "error", err)
	}
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM)
	go func() { <-sigc; p.Stop() }()
	if err := p.Run(); err != nil {
		lg.Error("gateway stopped", "error", err)
		return 1
	}
	return 0
}

// withoutSubcommand finds the subcommand as etcd's command line (cobra)
// does: the first argument that is neither a flag nor a flag's value,
// where a flag without "=" takes the argument after it as its value (the
// gateway command itself has no boolean flags). When that argument is
// sub, it returns the other arguments in their order, so flags may come
// before the subcommand: etcd gateway --endpoints=... start.
func withoutSubcommand(args []string, sub string) ([]string, bool) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return nil, false
		case strings.HasPrefix(a, "-") && len(a) > 1:
			if !strings.Contains(a, "=") {
				i++ // its value
			}
		case a == sub:
			return append(slices.Clone(args[:i]), args[i+1:]...), true
		default:
			return nil, false
		}
	}
	return nil, false
}

var errBadEndpoint = errors.New("error parsing endpoint")

type gatewayConfig struct {
	listenAddr   string
	endpoints    endpointsValue
	discoverySRV string
	srvName      string
	insecureSRV  bool
	srvServer    string
	// trustedCAFile is accepted as etcd's: etcd checks a discovered
	// endpoint with a TCP dial, which needs no CA.
	trustedCAFile string
	retryDelay    time.Duration
}

// endpointsValue is --endpoints as etcd's string slice: comma separated,
// the first use replacing the default and later ones adding to it.
type endpointsValue struct {
	list []string
	set  bool
}

func (v *endpointsValue) String() string { return strings.Join(v.list, ",") }

func (v *endpointsValue) Set(s string) error {
	if !v.set {
		v.list, v.set = nil, true
	}
	v.list = append(v.list, strings.Split(s, ",")...)
	return nil
}

func gatewayFlags(gc *gatewayConfig, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("strata gateway start", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&gc.listenAddr, "listen-addr", "127.0.0.1:23790", "listen address")
	gc.endpoints = endpointsValue{list: []string{"127.0.0.1:2379"}}
	fs.Var(&gc.endpoints, "endpoints", "comma separated etcd cluster endpoints")
	fs.StringVar(&gc.discoverySRV, "discovery-srv", "", "DNS domain used to bootstrap initial cluster")
	fs.StringVar(&gc.srvName, "discovery-srv-name", "", "service name to query when using DNS discovery")
	fs.BoolVar(&gc.insecureSRV, "insecure-discovery", false, "accept insecure SRV records")
	fs.StringVar(&gc.srvServer, "discovery-srv-server", "", "DNS server (host:port) for --discovery-srv lookups instead of the system resolver (Strata only)")
	fs.StringVar(&gc.trustedCAFile, "trusted-ca-file", "", "path to the client server TLS CA file for verifying the discovered endpoints when discovery-srv is provided.")
	fs.DurationVar(&gc.retryDelay, "retry-delay", tcpproxy.DefaultRetryDelay, "duration of delay before retrying failed endpoints")
	return fs
}

// endpoints resolves what to forward to, as etcd's gateway does: the SRV
// records of --discovery-srv if it finds any, else --endpoints (schemes
// dropped: this is a TCP proxy). An endpoint that resolves to the listen
// address itself, on its port, is refused.
func (gc *gatewayConfig) resolve(lg *slog.Logger) ([]tcpproxy.Endpoint, error) {
	var eps []tcpproxy.Endpoint
	if gc.discoverySRV != "" {
		var err error
		if eps, err = discoverSRV(lg, server.SRVResolver(gc.srvServer), gc.discoverySRV, gc.srvName, gc.insecureSRV); err != nil {
			return nil, err
		}
	}
	if len(eps) == 0 {
		for _, ep := range gc.endpoints.list {
			if u, err := url.Parse(ep); err == nil && u.Host != "" {
				ep = u.Host
			}
			h, p, err := net.SplitHostPort(ep)
			port, perr := strconv.ParseUint(p, 10, 16)
			if err != nil || perr != nil {
				return nil, fmt.Errorf("%w %q", errBadEndpoint, ep)
			}
			eps = append(eps, tcpproxy.Endpoint{Host: h, Port: uint16(port)})
		}
	}
	if len(eps) == 0 {
		return nil, errors.New("no endpoints found")
	}
	lhost, lport, err := net.SplitHostPort(gc.listenAddr)
	if err != nil {
		return nil, fmt.Errorf("failed to validate listen address: %s", gc.listenAddr)
	}
	laddrs, err := net.LookupHost(lhost)
	if err != nil {
		return nil, fmt.Errorf("failed to resolve listen host: %s", lhost)
	}
	for _, e := range eps {
		eaddrs, err := net.LookupHost(e.Host)
		if err != nil {
			return nil, fmt.Errorf("failed to resolve endpoint host: %s", e.Host)
		}
		if strconv.Itoa(int(e.Port)) != lport {
			continue
		}
		for _, ea := range eaddrs {
			for _, la := range laddrs {
				if ea == la {
					return nil, fmt.Errorf("SRV or endpoint (%s:%d->%s:%d) should not resolve to the gateway listen addr (%s)",
						e.Host, e.Port, ea, e.Port, gc.listenAddr)
				}
			}
		}
	}
	return eps, nil
}

// discoverSRV reads the _etcd-client-ssl and _etcd-client SRV records of
// domain (with the -<name> suffix when given). Unless insecure, only the
// TLS ones are kept, and only those that accept a TCP connection, as
// etcd checks them.
func discoverSRV(lg *slog.Logger, r *net.Resolver, domain, name string, insecure bool) ([]tcpproxy.Endpoint, error) {
	type found struct {
		ep     tcpproxy.Endpoint
		secure bool
	}
	var all []found
	var errs []error
	for _, secure := range []bool{true, false} {
		service := "etcd-client"
		if secure {
			service += "-ssl"
		}
		if name != "" {
			service += "-" + name
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, srvs, err := r.LookupSRV(ctx, service, "tcp", domain)
		cancel()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, s := range srvs {
			all = append(all, found{tcpproxy.Endpoint{Host: strings.TrimSuffix(s.Target, "."), Port: s.Port,
				Priority: s.Priority, Weight: s.Weight}, secure})
		}
	}
	if len(errs) == 2 {
		return nil, fmt.Errorf("dns lookup errors: %w and %w", errs[0], errs[1])
	}
	var eps []tcpproxy.Endpoint
	var addrs []string
	for _, f := range all {
		addrs = append(addrs, f.ep.Addr())
	}
	lg.Info("discovered cluster from SRV", "srv-server", domain, "endpoints", addrs)
	for _, f := range all {
		if !insecure {
			if !f.secure {
				lg.Warn("failed to validate discovered endpoint", "srv-server", domain, "endpoint", f.ep.Addr(), "error", "insecure")
				continue
			}
			c, err := net.DialTimeout("tcp", f.ep.Addr(), 5*time.Second)
			if err != nil {
				lg.Warn("failed to validate discovered endpoint", "srv-server", domain, "endpoint", f.ep.Addr(), "error", err)
				continue
			}
			c.Close()
		}
		eps = append(eps, f.ep)
	}
	return eps, nil
}
