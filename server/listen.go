package server

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"
)

// The client port serves gRPC (HTTP/2) and HTTP/1.1 (health, metrics, the
// JSON gateway) on one listener, as etcd does. A connection is routed by
// its first bytes: the HTTP/2 client preface goes to gRPC, anything else
// to the HTTP server. Under TLS the sniffing happens after the handshake.

var http2Preface = []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")

// sniffTimeout bounds how long a new connection may take to send its
// first bytes before it is dropped.
const sniffTimeout = 10 * time.Second

type muxListener struct {
	inner     net.Listener
	tlsConfig *tls.Config
	// serveH2, when set (TLS listeners), serves HTTP/2 connections itself:
	// over TLS, curl and browsers negotiate h2 too, so HTTP/2 there is
	// split by content type rather than handed to gRPC whole.
	serveH2   func(net.Conn)
	grpcL     *chanListener
	httpL     *chanListener
	closeOnce sync.Once
}

func newMuxListener(l net.Listener, tlsConfig *tls.Config) *muxListener {
	m := &muxListener{inner: l, tlsConfig: tlsConfig,
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
	if m.tlsConfig != nil {
		c = tls.Server(c, m.tlsConfig)
	}
	c.SetReadDeadline(time.Now().Add(sniffTimeout))
	br := bufio.NewReaderSize(c, 4096)
	head, err := br.Peek(len(http2Preface))
	c.SetReadDeadline(time.Time{})
	pc := &peekedConn{Conn: c, r: br}
	if err == nil && bytes.Equal(head, http2Preface) {
		if m.serveH2 != nil {
			m.serveH2(pc)
			return
		}
		m.grpcL.deliver(pc)
		return
	}
	if len(head) == 0 && err != nil {
		c.Close()
		return
	}
	m.httpL.deliver(pc)
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

// ConnectionState lets the gRPC server see the TLS state (client
// certificates for CN-based auth) through the wrapper.
func (p *peekedConn) ConnectionState() tls.ConnectionState {
	if tc, ok := p.Conn.(*tls.Conn); ok {
		return tc.ConnectionState()
	}
	return tls.ConnectionState{}
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
