package harness

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/strata-db/strata/internal/poll"
)

// peerBackend is an HTTP server standing in for member b's peer port: it
// records each request (path, X-Server-From, body) and answers "ok:<body>".
type peerBackend struct {
	srv  *httptest.Server
	mu   sync.Mutex
	reqs []string
}

func newPeerBackend(t *testing.T) *peerBackend {
	b := &peerBackend{}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		b.mu.Lock()
		b.reqs = append(b.reqs, fmt.Sprintf("%s %s from=%q body=%q", r.Method, r.URL.Path, r.Header.Get("X-Server-From"), body))
		b.mu.Unlock()
		fmt.Fprintf(w, "ok:%s", body)
	}))
	t.Cleanup(b.srv.Close)
	return b
}

func (b *peerBackend) requests() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.reqs...)
}

// testNet is a network with members a (id 0xa) and b (id 0xb); only b has
// a proxy, in front of target.
func testNet(t *testing.T, target string) (*Network, *Proxy) {
	t.Helper()
	n := NewNetwork(1)
	t.Cleanup(func() { n.Close() })
	p, err := n.AddProxy("b", 0xb, "127.0.0.1:0", target)
	if err != nil {
		t.Fatal(err)
	}
	// a has no proxy here; registering its id is all the proxy of b needs.
	n.mu.Lock()
	n.ids["a"], n.names[0xa] = 0xa, "a"
	n.mu.Unlock()
	return n, p
}

func dial(t *testing.T, p *Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func roundTrip(t *testing.T, c net.Conn, br *bufio.Reader, req string) string {
	t.Helper()
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(poll.Deadline))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("response to %q: %v", req, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// readErr waits (up to poll.Deadline) for the connection to end and
// returns the read error.
func readErr(t *testing.T, c net.Conn) error {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(poll.Deadline))
	_, err := io.Copy(io.Discard, c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the connection is still open after %v", poll.Deadline)
	}
	if err == nil {
		err = io.EOF
	}
	return err
}

const (
	probeReq  = "GET /raft/probing HTTP/1.1\r\nHost: b\r\n\r\n"
	lengthReq = "POST /raft HTTP/1.1\r\nHost: b\r\nX-Server-From: a\r\nContent-Length: 5\r\n\r\nhello"
	// A chunked body with a trailer, as a snapshot POST streams it.
	chunkedReq = "POST /raft/snapshot HTTP/1.1\r\nHost: b\r\nX-Server-From: a\r\nTransfer-Encoding: chunked\r\n\r\n" +
		"3\r\nsna\r\n2;ext=1\r\npi\r\n0\r\nX-Trailer: t\r\n\r\n"
)

// TestProxyLearnsSourcePerRequest: on one keep-alive connection a request
// without X-Server-From is Unknown's, and the requests after one naming a
// (a Content-Length body, then a chunked one with a trailer) are a's; all
// bytes reach the member unchanged.
func TestProxyLearnsSourcePerRequest(t *testing.T) {
	be := newPeerBackend(t)
	n, p := testNet(t, be.srv.Listener.Addr().String())
	c, br := dial(t, p)
	if got := roundTrip(t, c, br, probeReq); got != "ok:" {
		t.Fatalf("probe answered %q", got)
	}
	if got := roundTrip(t, c, br, lengthReq); got != "ok:hello" {
		t.Fatalf("POST answered %q", got)
	}
	if got := roundTrip(t, c, br, chunkedReq); got != "ok:snapi" {
		t.Fatalf("chunked POST answered %q", got)
	}
	want := []string{
		`GET /raft/probing from="" body=""`,
		`POST /raft from="a" body="hello"`,
		`POST /raft/snapshot from="a" body="snapi"`,
	}
	if got := be.requests(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("the member saw\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The proxy counts a write once it returns, which can be after the
	// member has read the bytes and answered.
	poll.UntilNil(t, "the proxy to count every byte it forwarded", func() error {
		if s := n.Stats(Unknown, "b"); s.Forwarded != int64(len(probeReq)) {
			return fmt.Errorf("?→b: %v, want %d bytes forwarded", s, len(probeReq))
		}
		if s := n.Stats("a", "b"); s.Forwarded != int64(len(lengthReq)+len(chunkedReq)) || s.Conns != 1 {
			return fmt.Errorf("a→b: %v, want %d bytes forwarded on 1 connection", s, len(lengthReq)+len(chunkedReq))
		}
		if s := n.Stats("b", Unknown); s.Forwarded == 0 {
			return fmt.Errorf("b→?: %v, want the probe's answer", s)
		}
		if s := n.Stats("b", "a"); s.Forwarded == 0 {
			return fmt.Errorf("b→a: %v, want the answers", s)
		}
		return nil
	})
	if s := n.Stats(Any, Any); s.Dropped != 0 || s.Resets != 0 || s.Delayed != 0 {
		t.Errorf("no fault was set, yet: %v", s)
	}
}

// TestProxyOneWayPartition: with a→b blackholed, a's request never reaches
// b; with b→a blackholed, it does but the answer never comes back. Either
// connection is closed when the fault is lifted, and new ones work.
func TestProxyOneWayPartition(t *testing.T) {
	be := newPeerBackend(t)
	n, p := testNet(t, be.srv.Listener.Addr().String())

	n.Partition("a", "b")
	if f := n.Fault("a", "b"); !f.Blackhole {
		t.Fatalf("a→b fault %v", f)
	}
	if f := n.Fault("b", "a"); f.Blackhole {
		t.Fatalf("b→a fault %v", f)
	}
	c, _ := dial(t, p)
	io.WriteString(c, lengthReq)
	poll.Until(t, "the request's bytes to be dropped", func() bool {
		return n.Stats("a", "b").Dropped == int64(len(lengthReq))
	})
	// Discarded bytes can never arrive.
	if got := be.requests(); len(got) != 0 {
		t.Fatalf("the member got %q through a blackhole", got)
	}
	n.Heal("a", "b")
	readErr(t, c)
	if len(be.requests()) != 0 {
		t.Fatal("the blackholed request arrived after the heal")
	}

	n.Partition("b", "a")
	c2, _ := dial(t, p)
	io.WriteString(c2, lengthReq)
	poll.Until(t, "the request to arrive", func() bool { return len(be.requests()) == 1 })
	poll.Until(t, "the answer to be dropped", func() bool { return n.Stats("b", "a").Dropped > 0 })
	if s := n.Stats("b", "a"); s.Forwarded != 0 {
		t.Fatalf("b→a forwarded through a blackhole: %v", s)
	}
	n.HealAll()
	readErr(t, c2)

	c3, br3 := dial(t, p)
	if got := roundTrip(t, c3, br3, lengthReq); got != "ok:hello" {
		t.Fatalf("after HealAll: %q", got)
	}
}

// TestProxyIsolateCoversUnknownSource: Isolate blackholes a connection
// that never names its sender, both ways.
func TestProxyIsolateCoversUnknownSource(t *testing.T) {
	be := newPeerBackend(t)
	n, p := testNet(t, be.srv.Listener.Addr().String())
	n.Isolate("b")
	for _, pr := range [][2]string{{Unknown, "b"}, {"b", Unknown}, {"a", "b"}, {"b", "a"}} {
		if !n.Fault(pr[0], pr[1]).Blackhole {
			t.Fatalf("Isolate(b) leaves %s→%s open", pr[0], pr[1])
		}
	}
	c, _ := dial(t, p)
	io.WriteString(c, probeReq)
	poll.Until(t, "the probe to be dropped", func() bool { return n.Stats(Unknown, "b").Dropped == int64(len(probeReq)) })
	if len(be.requests()) != 0 {
		t.Fatal("a request reached an isolated member")
	}
	// A partition of another pair stays when b is healed.
	n.Partition("a", "c")
	n.HealMember("b")
	readErr(t, c)
	if !n.Fault("a", "c").Blackhole || n.Fault("a", "b").Blackhole {
		t.Fatalf("after HealMember(b): a→c %v, a→b %v", n.Fault("a", "c"), n.Fault("a", "b"))
	}
}

// TestProxyDropResets: a dropped chunk resets the connection; nothing of
// it reaches the member.
func TestProxyDropResets(t *testing.T) {
	be := newPeerBackend(t)
	n, p := testNet(t, be.srv.Listener.Addr().String())
	n.Drop("a", "b", 1)
	c, _ := dial(t, p)
	io.WriteString(c, lengthReq)
	if err := readErr(t, c); !strings.Contains(err.Error(), "reset") {
		t.Fatalf("read after a drop: %v, want a reset", err)
	}
	if s := n.Stats("a", "b"); s.Resets != 1 || s.Dropped == 0 || s.Forwarded != 0 {
		t.Fatalf("a→b: %v", s)
	}
	if len(be.requests()) != 0 {
		t.Fatal("a dropped request arrived")
	}
}

// TestProxyDelayKeepsOrder: a raw (non-HTTP) echo connection, Unknown's,
// delayed with jitter both ways by rules for Any, gets its bytes back in
// order, and a round trip takes at least both delays.
func TestProxyDelayKeepsOrder(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	n, p := testNet(t, l.Addr().String())
	const d = 20 * time.Millisecond
	n.Delay(Any, "b", d, 10*time.Millisecond)
	n.Delay("b", Any, d, 10*time.Millisecond)

	c, _ := dial(t, p)
	start := time.Now()
	io.WriteString(c, "\x00ping")
	buf := make([]byte, 5)
	c.SetReadDeadline(time.Now().Add(poll.Deadline))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "\x00ping" {
		t.Fatalf("echo %q, %v", buf, err)
	}
	if el := time.Since(start); el < 2*d {
		t.Fatalf("round trip took %v through two delays of %v", el, d)
	}

	go func() {
		for i := range 300 {
			io.WriteString(c, fmt.Sprintf("%05d;", i))
			if i%50 == 0 {
				time.Sleep(time.Millisecond) // separate reads, so chunks get different jitter
			}
		}
	}()
	got := make([]byte, 300*6)
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		if want := fmt.Sprintf("%05d;", i); string(got[i*6:i*6+6]) != want {
			t.Fatalf("at %d: %q, want %q (reordered)", i, got[i*6:i*6+6], want)
		}
	}
	if s := n.Stats(Unknown, "b"); s.Delayed < 2 {
		t.Fatalf("?→b: %v, want delayed chunks", s)
	}
}

// TestProxyMemberDown: a connection to a member that is not listening is
// reset at once.
func TestProxyMemberDown(t *testing.T) {
	ports, err := FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	_, p := testNet(t, fmt.Sprintf("127.0.0.1:%d", ports[0]))
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		return // the reset can already fail the connect
	}
	defer c.Close()
	readErr(t, c)
}

// TestProxyFaultUnion: the effective fault of several matching rules.
func TestProxyFaultUnion(t *testing.T) {
	n := NewNetwork(1)
	n.Set("a", "b", Fault{Delay: 10 * time.Millisecond, Drop: 0.5})
	n.Set(Any, "b", Fault{Delay: 5 * time.Millisecond, Jitter: time.Millisecond, Drop: 0.5})
	f := n.Fault("a", "b")
	if f.Delay != 10*time.Millisecond || f.Jitter != time.Millisecond || f.Drop != 0.75 || f.Blackhole {
		t.Fatalf("a→b: %v", f)
	}
	if f := n.Fault(Unknown, "b"); f.Delay != 5*time.Millisecond || f.Drop != 0.5 {
		t.Fatalf("?→b: %v", f)
	}
	if f := n.Fault("b", "a"); f != (Fault{}) {
		t.Fatalf("b→a: %v", f)
	}
	n.HealAll()
	if f := n.Fault("a", "b"); f != (Fault{}) {
		t.Fatalf("after HealAll a→b: %v", f)
	}
}
