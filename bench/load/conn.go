package load

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// defaultDialTimeout bounds the wait for a connection when --dial-timeout
// is 0. Connections are made ready before the measured interval starts, so
// connection setup is not counted as request latency.
const defaultDialTimeout = 10 * time.Second

const authenticateMethod = "/etcdserverpb.Auth/Authenticate"

// conn is one gRPC connection with etcd's service stubs on it.
type conn struct {
	addr    string
	cc      *grpc.ClientConn
	kv      pb.KVClient
	watch   pb.WatchClient
	lease   pb.LeaseClient
	maint   pb.MaintenanceClient
	cluster pb.ClusterClient

	// Authentication: the token goes in the "token" metadata of every
	// call; an "invalid auth token" error (the token expired) makes the
	// call authenticate again and retry once.
	user, pass string
	token      atomic.Pointer[string]
	authMu     sync.Mutex
}

// dialer makes connections as the global flags say.
type dialer struct {
	g          Global
	tls        *tls.Config
	user, pass string
}

func newDialer(g Global, stdin io.Reader, prompt io.Writer) (*dialer, error) {
	d := &dialer{g: g}
	anyTLS := g.CACert != "" || g.Cert != "" || g.InsecureSkipVerify
	for _, e := range g.Endpoints {
		if _, t, _ := parseEndpoint(e); t {
			anyTLS = true
		}
	}
	if anyTLS {
		cfg := &tls.Config{InsecureSkipVerify: g.InsecureSkipVerify, MinVersion: tls.VersionTLS12}
		if g.CACert != "" {
			pem, err := os.ReadFile(g.CACert)
			if err != nil {
				return nil, fmt.Errorf("bad tls config: %v", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("bad tls config: no certificate in %s", g.CACert)
			}
			cfg.RootCAs = pool
		}
		if g.Cert != "" {
			c, err := tls.LoadX509KeyPair(g.Cert, g.Key)
			if err != nil {
				return nil, fmt.Errorf("bad tls config: %v", err)
			}
			cfg.Certificates = []tls.Certificate{c}
		}
		d.tls = cfg
	}
	if g.User != "" {
		u, p, ok := strings.Cut(g.User, ":")
		if !ok {
			var err error
			if p, err = readPassword(stdin, prompt); err != nil {
				return nil, fmt.Errorf("bad user information: %v", err)
			}
		}
		if u == "" {
			return nil, fmt.Errorf("bad user information: empty user name in --user")
		}
		d.user, d.pass = u, p
	}
	return d, nil
}

// readPassword prompts for a password, without echo on a terminal.
func readPassword(stdin io.Reader, prompt io.Writer) (string, error) {
	fmt.Fprint(prompt, "Password: ")
	defer fmt.Fprintln(prompt)
	if f, ok := stdin.(*os.File); ok {
		fd := int(f.Fd())
		if old, err := unix.IoctlGetTermios(fd, unix.TCGETS); err == nil {
			noEcho := *old
			noEcho.Lflag &^= unix.ECHO
			if err := unix.IoctlSetTermios(fd, unix.TCSETS, &noEcho); err == nil {
				defer unix.IoctlSetTermios(fd, unix.TCSETS, old)
			}
		}
	}
	line, err := bufio.NewReader(stdin).ReadString('\n')
	if err != nil && line == "" {
		return "", fmt.Errorf("reading password: %v", err)
	}
	return strings.TrimRight(line, "\r\n"), nil
}

// dial connects to one endpoint, waits until the connection is ready and
// authenticates when --user is set.
func (d *dialer) dial(ctx context.Context, endpoint string) (*conn, error) {
	addr, _, err := parseEndpoint(endpoint)
	if err != nil {
		return nil, err
	}
	c := &conn{addr: addr, user: d.user, pass: d.pass}
	creds := insecure.NewCredentials()
	if d.tls != nil {
		creds = credentials.NewTLS(d.tls.Clone())
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32)),
	}
	if d.user != "" {
		opts = append(opts, grpc.WithUnaryInterceptor(c.unaryAuth), grpc.WithStreamInterceptor(c.streamAuth))
	}
	cc, err := grpc.NewClient("passthrough:///"+addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %v", endpoint, err)
	}
	c.cc = cc
	c.kv, c.watch, c.lease = pb.NewKVClient(cc), pb.NewWatchClient(cc), pb.NewLeaseClient(cc)
	c.maint, c.cluster = pb.NewMaintenanceClient(cc), pb.NewClusterClient(cc)

	timeout := d.g.DialTimeout
	if timeout == 0 {
		timeout = defaultDialTimeout
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cc.Connect()
	for s := cc.GetState(); s != connectivity.Ready; s = cc.GetState() {
		if !cc.WaitForStateChange(wctx, s) {
			cc.Close()
			why := ""
			if err := d.probe(addr); err != nil {
				why = ": " + err.Error()
			}
			return nil, fmt.Errorf("dial %s: not connected within %v%s", endpoint, timeout, why)
		}
	}
	if d.user != "" {
		if err := c.authenticate(wctx); err != nil {
			cc.Close()
			return nil, fmt.Errorf("authenticate to %s as %q: %v", endpoint, d.user, errText(err))
		}
	}
	return c, nil
}

// probe tries a plain TCP (or TLS) connection to addr, to say why gRPC
// could not connect.
func (d *dialer) probe(addr string) error {
	nd := &net.Dialer{Timeout: 2 * time.Second}
	if d.tls == nil {
		c, err := nd.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err
	}
	cfg := d.tls.Clone()
	if cfg.ServerName == "" {
		cfg.ServerName, _, _ = net.SplitHostPort(addr)
	}
	c, err := tls.DialWithDialer(nd, "tcp", addr, cfg)
	if err == nil {
		c.Close()
	}
	return err
}

func (c *conn) close() { c.cc.Close() }

func (c *conn) authenticate(ctx context.Context) error {
	resp, err := pb.NewAuthClient(c.cc).Authenticate(ctx, &pb.AuthenticateRequest{Name: c.user, Password: c.pass})
	if err != nil {
		return err
	}
	tok := resp.Token
	c.token.Store(&tok)
	return nil
}

// refresh authenticates again unless another call already replaced old.
func (c *conn) refresh(ctx context.Context, old *string) error {
	c.authMu.Lock()
	defer c.authMu.Unlock()
	if c.token.Load() != old {
		return nil
	}
	return c.authenticate(ctx)
}

func (c *conn) withToken(ctx context.Context) (context.Context, *string) {
	tok := c.token.Load()
	if tok == nil {
		return ctx, nil
	}
	return metadata.AppendToOutgoingContext(ctx, "token", *tok), tok
}

func invalidToken(err error) bool {
	s, ok := status.FromError(err)
	return ok && s.Code() == codes.Unauthenticated && strings.Contains(s.Message(), "invalid auth token")
}

func (c *conn) unaryAuth(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if method == authenticateMethod {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	tctx, tok := c.withToken(ctx)
	err := invoker(tctx, method, req, reply, cc, opts...)
	if invalidToken(err) && c.refresh(ctx, tok) == nil {
		tctx, _ = c.withToken(ctx)
		err = invoker(tctx, method, req, reply, cc, opts...)
	}
	return err
}

func (c *conn) streamAuth(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	tctx, _ := c.withToken(ctx)
	return streamer(tctx, desc, cc, method, opts...)
}

// leaderEndpoints asks the first endpoint that answers which member leads
// and returns that member's client URLs (--target-leader).
func (d *dialer) leaderEndpoints(ctx context.Context) ([]string, error) {
	var lastErr error
	for _, e := range d.g.Endpoints {
		c, err := d.dial(ctx, e)
		if err != nil {
			lastErr = err
			continue
		}
		defer c.close()
		st, err := c.maint.Status(ctx, &pb.StatusRequest{})
		if err != nil {
			lastErr = fmt.Errorf("status of %s: %v", e, errText(err))
			continue
		}
		ml, err := c.cluster.MemberList(ctx, &pb.MemberListRequest{Linearizable: true})
		if err != nil {
			lastErr = fmt.Errorf("member list from %s: %v", e, errText(err))
			continue
		}
		for _, m := range ml.Members {
			if m.ID == st.Leader && len(m.ClientURLs) > 0 {
				return m.ClientURLs, nil
			}
		}
		lastErr = fmt.Errorf("leader %x not found in the member list from %s", st.Leader, e)
	}
	return nil, fmt.Errorf("failed to find a leader endpoint: %v", lastErr)
}

// dialAll makes n connections, connection i to endpoint i mod the number
// of endpoints (etcd benchmark's round robin), or all to the leader with
// --target-leader.
func (d *dialer) dialAll(ctx context.Context, n int) ([]*conn, error) {
	eps := d.g.Endpoints
	if d.g.TargetLeader {
		var err error
		if eps, err = d.leaderEndpoints(ctx); err != nil {
			return nil, err
		}
	}
	conns := make([]*conn, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range conns {
		wg.Go(func() { conns[i], errs[i] = d.dial(ctx, eps[i%len(eps)]) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			for _, c := range conns {
				if c != nil {
					c.close()
				}
			}
			return nil, err
		}
	}
	return conns, nil
}

// Connect connects, with g's TLS and --user, to the first of g's
// endpoints that answers, for tools that make a few calls (stratautl
// snapshot save). Close the returned connection when done.
func Connect(ctx context.Context, g Global, stdin io.Reader, prompt io.Writer) (*grpc.ClientConn, error) {
	d, err := newDialer(g, stdin, prompt)
	if err != nil {
		return nil, err
	}
	var errs []string
	for _, e := range g.Endpoints {
		c, err := d.dial(ctx, e)
		if err == nil {
			return c.cc, nil
		}
		errs = append(errs, err.Error())
	}
	if len(errs) == 0 {
		return nil, fmt.Errorf("no endpoints")
	}
	return nil, fmt.Errorf("no endpoint answered: %s", strings.Join(errs, "; "))
}
