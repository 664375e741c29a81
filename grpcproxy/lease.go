package grpcproxy

// Lease keep-alive coalescing, as etcd's proxy does with its lessor:
// every client keep-alive stream with the same credentials shares one
// keep-alive stream to the member, and concurrent keep-alives of one
// lease (from any of those clients) become one upstream request whose
// answer each of them gets.
//
// A group is keyed by the caller's auth token (empty without auth) and
// leader requirement, so that a client's keep-alive never travels under
// another's identity or guarantee. It
// opens its upstream stream when its first client stream arrives and
// closes it when its last one leaves. When the upstream stream fails (the
// member died, it lost its leader), every client stream of the group ends
// with that status, as it would have on a direct connection, and the
// clients' lessors open new streams, which the proxy's connection sends
// to the next member.

import (
	"context"
	"errors"
	"io"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

type leaseProxy struct {
	p      *Proxy
	mu     sync.Mutex
	groups map[string]*kaGroup

	upstreams     prometheus.Gauge
	clientStreams prometheus.Gauge
	requests      *prometheus.CounterVec // side: client, upstream
}

func newLeaseProxy(p *Proxy) *leaseProxy {
	lp := &leaseProxy{p: p, groups: map[string]*kaGroup{},
		upstreams: prometheus.NewGauge(prometheus.GaugeOpts{Name: "strata_grpc_proxy_upstream_lease_keepalive_streams",
			Help: "Lease keep-alive streams the proxy holds open on the members (one per group of clients with the same credentials)."}),
		clientStreams: prometheus.NewGauge(prometheus.GaugeOpts{Name: "strata_grpc_proxy_lease_keepalive_client_streams",
			Help: "Lease keep-alive streams of the proxy's clients."}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_grpc_proxy_lease_keepalive_requests_total",
			Help: "Lease keep-alive requests: those of the clients (side=client) and those sent to the members after coalescing (side=upstream)."},
			[]string{"side"}),
	}
	p.reg.MustRegister(lp.upstreams, lp.clientStreams, lp.requests)
	return lp
}

// kaGroup is one upstream keep-alive stream and the client streams it
// serves.
type kaGroup struct {
	lp     *leaseProxy
	key    string
	cancel context.CancelFunc
	up     pb.Lease_LeaseKeepAliveClient
	sendMu sync.Mutex

	mu       sync.Mutex
	clients  map[*kaClient]bool
	waiting  map[int64][]*kaClient // lease -> clients owed an answer, one entry per request
	inflight map[int64]bool        // lease -> a request is on its way upstream
	err      error                 // set once the upstream stream failed
	done     chan struct{}
}

type kaClient struct {
	out  chan *pb.LeaseKeepAliveResponse
	gone chan struct{}
}

// keepAlive serves one client's LeaseKeepAlive stream.
func (lp *leaseProxy) keepAlive(ss grpc.ServerStream) error {
	c := &kaClient{out: make(chan *pb.LeaseKeepAliveResponse, 64), gone: make(chan struct{})}
	var g *kaGroup
	for {
		var err error
		if g, err = lp.join(ss.Context()); err != nil {
			return err
		}
		if g.add(c) {
			break
		}
		if g.err != nil {
			return g.err
		}
		// Its last client left while this one joined: open a new one.
	}
	lp.clientStreams.Inc()
	defer func() {
		close(c.gone)
		lp.clientStreams.Dec()
		lp.leave(g, c)
	}()
	recvErr := make(chan error, 1)
	go func() {
		for {
			r := &pb.LeaseKeepAliveRequest{}
			if err := ss.RecvMsg(r); err != nil {
				recvErr <- err
				return
			}
			lp.requests.WithLabelValues("client").Inc()
			if err := g.request(r.ID, c); err != nil {
				recvErr <- err
				return
			}
		}
	}()
	for {
		select {
		case resp := <-c.out:
			if err := ss.SendMsg(resp); err != nil {
				return err
			}
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-g.done:
			return g.err
		}
	}
}

// join returns the group of the caller's credentials, opening it (and
// its upstream stream) if it is not open.
func (lp *leaseProxy) join(ctx context.Context) (*kaGroup, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	key := ""
	for _, k := range []string{"token", "hasleader"} {
		if v := md.Get(k); len(v) > 0 {
			key += v[0]
		}
		key += "\x00"
	}
	lp.mu.Lock()
	defer lp.mu.Unlock()
	if g := lp.groups[key]; g != nil {
		return g, nil
	}
	// The group outlives the client that opened it: its context is the
	// proxy's, with that client's credentials and leader requirement.
	out := metadata.MD{}
	for _, k := range []string{"token", "hasleader"} {
		if v := md.Get(k); len(v) > 0 {
			out.Set(k, v...)
		}
	}
	gctx, cancel := context.WithCancel(metadata.NewOutgoingContext(context.Background(), out))
	up, err := pb.NewLeaseClient(lp.p.cc).LeaseKeepAlive(gctx)
	if err != nil {
		cancel()
		return nil, err
	}
	g := &kaGroup{lp: lp, key: key, cancel: cancel, up: up, clients: map[*kaClient]bool{},
		waiting: map[int64][]*kaClient{}, inflight: map[int64]bool{}, done: make(chan struct{})}
	lp.groups[key] = g
	lp.upstreams.Inc()
	go g.recv()
	return g, nil
}

// leave detaches c; the last client closes the group.
func (lp *leaseProxy) leave(g *kaGroup, c *kaClient) {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	g.mu.Lock()
	delete(g.clients, c)
	last := len(g.clients) == 0
	g.mu.Unlock()
	if last {
		g.close(nil)
	}
}

// close ends the group once: its upstream stream, and (with err) its
// client streams. Called with lp.mu held.
func (g *kaGroup) close(err error) {
	g.mu.Lock()
	select {
	case <-g.done:
		g.mu.Unlock()
		return
	default:
	}
	g.err = err
	close(g.done)
	g.mu.Unlock()
	g.cancel()
	if g.lp.groups[g.key] == g {
		delete(g.lp.groups, g.key)
	}
	g.lp.upstreams.Dec()
}

func (g *kaGroup) add(c *kaClient) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.done:
		return false
	default:
	}
	g.clients[c] = true
	return true
}

// request owes c an answer for lease id, and sends the lease upstream
// unless a request for it is already on its way.
func (g *kaGroup) request(id int64, c *kaClient) error {
	g.mu.Lock()
	if g.err != nil {
		g.mu.Unlock()
		return g.err
	}
	g.waiting[id] = append(g.waiting[id], c)
	send := !g.inflight[id]
	g.inflight[id] = true
	g.mu.Unlock()
	if !send {
		return nil
	}
	g.lp.requests.WithLabelValues("upstream").Inc()
	g.sendMu.Lock()
	// A failed send fails recv too, which ends the group with the
	// stream's status.
	_ = g.up.Send(&pb.LeaseKeepAliveRequest{ID: id})
	g.sendMu.Unlock()
	return nil
}

// recv hands each upstream answer to the clients waiting for its lease.
func (g *kaGroup) recv() {
	for {
		resp, err := g.up.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("grpc-proxy: the member closed the lease keep-alive stream")
			}
			g.lp.mu.Lock()
			g.close(err)
			g.lp.mu.Unlock()
			return
		}
		g.mu.Lock()
		waiters := g.waiting[resp.ID]
		delete(g.waiting, resp.ID)
		delete(g.inflight, resp.ID)
		g.mu.Unlock()
		for _, c := range waiters {
			select {
			case c.out <- resp:
			case <-c.gone:
			case <-g.done:
			}
		}
	}
}
