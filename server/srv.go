package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// DNS SRV bootstrap (--discovery-srv, --discovery-srv-name), as etcd does
// it: the peer URLs of a new cluster are the targets of the SRV records
// _etcd-server-ssl._tcp.<domain> (https) and _etcd-server._tcp.<domain>
// (http), with "-<name>" after "server" when --discovery-srv-name is set.
// A target that resolves to one of this member's advertised peer
// addresses is this member; the others get placeholder names ("0", "1",
// …), which is harmless: member ids derive from peer URLs and the
// cluster token. --discovery-srv-server (Strata only) names the DNS
// server to ask; by default the system resolver is used.

// srvResolver is the resolver for SRV bootstrap.
func (s *Server) srvResolver() *net.Resolver { return SRVResolver(s.cfg.DiscoverySRVServer) }

// SRVResolver is the resolver for --discovery-srv lookups: the system's,
// or with addr (host:port, Strata's --discovery-srv-server) one that asks
// the DNS server there.
func SRVResolver(addr string) *net.Resolver {
	if addr == "" {
		return net.DefaultResolver
	}
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
}

// srvInitialCluster builds the --initial-cluster string from the SRV
// records (etcd's GetDNSClusterNames).
func (s *Server) srvInitialCluster() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := s.srvResolver()
	suffix := ""
	if s.cfg.DiscoverySRVName != "" {
		suffix = "-" + s.cfg.DiscoverySRVName
	}
	self := map[string]url.URL{}
	for _, u := range s.cfg.AdvertisePeerURLs {
		a, err := resolveTCP(ctx, r, u.Host)
		if err != nil {
			return "", err
		}
		self[a] = u
	}
	var parts []string
	next := 0
	var errs []error
	for _, svc := range []struct{ scheme, service string }{{"https", "etcd-server-ssl" + suffix}, {"http", "etcd-server" + suffix}} {
		got, err := srvCluster(ctx, r, svc.scheme, svc.service, s.cfg.DiscoverySRV, s.cfg.Name, self, &next)
		s.lg.Info("get cluster for "+svc.service+" SRV", "service-scheme", svc.scheme, "service-name", svc.service,
			"server-name", s.cfg.Name, "discovery-srv", s.cfg.DiscoverySRV, "cluster", strings.Join(got, ","), "error", errString(err))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		parts = append(parts, got...)
	}
	if len(parts) == 0 {
		return "", errors.Join(errs...)
	}
	cluster := strings.Join(parts, ",")
	if !strings.HasPrefix(cluster, s.cfg.Name+"=") && !strings.Contains(cluster, ","+s.cfg.Name+"=") {
		return "", fmt.Errorf("cannot find local etcd member %q in SRV records", s.cfg.Name)
	}
	return cluster, nil
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// srvCluster is one service's share of the initial cluster.
func srvCluster(ctx context.Context, r *net.Resolver, scheme, service, domain, name string, self map[string]url.URL, next *int) ([]string, error) {
	_, addrs, err := r.LookupSRV(ctx, service, "tcp", domain)
	if err != nil {
		return nil, fmt.Errorf("error querying DNS SRV records for _%s %w", service, err)
	}
	var parts []string
	var lastErr error
	for _, srv := range addrs {
		port := strconv.Itoa(int(srv.Port))
		a, err := resolveTCP(ctx, r, net.JoinHostPort(srv.Target, port))
		if err != nil {
			lastErr = err
			continue
		}
		n := ""
		u, mine := self[a]
		if mine {
			n = name
		} else {
			n = strconv.Itoa(*next)
			*next++
		}
		host := net.JoinHostPort(strings.TrimSuffix(srv.Target, "."), port)
		if mine && u.Scheme != scheme {
			lastErr = fmt.Errorf("bootstrap at %s from DNS for %s has scheme mismatch with expected peer %s", scheme+"://"+host, service, u.String())
			continue
		}
		parts = append(parts, fmt.Sprintf("%s=%s://%s", n, scheme, host))
	}
	if len(parts) == 0 {
		if lastErr == nil {
			lastErr = errors.New("no usable SRV records")
		}
		return nil, fmt.Errorf("error querying DNS SRV records for _%s %w", service, lastErr)
	}
	return parts, nil
}

// resolveTCP resolves host:port to its first address, as "ip:port".
func resolveTCP(ctx context.Context, r *net.Resolver, hostport string) (string, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return "", err
	}
	// Without the root's dot, so /etc/hosts is consulted as for any name.
	ips, err := r.LookupIPAddr(ctx, strings.TrimSuffix(host, "."))
	if err != nil {
		return "", err
	}
	if len(ips) == 0 {
		return "", fmt.Errorf("no address for %s", host)
	}
	// Prefer IPv4, as the default TCP resolution of a dual-stack name does.
	ip := ips[0].IP
	for _, a := range ips {
		if a.IP.To4() != nil {
			ip = a.IP
			break
		}
	}
	return net.JoinHostPort(ip.String(), port), nil
}
