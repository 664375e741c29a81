package harness

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A Network is a set of fault-injecting TCP proxies, one in front of each
// member's peer port, and the faults they apply.
//
// Each member listens on its own peer port and advertises its proxy's
// address (NewClusterWithProxies arranges this), so every peer connection
// to member T is a connection to T's proxy, which dials T. On such a
// connection, dialed by member D:
//
//   - the bytes D→T (requests) are subject to the faults of the ordered
//     pair (D, T);
//   - the bytes T→D (responses, and the raft streams, which are responses
//     to a GET the receiving member opened) to the faults of (T, D).
//
// The proxy learns D from the X-Server-From header (D's member id in hex)
// that etcd's peer protocol puts on every request: it parses each request
// head on the connection (Content-Length and chunked bodies, so keep-alive
// connections are followed from request to request) and forwards the
// bytes unchanged. Until a request names its sender the connection's
// source is Unknown (a connection that first carries /raft/probing,
// /members or /version); once named it keeps that source, because a
// connection belongs to one process. Bytes of an Unknown source match only
// rules whose other side is Any, such as those Isolate sets. A connection
// that does not start with an HTTP request (peer TLS) is relayed as raw
// bytes and stays Unknown.
//
// The faults (Fault) are applied to each chunk the proxy reads, in the
// order they are read:
//
//   - Delay and Jitter hold a chunk back; chunks of one direction are
//     never reordered.
//   - Drop loses a chunk with a probability. TCP never loses bytes
//     silently, so the proxy resets the connection (both sides see a
//     RST), as a failing link or middlebox would.
//   - Blackhole discards the bytes (and an end of stream) silently and
//     keeps the connection open, as a partition that drops packets does.
//     Such a connection's framing is broken for good, so it is closed
//     once no direction of it is blackholed any more (Heal and friends).
//
// Rules are set per ordered pair of member names; Any in either place
// matches every member (and Any as the source also matches Unknown).
// When several rules match, the effective fault is their union: blackhole
// if any blackholes, the largest Delay and Jitter, and a drop probability
// of 1-Π(1-p).
//
// Randomness (jitter, drops) comes from one generator seeded by the
// caller, so a run that prints its seed can be replayed (the interleaving
// of connections still depends on timing).
//
// Counters per ordered pair (Stats) say how many bytes were forwarded,
// dropped, delayed and how many connections a drop reset, so a test can
// assert that a fault took effect.
type Network struct {
	seed uint64

	mu      sync.Mutex
	rng     *rand.Rand
	rules   map[pair]Fault
	names   map[uint64]string // member id → name
	ids     map[string]uint64
	proxies []*Proxy
	conns   map[*proxyConn]struct{}
	stats   map[pair]*pairCounters
	closed  bool
}

// Any in a rule's from or to matches every member.
const Any = "*"

// Unknown is the source of a connection none of whose requests so far
// carried an X-Server-From naming a member of the network.
const Unknown = "?"

// Fault is what a proxy does to the bytes of one direction. The zero Fault
// forwards them untouched.
type Fault struct {
	// Delay holds each chunk back this long, plus a uniformly random
	// duration in [0, Jitter). Order is preserved.
	Delay, Jitter time.Duration
	// Drop is the probability in [0, 1] that a chunk is lost, which
	// resets its connection.
	Drop float64
	// Blackhole discards the bytes silently and keeps the connection open.
	Blackhole bool
}

func (f Fault) String() string {
	var parts []string
	if f.Blackhole {
		parts = append(parts, "blackhole")
	}
	if f.Delay > 0 || f.Jitter > 0 {
		parts = append(parts, fmt.Sprintf("delay %v+[0,%v)", f.Delay, f.Jitter))
	}
	if f.Drop > 0 {
		parts = append(parts, fmt.Sprintf("drop p=%g", f.Drop))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// union is the effective fault of several matching rules.
func (f Fault) union(g Fault) Fault {
	f.Blackhole = f.Blackhole || g.Blackhole
	f.Delay = max(f.Delay, g.Delay)
	f.Jitter = max(f.Jitter, g.Jitter)
	f.Drop = 1 - (1-f.Drop)*(1-g.Drop)
	return f
}

// PairStats counts what the proxies did to the bytes of one ordered pair.
type PairStats struct {
	Forwarded int64 // bytes written to the receiving side
	Dropped   int64 // bytes discarded by a blackhole or lost by a drop
	Delayed   int64 // chunks held back by a delay
	Resets    int64 // connections reset by a drop
	Conns     int64 // connections whose source and target are this pair
}

func (s PairStats) String() string {
	return fmt.Sprintf("forwarded=%dB dropped=%dB delayed=%d resets=%d conns=%d", s.Forwarded, s.Dropped, s.Delayed, s.Resets, s.Conns)
}

type pair struct{ from, to string }

type pairCounters struct {
	forwarded, dropped, delayed, resets, conns atomic.Int64
}

// NewNetwork returns an empty network whose random choices come from seed.
func NewNetwork(seed uint64) *Network {
	return &Network{
		seed:  seed,
		rng:   rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		rules: map[pair]Fault{},
		names: map[uint64]string{},
		ids:   map[string]uint64{},
		conns: map[*proxyConn]struct{}{},
		stats: map[pair]*pairCounters{},
	}
}

// Seed is the seed the network was created with.
func (n *Network) Seed() uint64 { return n.seed }

// AddProxy starts a proxy for member name with id, listening on
// listenAddr ("127.0.0.1:0" for a free port) and forwarding to the
// member's peer listener at target (host:port). The member must advertise
// Proxy.URL as its peer URL.
func (n *Network) AddProxy(name string, id uint64, listenAddr, target string) (*Proxy, error) {
	if name == Any || name == Unknown || name == "" {
		return nil, fmt.Errorf("harness: %q is not a member name", name)
	}
	l, err := net.Listen("tcp", listenAddr)
	if err != nil {
		return nil, fmt.Errorf("harness: proxy for %s: %w", name, err)
	}
	p := &Proxy{n: n, name: name, l: l, target: target}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		l.Close()
		return nil, errors.New("harness: network closed")
	}
	if _, dup := n.ids[name]; dup {
		n.mu.Unlock()
		l.Close()
		return nil, fmt.Errorf("harness: a proxy for %s exists", name)
	}
	n.ids[name] = id
	n.names[id] = name
	n.proxies = append(n.proxies, p)
	n.mu.Unlock()
	go p.serve()
	return p, nil
}

// ID is member name's id as the network knows it (0 if none).
func (n *Network) ID(name string) uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ids[name]
}

// Members are the names of the members behind the network's proxies,
// sorted.
func (n *Network) Members() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for name := range n.ids {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// Set makes f the rule for the bytes from → to (member names or Any),
// replacing the pair's previous rule. The zero Fault removes it.
func (n *Network) Set(from, to string, f Fault) {
	n.mu.Lock()
	if f == (Fault{}) {
		delete(n.rules, pair{from, to})
	} else {
		n.rules[pair{from, to}] = f
	}
	n.mu.Unlock()
	n.closeHealed()
}

// Partition blackholes the bytes from → to: a one-way partition. Bytes
// to → from still flow.
func (n *Network) Partition(from, to string) {
	n.Set(from, to, Fault{Blackhole: true})
}

// PartitionBoth blackholes the bytes between a and b in both directions.
func (n *Network) PartitionBoth(a, b string) {
	n.Partition(a, b)
	n.Partition(b, a)
}

// Isolate blackholes every byte to and from member name, including the
// connections to it whose source is Unknown.
func (n *Network) Isolate(name string) {
	n.Partition(name, Any)
	n.Partition(Any, name)
}

// Delay holds the bytes from → to back by d plus up to jitter.
func (n *Network) Delay(from, to string, d, jitter time.Duration) {
	n.Set(from, to, Fault{Delay: d, Jitter: jitter})
}

// Drop loses each chunk from → to with probability p, resetting its
// connection.
func (n *Network) Drop(from, to string, p float64) {
	n.Set(from, to, Fault{Drop: p})
}

// Heal removes the rule of the exact pair from → to (as set; Heal(a, Any)
// does not remove a rule set for (a, b)).
func (n *Network) Heal(from, to string) { n.Set(from, to, Fault{}) }

// HealMember removes every rule that names member name as from or to:
// the inverse of Isolate, and of every partition involving it.
func (n *Network) HealMember(name string) {
	n.mu.Lock()
	for p := range n.rules {
		if p.from == name || p.to == name {
			delete(n.rules, p)
		}
	}
	n.mu.Unlock()
	n.closeHealed()
}

// HealAll removes every rule.
func (n *Network) HealAll() {
	n.mu.Lock()
	clear(n.rules)
	n.mu.Unlock()
	n.closeHealed()
}

// Fault is the effective fault for the bytes from → to now (from may be
// Unknown).
func (n *Network) Fault(from, to string) Fault {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.faultLocked(from, to)
}

func (n *Network) faultLocked(from, to string) Fault {
	var f Fault
	froms := []string{Any}
	if from != Unknown {
		froms = append(froms, from)
	}
	tos := []string{Any}
	if to != Unknown {
		tos = append(tos, to)
	}
	for _, a := range froms {
		for _, b := range tos {
			if g, ok := n.rules[pair{a, b}]; ok {
				f = f.union(g)
			}
		}
	}
	return f
}

// Stats are the counters of the bytes from → to. Either may be Any, which
// sums over every member (and Unknown); from may be Unknown.
func (n *Network) Stats(from, to string) PairStats {
	n.mu.Lock()
	defer n.mu.Unlock()
	var s PairStats
	for p, c := range n.stats {
		if (from == Any || from == p.from) && (to == Any || to == p.to) {
			s.Forwarded += c.forwarded.Load()
			s.Dropped += c.dropped.Load()
			s.Delayed += c.delayed.Load()
			s.Resets += c.resets.Load()
			s.Conns += c.conns.Load()
		}
	}
	return s
}

// Report is one line per ordered pair with any traffic, for a test log.
func (n *Network) Report() string {
	n.mu.Lock()
	var keys []pair
	for p := range n.stats {
		keys = append(keys, p)
	}
	n.mu.Unlock()
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].from != keys[j].from {
			return keys[i].from < keys[j].from
		}
		return keys[i].to < keys[j].to
	})
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s→%s: %s\n", k.from, k.to, n.Stats(k.from, k.to))
	}
	return b.String()
}

// Close stops every proxy and closes every connection through them.
func (n *Network) Close() error {
	n.mu.Lock()
	n.closed = true
	proxies := n.proxies
	var conns []*proxyConn
	for c := range n.conns {
		conns = append(conns, c)
	}
	n.mu.Unlock()
	var errs []error
	for _, p := range proxies {
		if err := p.l.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	for _, c := range conns {
		c.close(false)
	}
	return errors.Join(errs...)
}

func (n *Network) counters(from, to string) *pairCounters {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := n.stats[pair{from, to}]
	if c == nil {
		c = &pairCounters{}
		n.stats[pair{from, to}] = c
	}
	return c
}

// chance reports true with probability p.
func (n *Network) chance(p float64) bool {
	if p <= 0 {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.rng.Float64() < p
}

func (n *Network) jitter(j time.Duration) time.Duration {
	if j <= 0 {
		return 0
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return time.Duration(n.rng.Int64N(int64(j)))
}

// closeHealed closes the connections that lost bytes to a blackhole and
// whose directions are no longer blackholed.
func (n *Network) closeHealed() {
	n.mu.Lock()
	var heal []*proxyConn
	for c := range n.conns {
		if !c.broken.Load() {
			continue
		}
		from, to := c.source(), c.p.name
		if !n.faultLocked(from, to).Blackhole && !n.faultLocked(to, from).Blackhole {
			heal = append(heal, c)
		}
	}
	n.mu.Unlock()
	for _, c := range heal {
		c.close(false)
	}
}

// Proxy is the proxy in front of one member's peer port.
type Proxy struct {
	n      *Network
	name   string
	l      net.Listener
	target string
}

// Name is the member behind the proxy.
func (p *Proxy) Name() string { return p.name }

// Addr is the proxy's listen address (host:port).
func (p *Proxy) Addr() string { return p.l.Addr().String() }

// URL is the peer URL the member advertises: http://Addr.
func (p *Proxy) URL() string { return "http://" + p.Addr() }

// Target is the member's own peer listener the proxy dials.
func (p *Proxy) Target() string { return p.target }

func (p *Proxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		go p.handle(c.(*net.TCPConn))
	}
}

func (p *Proxy) handle(client *net.TCPConn) {
	d, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		// The member is down: the dialer sees its connection reset, much
		// as it would see a refused connection without the proxy.
		_ = client.SetLinger(0)
		client.Close()
		return
	}
	c := &proxyConn{p: p, client: client, server: d.(*net.TCPConn), done: make(chan struct{})}
	n := p.n
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		client.Close()
		d.Close()
		return
	}
	n.conns[c] = struct{}{}
	n.mu.Unlock()
	up := &pipe{c: c, up: true, dst: c.server, q: make(chan chunk, 256)}
	down := &pipe{c: c, dst: c.client, q: make(chan chunk, 256)}
	go up.write()
	go down.write()
	go c.readRequests(up)
	go c.readRaw(c.server, down)
}

// proxyConn is one connection through a proxy: client is the dialer's
// side, server the member's.
type proxyConn struct {
	p              *Proxy
	client, server *net.TCPConn
	from           atomic.Pointer[string] // the dialer, once a request names it
	broken         atomic.Bool            // a blackhole discarded some of its bytes
	halfClosed     atomic.Int32           // directions that ended with a FIN
	once           sync.Once
	done           chan struct{}
}

func (c *proxyConn) source() string {
	if s := c.from.Load(); s != nil {
		return *s
	}
	return Unknown
}

// close ends the connection on both sides; reset sends a RST instead of a
// FIN.
func (c *proxyConn) close(reset bool) {
	c.once.Do(func() {
		if reset {
			_ = c.client.SetLinger(0)
			_ = c.server.SetLinger(0)
		}
		c.client.Close()
		c.server.Close()
		close(c.done)
		n := c.p.n
		n.mu.Lock()
		delete(n.conns, c)
		n.mu.Unlock()
	})
}

// identify records the dialer named by a request's X-Server-From, if it is
// a member of the network and the connection has no source yet.
func (c *proxyConn) identify(hexID string) {
	if hexID == "" || c.from.Load() != nil {
		return
	}
	id, err := strconv.ParseUint(hexID, 16, 64)
	if err != nil {
		return
	}
	n := c.p.n
	n.mu.Lock()
	name, ok := n.names[id]
	n.mu.Unlock()
	if ok && c.from.CompareAndSwap(nil, &name) {
		n.counters(name, c.p.name).conns.Add(1)
	}
}

type chunk struct {
	b   []byte
	at  time.Time // when to write it; zero: at once
	eof bool      // the source ended: half-close the destination
	cnt *pairCounters
}

// pipe is one direction of a connection: what the reader hands it is
// written to dst in order, each chunk no earlier than its time.
type pipe struct {
	c    *proxyConn
	up   bool // dialer → member
	dst  *net.TCPConn
	q    chan chunk
	last time.Time
}

// ends is the ordered pair the direction's bytes travel between now.
func (p *pipe) ends() (from, to string) {
	if p.up {
		return p.c.source(), p.c.p.name
	}
	return p.c.p.name, p.c.source()
}

// send applies the current fault to b and queues what survives. It returns
// false once the connection is gone.
func (p *pipe) send(b []byte) bool {
	if len(b) == 0 {
		return true
	}
	n := p.c.p.n
	from, to := p.ends()
	f := n.Fault(from, to)
	cnt := n.counters(from, to)
	if f.Blackhole {
		cnt.dropped.Add(int64(len(b)))
		p.markBroken(from, to)
		return true
	}
	if n.chance(f.Drop) {
		cnt.dropped.Add(int64(len(b)))
		cnt.resets.Add(1)
		p.c.close(true)
		return false
	}
	return p.enqueue(chunk{b: b, cnt: cnt}, f, n)
}

// end handles the end of the source: a FIN is forwarded as a half-close
// (after the queued chunks), unless the direction is blackholed, which
// swallows it as it swallows bytes. A read error ends the connection.
func (p *pipe) end(err error) {
	n := p.c.p.n
	from, to := p.ends()
	f := n.Fault(from, to)
	if f.Blackhole {
		p.markBroken(from, to)
		return
	}
	if !errors.Is(err, io.EOF) {
		p.c.close(false)
		return
	}
	p.enqueue(chunk{eof: true}, f, n)
}

// markBroken records that a blackhole discarded some of the connection's
// bytes. Should the fault have been lifted meanwhile, closeHealed may have
// missed the connection, so it is closed here.
func (p *pipe) markBroken(from, to string) {
	p.c.broken.Store(true)
	n := p.c.p.n
	if !n.Fault(from, to).Blackhole && !n.Fault(to, from).Blackhole {
		p.c.close(false)
	}
}

func (p *pipe) enqueue(ch chunk, f Fault, n *Network) bool {
	if d := f.Delay + n.jitter(f.Jitter); d > 0 {
		ch.at = time.Now().Add(d)
		if ch.cnt != nil {
			ch.cnt.delayed.Add(1)
		}
	}
	if !p.last.IsZero() && ch.at.Before(p.last) {
		ch.at = p.last // never overtake an earlier, longer-delayed chunk
	}
	p.last = ch.at
	select {
	case p.q <- ch:
		return true
	case <-p.c.done:
		return false
	}
}

func (p *pipe) write() {
	for {
		var ch chunk
		select {
		case ch = <-p.q:
		case <-p.c.done:
			return
		}
		if wait := time.Until(ch.at); !ch.at.IsZero() && wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-p.c.done:
				t.Stop()
				return
			}
		}
		if ch.eof {
			_ = p.dst.CloseWrite()
			if p.c.halfClosed.Add(1) == 2 {
				p.c.close(false)
			}
			return
		}
		if _, err := p.dst.Write(ch.b); err != nil {
			p.c.close(false)
			return
		}
		ch.cnt.forwarded.Add(int64(len(ch.b)))
	}
}

const chunkSize = 32 << 10

// readRaw relays src to p chunk by chunk.
func (c *proxyConn) readRaw(src io.Reader, p *pipe) {
	for {
		buf := make([]byte, chunkSize)
		k, err := src.Read(buf)
		if k > 0 && !p.send(buf[:k]) {
			return
		}
		if err != nil {
			p.end(err)
			return
		}
	}
}

// maxHead bounds a request head; a longer one is not HTTP as the peer
// protocol speaks it, and the rest of the connection is relayed raw.
const maxHead = 64 << 10

var errNotHTTP = errors.New("not an HTTP/1.x request")

// readRequests relays the dialer's bytes request by request, learning the
// connection's source from the request heads.
func (c *proxyConn) readRequests(p *pipe) {
	br := bufio.NewReaderSize(c.client, maxHead)
	for {
		head, h, err := readHead(br)
		if err == nil {
			c.identify(h.from)
		}
		if !p.send(head) {
			return
		}
		if err == nil {
			switch {
			case h.upgrade:
				err = errNotHTTP
			case h.chunked:
				err = c.relayChunked(br, p)
			case h.length > 0:
				err = relayN(br, p, h.length)
			}
		}
		if errors.Is(err, errNotHTTP) {
			c.readRaw(br, p)
			return
		}
		if err != nil {
			p.end(err)
			return
		}
	}
}

type reqHead struct {
	from    string // X-Server-From
	length  int64  // Content-Length
	chunked bool   // Transfer-Encoding: chunked
	upgrade bool   // a protocol switch: what follows is not HTTP
}

// readHead reads one request head, through its blank line, and returns
// its bytes (also on error: what was read must still be relayed).
func readHead(br *bufio.Reader) ([]byte, reqHead, error) {
	var h reqHead
	// A TLS handshake or anything else that does not start like a request
	// line is not parsed: reading it line by line could wait forever.
	first, err := br.Peek(1)
	if err != nil {
		return nil, h, err
	}
	if first[0] < 'A' || first[0] > 'Z' {
		return nil, h, errNotHTTP
	}
	var head []byte
	lines := 0
	for {
		line, err := br.ReadSlice('\n')
		head = append(head, line...)
		if errors.Is(err, bufio.ErrBufferFull) || len(head) > maxHead {
			return head, h, errNotHTTP
		}
		if err != nil {
			return head, h, err
		}
		lines++
		s := strings.TrimRight(string(line), "\r\n")
		if lines == 1 {
			if !strings.Contains(s, " HTTP/1.") {
				return head, h, errNotHTTP
			}
			continue
		}
		if s == "" {
			return head, h, nil
		}
		name, value, ok := strings.Cut(s, ":")
		if !ok {
			return head, h, errNotHTTP
		}
		value = strings.TrimSpace(value)
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "x-server-from":
			h.from = value
		case "content-length":
			k, err := strconv.ParseInt(value, 10, 64)
			if err != nil || k < 0 {
				return head, h, errNotHTTP
			}
			h.length = k
		case "transfer-encoding":
			h.chunked = strings.Contains(strings.ToLower(value), "chunked")
		case "upgrade":
			h.upgrade = true
		}
	}
}

// relayN relays the next k bytes of br.
func relayN(br *bufio.Reader, p *pipe, k int64) error {
	for k > 0 {
		buf := make([]byte, min(k, chunkSize))
		m, err := br.Read(buf)
		if m > 0 {
			k -= int64(m)
			if !p.send(buf[:m]) {
				return net.ErrClosed
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// relayChunked relays a chunked body: size lines, chunks and trailer.
func (c *proxyConn) relayChunked(br *bufio.Reader, p *pipe) error {
	for {
		line, err := relayLine(br, p)
		if err != nil {
			return err
		}
		sz, _, _ := strings.Cut(strings.TrimSpace(string(line)), ";")
		k, err := strconv.ParseInt(sz, 16, 64)
		if err != nil || k < 0 {
			return errNotHTTP
		}
		if k == 0 {
			// Trailer fields, then the blank line.
			for {
				line, err := relayLine(br, p)
				if err != nil {
					return err
				}
				if strings.TrimRight(string(line), "\r\n") == "" {
					return nil
				}
			}
		}
		// The chunk and its CRLF.
		if err := relayN(br, p, k+2); err != nil {
			return err
		}
	}
}

// relayLine relays one CRLF-terminated line and returns it; a line longer
// than the reader's buffer is not HTTP.
func relayLine(br *bufio.Reader, p *pipe) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		err = errNotHTTP
	}
	line = bytes.Clone(line)
	if !p.send(line) {
		return nil, net.ErrClosed
	}
	return line, err
}
