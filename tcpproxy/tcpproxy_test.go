package tcpproxy

import (
	"bufio"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/strata-db/strata/internal/poll"
)

// backend is a TCP server that greets each connection with its name and
// then echoes what it reads.
type backend struct {
	name string
	addr string
	mu   sync.Mutex
	l    net.Listener
}

func startBackend(t *testing.T, name, addr string) *backend {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{name: name, addr: l.Addr().String(), l: l}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.WriteString(c, b.name+"\n")
				io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(b.stop)
	return b
}

func (b *backend) stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.l.Close()
}

func (b *backend) endpoint(t *testing.T) Endpoint {
	h, p, err := net.SplitHostPort(b.addr)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(p)
	return Endpoint{Host: h, Port: uint16(port)}
}

func startProxy(t *testing.T, eps []Endpoint, retry time.Duration) *Proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Listener: l, Endpoints: eps, RetryDelay: retry}
	ran := make(chan error, 1)
	go func() { ran <- p.Run() }()
	t.Cleanup(func() {
		p.Stop()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return p
}

// greet connects through the proxy and returns the backend's name ("" if
// the proxy hung up) after checking that bytes travel both ways.
func greet(t *testing.T, p *Proxy) string {
	t.Helper()
	c, err := net.Dial("tcp", p.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	name, err := r.ReadString('\n')
	if err != nil {
		return ""
	}
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		t.Fatal(err)
	}
	if echo, err := r.ReadString('\n'); err != nil || echo != "ping\n" {
		t.Fatalf("echo through the proxy: %q %v", echo, err)
	}
	return name[:len(name)-1]
}

// TestRoundRobinAndFailover: listed endpoints take connections in turn;
// one that stops answering is skipped (no client sees the failure) until
// the retry finds it back.
func TestRoundRobinAndFailover(t *testing.T) {
	a, b, c := startBackend(t, "a", "127.0.0.1:0"), startBackend(t, "b", "127.0.0.1:0"), startBackend(t, "c", "127.0.0.1:0")
	p := startProxy(t, []Endpoint{a.endpoint(t), b.endpoint(t), c.endpoint(t)}, 20*time.Millisecond)
	var got []string
	for range 6 {
		got = append(got, greet(t, p))
	}
	if want := []string{"a", "b", "c", "a", "b", "c"}; !equal(got, want) {
		t.Fatalf("connections went to %v, want %v", got, want)
	}
	b.stop()
	got = nil
	for range 4 {
		got = append(got, greet(t, p))
	}
	for _, n := range got {
		if n != "a" && n != "c" {
			t.Fatalf("with b down, connections went to %v", got)
		}
	}
	startBackend(t, "b again", b.addr)
	poll.Until(t, "b back in the rotation", func() bool { return greet(t, p) == "b again" })
}

// TestAllDown: a client is disconnected when no endpoint answers.
func TestAllDown(t *testing.T) {
	a := startBackend(t, "a", "127.0.0.1:0")
	p := startProxy(t, []Endpoint{a.endpoint(t)}, time.Hour)
	a.stop()
	if n := greet(t, p); n != "" {
		t.Fatalf("got %q from a stopped backend", n)
	}
}

// TestPriorityAndWeight: SRV priorities are classes (the lowest active one
// is used), weights share its connections; weight-0 endpoints beside
// weighted ones get about one connection in a hundred.
func TestPriorityAndWeight(t *testing.T) {
	a, b, c := startBackend(t, "a", "127.0.0.1:0"), startBackend(t, "b", "127.0.0.1:0"), startBackend(t, "c", "127.0.0.1:0")
	ea, eb, ec := a.endpoint(t), b.endpoint(t), c.endpoint(t)
	ea.Priority, ea.Weight = 10, 3
	eb.Priority, eb.Weight = 10, 1
	ec.Priority, ec.Weight = 20, 100
	p := &Proxy{Endpoints: []Endpoint{ea, eb, ec}, rnd: rand.New(rand.NewPCG(1, 2))}
	for _, e := range p.Endpoints {
		p.remotes = append(p.remotes, &remote{ep: e, active: true})
	}
	counts := map[uint16]int{}
	const n = 4000
	for range n {
		counts[p.pick().ep.Port]++
	}
	if counts[ec.Port] != 0 {
		t.Errorf("the priority-20 endpoint got %d picks while priority 10 was up", counts[ec.Port])
	}
	// a's share is 3/4 (the draw is seeded, so this is one fixed sample).
	if share := float64(counts[ea.Port]) / n; share < 0.70 || share > 0.80 {
		t.Errorf("weight 3 of 4 got %.3f of the picks (%v)", share, counts)
	}
	p.setActive(p.remotes[0], false)
	p.setActive(p.remotes[1], false)
	if r := p.pick(); r == nil || r.ep.Port != ec.Port {
		t.Errorf("with priority 10 down, picked %v", r)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
