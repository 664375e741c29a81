// Package tcpproxy is the forwarding of `strata gateway start`, etcd's
// stateless gateway: a TCP proxy that hands each client connection, whole
// and unread, to one of the cluster's client endpoints. It knows nothing
// of gRPC or TLS (a TLS client handshakes with the member itself).
//
// Choosing an endpoint follows etcd's gateway (and RFC 2782 for
// endpoints found in DNS SRV records): among the active endpoints of
// the best (lowest) priority, one is drawn at random in proportion to its
// weight; endpoints of weight 0 take turns, and when weighted ones exist
// get about one connection in a hundred. Endpoints given on the command
// line all have priority and weight 0, so connections go round robin.
//
// An endpoint that refuses a dial is marked inactive and the next one is
// tried; every RetryDelay the inactive ones are dialed again and those
// that answer come back. A client whose every endpoint is inactive is
// disconnected.
package tcpproxy

import (
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"time"
)

// Endpoint is one member's client address with its SRV priority and
// weight (0 and 0 for a listed endpoint).
type Endpoint struct {
	Host             string
	Port             uint16
	Priority, Weight uint16
}

// Addr is host:port.
func (e Endpoint) Addr() string { return net.JoinHostPort(e.Host, strconv.Itoa(int(e.Port))) }

// DefaultRetryDelay is how long an endpoint stays inactive before it is
// dialed again, as etcd's --retry-delay.
const DefaultRetryDelay = time.Minute

// dialTimeout bounds one dial to an endpoint, so that a member that
// swallows SYNs is given up on (and marked inactive) instead of holding
// the client forever.
const dialTimeout = 10 * time.Second

// Proxy forwards connections accepted on Listener to Endpoints.
type Proxy struct {
	Logger     *slog.Logger
	Listener   net.Listener
	Endpoints  []Endpoint
	RetryDelay time.Duration // 0 means DefaultRetryDelay

	stopOnce sync.Once
	done     chan struct{}

	mu        sync.Mutex // guards remotes' active flags, pickCount and rnd
	remotes   []*remote
	pickCount int        // the round robin's position
	rnd       *rand.Rand // the weighted draw; seeded at random unless a test sets it
}

type remote struct {
	ep     Endpoint
	active bool // under Proxy.mu
}

// Run logs etcd's "ready to proxy client requests" line and serves until
// the listener fails or Stop is called (then it returns nil).
func (p *Proxy) Run() error {
	p.done = make(chan struct{})
	if p.RetryDelay <= 0 {
		p.RetryDelay = DefaultRetryDelay
	}
	if p.Logger == nil {
		p.Logger = slog.New(slog.DiscardHandler)
	}
	addrs := make([]string, 0, len(p.Endpoints))
	for _, e := range p.Endpoints {
		p.remotes = append(p.remotes, &remote{ep: e, active: true})
		addrs = append(addrs, e.Addr())
	}
	p.Logger.Info("ready to proxy client requests", "endpoints", addrs)
	go p.monitor()
	for {
		c, err := p.Listener.Accept()
		if err != nil {
			select {
			case <-p.done:
				return nil
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		go p.serve(c)
	}
}

// Stop closes the listener and stops re-dialing inactive endpoints;
// connections already forwarded run until either side closes.
func (p *Proxy) Stop() {
	p.stopOnce.Do(func() {
		close(p.done)
		p.Listener.Close()
	})
}

func (p *Proxy) serve(in net.Conn) {
	var out net.Conn
	for out == nil {
		r := p.pick()
		if r == nil {
			in.Close()
			return
		}
		c, err := net.DialTimeout("tcp", r.ep.Addr(), dialTimeout)
		if err != nil {
			p.setActive(r, false)
			p.Logger.Warn("deactivated endpoint", "address", r.ep.Addr(), "interval", p.RetryDelay, "error", err)
			continue
		}
		out = c
	}
	// Each direction closes both connections when it ends, so the other
	// copy's blocked read returns too.
	go func() {
		io.Copy(in, out)
		in.Close()
		out.Close()
	}()
	io.Copy(out, in)
	out.Close()
	in.Close()
}

// pick chooses the endpoint for the next connection (see the package
// comment), or nil when none is active.
func (p *Proxy) pick() *remote {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rnd == nil {
		p.rnd = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	var weighted, unweighted []*remote
	best, total := uint16(65535), 0
	for _, r := range p.remotes {
		switch {
		case !r.active:
			continue
		case r.ep.Priority < best:
			best, total = r.ep.Priority, 0
			weighted, unweighted = nil, nil
		case r.ep.Priority > best:
			continue
		}
		if r.ep.Weight > 0 {
			weighted = append(weighted, r)
			total += int(r.ep.Weight)
		} else {
			unweighted = append(unweighted, r)
		}
	}
	if len(weighted) > 0 {
		if len(unweighted) > 0 && p.rnd.IntN(100) == 1 {
			r := unweighted[p.pickCount%len(unweighted)]
			p.pickCount++
			return r
		}
		n := p.rnd.IntN(total)
		for _, r := range weighted {
			if n -= int(r.ep.Weight); n < 0 {
				return r
			}
		}
	}
	for range p.remotes {
		r := p.remotes[p.pickCount%len(p.remotes)]
		p.pickCount++
		if r.active && r.ep.Priority == best {
			return r
		}
	}
	return nil
}

func (p *Proxy) setActive(r *remote, active bool) {
	p.mu.Lock()
	r.active = active
	p.mu.Unlock()
}

// monitor dials the inactive endpoints every RetryDelay and brings back
// those that answer.
func (p *Proxy) monitor() {
	t := time.NewTicker(p.RetryDelay)
	defer t.Stop()
	for {
		select {
		case <-p.done:
			return
		case <-t.C:
		}
		p.mu.Lock()
		var inactive []*remote
		for _, r := range p.remotes {
			if !r.active {
				inactive = append(inactive, r)
			}
		}
		p.mu.Unlock()
		for _, r := range inactive {
			go func() {
				c, err := net.DialTimeout("tcp", r.ep.Addr(), dialTimeout)
				if err != nil {
					p.Logger.Warn("failed to activate endpoint (stay inactive for another interval)",
						"address", r.ep.Addr(), "interval", p.RetryDelay, "error", err)
					return
				}
				c.Close()
				p.setActive(r, true)
				p.Logger.Info("activated", "address", r.ep.Addr())
			}()
		}
	}
}
