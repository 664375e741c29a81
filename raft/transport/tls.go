package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"
)

// newRoundTripper builds the HTTP/1.1 client side. With read/write
// timeouts (streams) every Read and Write on the connection gets a fresh
// deadline, so a stream whose peer went silent (no link heartbeat within
// rd) fails instead of hanging, and connections are never reused: a
// timed-out connection must not go back to the pool. Without them
// (pipeline, snapshots, probes) idle connections are kept for reuse.
func newRoundTripper(tlsCfg *tls.Config, local net.IP, dial, rd, wr time.Duration) *http.Transport {
	d := NewDialer(local, dial)
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		TLSClientConfig:     tlsCfg,
		TLSHandshakeTimeout: 10 * time.Second,
		DisableCompression:  true,
	}
	if rd > 0 || wr > 0 {
		tr.MaxIdleConnsPerHost = -1
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &timeoutConn{Conn: c, rd: rd, wr: wr}, nil
		}
	} else {
		tr.MaxIdleConnsPerHost = 1024
		tr.DialContext = d.DialContext
	}
	return tr
}

// Dialer dials other members' peer ports: TCP, or the unix socket of a
// unix(s):// peer URL.
type Dialer struct {
	tcp, unix *net.Dialer
}

// NewDialer returns a Dialer with the given connect timeout. A non-nil
// local is the source address of every TCP connection, as etcd's
// SetMemberLocalAddr gate asks (config.PeerLocalAddr): a member whose
// peer certificate names only its host IP then connects from that IP, and
// peers checking the client certificate's SANs against the connection's
// address accept it even when they are reached over loopback. Unix
// sockets have no IP and ignore it.
func NewDialer(local net.IP, timeout time.Duration) Dialer {
	d := Dialer{
		tcp:  &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second},
		unix: &net.Dialer{Timeout: timeout},
	}
	if local != nil {
		d.tcp.LocalAddr = &net.TCPAddr{IP: local}
	}
	return d
}

// DialContext is net.Dialer's, for http.Transport.DialContext.
func (d Dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if _, ok := unixHosts.Load(addr); ok {
		return d.unix.DialContext(ctx, "unix", addr)
	}
	return d.tcp.DialContext(ctx, network, addr)
}

// timeoutConn sets a deadline before every Read and Write.
type timeoutConn struct {
	net.Conn
	rd, wr time.Duration
}

func (c *timeoutConn) Read(b []byte) (int, error) {
	if c.rd > 0 {
		if err := c.Conn.SetReadDeadline(time.Now().Add(c.rd)); err != nil {
			return 0, err
		}
	}
	return c.Conn.Read(b)
}

func (c *timeoutConn) Write(b []byte) (int, error) {
	if c.wr > 0 {
		if err := c.Conn.SetWriteDeadline(time.Now().Add(c.wr)); err != nil {
			return 0, err
		}
	}
	return c.Conn.Write(b)
}

// ServerTLS returns the peer listener's TLS config: base (the server's
// config.PeerTLS, which already enforces the client CA, the CRL and
// --peer-cert-allowed-cn / --peer-cert-allowed-hostname) plus etcd's check
// that a client certificate's SANs name the address it connects from,
// unless skipClientSANVerify (--peer-skip-client-san-verification). As in
// etcd, a certificate without IP or DNS SANs passes; IP SANs must contain
// the client's IP; DNS SANs must match a reverse lookup of it, or resolve
// to it. base is not modified; nil gives nil.
func ServerTLS(base *tls.Config, skipClientSANVerify bool) *tls.Config {
	if base == nil || skipClientSANVerify {
		return base
	}
	cfg := base.Clone()
	cfg.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		var inner *tls.Config
		if base.GetConfigForClient != nil {
			c, err := base.GetConfigForClient(hello)
			if err != nil {
				return nil, err
			}
			inner = c
		}
		if inner == nil {
			inner = base.Clone()
		} else {
			inner = inner.Clone()
		}
		inner.GetConfigForClient = nil
		remote := hello.Conn.RemoteAddr().String()
		prev := inner.VerifyConnection
		inner.VerifyConnection = func(cs tls.ConnectionState) error {
			if prev != nil {
				if err := prev(cs); err != nil {
					return err
				}
			}
			if len(cs.PeerCertificates) == 0 {
				return nil // no client certificate; ClientAuth decided
			}
			ctx, cancel := context.WithTimeout(hello.Context(), 5*time.Second)
			defer cancel()
			return checkClientSAN(ctx, cs.PeerCertificates[0], remote)
		}
		return inner, nil
	}
	return cfg
}

// checkClientSAN is etcd's client-certificate SAN check against the
// connection's remote address.
func checkClientSAN(ctx context.Context, cert *x509.Certificate, remoteAddr string) error {
	if len(cert.IPAddresses) == 0 && len(cert.DNSNames) == 0 {
		return nil
	}
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		return err
	}
	if len(cert.IPAddresses) > 0 {
		verr := cert.VerifyHostname(host)
		if verr == nil {
			return nil
		}
		if len(cert.DNSNames) == 0 {
			return verr
		}
	}
	var names, wildcards []string
	for _, n := range cert.DNSNames {
		if strings.HasPrefix(n, "*.") {
			wildcards = append(wildcards, n[1:])
		} else {
			names = append(names, n)
		}
	}
	found, lerr := net.DefaultResolver.LookupAddr(ctx, host)
	for _, n := range found {
		n = strings.TrimSuffix(n, ".")
		for _, wc := range wildcards {
			if strings.HasSuffix(n, wc) {
				return nil
			}
		}
		for _, want := range names {
			if n == want {
				return nil
			}
		}
	}
	for _, n := range names {
		addrs, err := net.DefaultResolver.LookupHost(ctx, n)
		if err != nil {
			lerr = err
			continue
		}
		for _, a := range addrs {
			if a == host {
				return nil
			}
		}
	}
	suffix := ""
	if lerr != nil {
		suffix = " (" + lerr.Error() + ")"
	}
	return fmt.Errorf("tls: %q does not match any of DNSNames %q%s", host, cert.DNSNames, suffix)
}
