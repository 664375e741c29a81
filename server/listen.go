package server

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"net"
	"net/url"
	"sync"
	"time"
)

// The client port serves gRPC (HTTP/2) and HTTP/1.1 (health, metrics, the
// JSON gateway) on one listener, as etcd does. A connection is routed by
// its first bytes: the HTTP/2 client preface goes to gRPC, anything else
// to the HTTP server. Under TLS the sniffing happens after the handshake.
//
// As in etcd, the client URLs are grouped by address: http:// and
// https:// URLs naming the same host:port share one listener, which then
// takes both plaintext and TLS (a TLS ClientHello starts with the
// handshake record type, 0x16; no HTTP request does). With
// --listen-client-http-urls, the client URLs serve gRPC only and the HTTP
// URLs serve HTTP only.

var http2Preface = []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")

// tlsRecordHandshake is the first byte of a TLS ClientHello.
const tlsRecordHandshake = 0x16

// sniffTimeout bounds how long a new connection may take to send its
// first bytes before it is dropped.
const sniffTimeout = 10 * time.Second

// clientAddr is one bound client address and what it serves.
type clientAddr struct {
	u        url.URL // the first URL naming the address; its scheme picks unix or tcp
	secure   bool    // an https/unixs URL names it: TLS is accepted
	insecure bool    // an http/unix URL names it: plaintext is accepted
	grpc     bool    // serves gRPC
	http     bool    // serves HTTP: the gateway, /health, /metrics, /version
}

func isSecureScheme(scheme string) bool { return scheme == "https" || scheme == "unixs" }

func isUnixScheme(scheme string) bool { return scheme == "unix" || scheme == "unixs" }

// clientAddrs groups --listen-client-urls and --listen-client-http-urls by
// address, as etcd's configureClientListeners does.
func clientAddrs(grpcURLs, httpURLs []url.URL) []clientAddr {
	var out []clientAddr
	add := func(u url.URL, grpc, http bool) {
		key := func(v url.URL) string {
			if isUnixScheme(v.Scheme) {
				return "unix:" + v.Host + v.Path
			}
			return "tcp:" + v.Host
		}
		i := 0
		for i < len(out) && key(out[i].u) != key(u) {
			i++
		}
		if i == len(out) {
			out = append(out, clientAddr{u: u, grpc: grpc, http: http})
		}
		if isSecureScheme(u.Scheme) {
			out[i].secure = true
		} else {
			out[i].insecure = true
		}
	}
	split := len(httpURLs) > 0
	for _, u := range grpcURLs {
		add(u, true, !split)
	}
	for _, u := range httpURLs {
		add(u, false, true)
	}
	return out
}

type muxListener struct {
	inner net.Listener
	addr  clientAddr
	// tlsConfig is set when addr.secure; with addr.insecure too, a
	// connection is TLS only if it starts with a ClientHello.
	tlsConfig *tls.Config
	// serveH2, when set (TLS listeners), serves HTTP/2 connections over
	// TLS itself: curl and browsers negotiate h2 too, so HTTP/2 there is
	// split by content type rather than handed to gRPC whole.
	serveH2 func(net.Conn)
	// rejected, when set, is told of each failed TLS handshake.
	rejected  func(*tls.Conn, error)
	grpcL     *chanListener // plaintext HTTP/2 (addr.grpc)
	httpL     *chanListener // HTTP/1.x, plaintext or TLS (addr.http)
	closeOnce sync.Once
}

func newMuxListener(l net.Listener, addr clientAddr, tlsConfig *tls.Config, rejected func(*tls.Conn, error)) *muxListener {
	m := &muxListener{inner: l, addr: addr, tlsConfig: tlsConfig, rejected: rejected,
		grpcL: newChanListener(l.Addr()), httpL: newChanListener(l.Addr())}
	go m.serve()
	return m
}

func (m *muxListener) serve() {
	for {
		c, err := m.inner.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			m.close()
			return
		}
		go m.route(c)
	}
}

func (m *muxListener) route(c net.Conn) {
	c.SetReadDeadline(time.Now().Add(sniffTimeout))
	isTLS := m.tlsConfig != nil
	if isTLS && m.addr.insecure {
		// Both on one address: only a ClientHello starts TLS.
		br := bufio.NewReaderSize(c, 1)
		first, err := br.Peek(1)
		if err != nil {
			c.Close()
			return
		}
		isTLS = first[0] == tlsRecordHandshake
		c = &peekedConn{Conn: c, r: br}
	}
	if isTLS {
		tc := tls.Server(c, m.tlsConfig)
		// Handshake here, under the sniff deadline, so that a refused
		// client (no certificate, an unknown CA) is logged and closed
		// instead of surfacing later as a read error of the server.
		if err := tc.Handshake(); err != nil {
			if m.rejected != nil {
				m.rejected(tc, err)
			}
			tc.Close()
			return
		}
		c = tc
	}
	br := bufio.NewReaderSize(c, 4096)
	head, err := br.Peek(len(http2Preface))
	c.SetReadDeadline(time.Time{})
	var pc net.Conn = &peekedConn{Conn: c, r: br}
	if isTLS {
		pc = &peekedTLSConn{peekedConn{Conn: c, r: br}}
	}
	switch {
	case err == nil && bytes.Equal(head, http2Preface):
		if isTLS && m.serveH2 != nil {
			m.serveH2(pc)
		} else if m.addr.grpc {
			m.grpcL.deliver(pc)
		} else {
			c.Close() // HTTP-only: no h2c, as etcd's
		}
	case len(head) == 0 && err != nil, !m.addr.http:
		c.Close()
	default:
		m.httpL.deliver(pc)
	}
}

func (m *muxListener) close() {
	m.closeOnce.Do(func() {
		m.inner.Close()
		m.grpcL.Close()
		m.httpL.Close()
	})
}

type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (p *peekedConn) Read(b []byte) (int, error) { return p.r.Read(b) }

// peekedTLSConn is a peekedConn over TLS (its Conn is a *tls.Conn). Its
// ConnectionState lets the gRPC server (handshakeDone) and net/http (which
// sets Request.TLS from it) see the TLS state, client certificates
// included, through the wrapper; a plaintext peekedConn has none, so
// that a plaintext request on an address that also takes TLS is not
// taken for a TLS one.
type peekedTLSConn struct{ peekedConn }

func (p *peekedTLSConn) ConnectionState() tls.ConnectionState {
	return p.Conn.(*tls.Conn).ConnectionState()
}

// chanListener is a net.Listener fed by the mux.
type chanListener struct {
	addr   net.Addr
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newChanListener(addr net.Addr) *chanListener {
	return &chanListener{addr: addr, conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *chanListener) deliver(c net.Conn) {
	select {
	case l.conns <- c:
	case <-l.closed:
		c.Close()
	}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return l.addr }
