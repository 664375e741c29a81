// Package testport hands tests TCP ports on 127.0.0.1 that stay theirs
// until the test process exits.
//
// A port found by listening on port 0 and closing the listener is not
// reserved: the kernel hands the same range (ip_local_port_range) out as
// the source port of any outgoing connection, and another test package
// running at the same time may pick it too, so the later bind fails with
// "address already in use". Ports from this package come from outside
// the kernel's ephemeral range, and each is reserved across processes by
// an flock on a file named after it in the system's temp directory; the
// lock lasts until the process exits (the kernel drops it then, even on
// a kill -9). A port is handed out only if it can also be bound at the
// moment, so a service that holds it is skipped.
package testport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

var (
	mu    sync.Mutex
	held  []*os.File // the lock files, open for the process's life
	span  [2]int     // the ports to choose from: [span[0], span[1])
	next  int        // the next candidate, from a random start
	setup sync.Once
)

// ephemeral reads the kernel's range of source ports for outgoing
// connections; it falls back to Linux's default.
func ephemeral() (lo, hi int) {
	lo, hi = 32768, 60999
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return lo, hi
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return lo, hi
	}
	l, err1 := strconv.Atoi(f[0])
	h, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || l > h {
		return lo, hi
	}
	return l, h
}

func choose() {
	lo, hi := ephemeral()
	// Above 10000 to stay clear of well-known services, and on the larger
	// side of the ephemeral range.
	below := [2]int{10000, lo}
	above := [2]int{hi + 1, 65536}
	span = below
	if above[1]-above[0] > below[1]-below[0] {
		span = above
	}
	if span[1]-span[0] < 100 {
		span = [2]int{10000, 65536} // a machine using nearly every port as ephemeral
	}
	next = span[0] + rand.IntN(span[1]-span[0])
}

// Ports reserves n ports.
func Ports(n int) ([]int, error) {
	setup.Do(choose)
	mu.Lock()
	defer mu.Unlock()
	dir := filepath.Join(os.TempDir(), "strata-test-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, fmt.Errorf("testport: %w", err)
	}
	var out []int
	for tries := 0; len(out) < n && tries < span[1]-span[0]; tries++ {
		p := next
		if next++; next == span[1] {
			next = span[0]
		}
		f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(p)), os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			return nil, fmt.Errorf("testport: %w", err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				continue // another test process holds it
			}
			return nil, fmt.Errorf("testport: lock %s: %w", f.Name(), err)
		}
		held = append(held, f) // this process keeps the port, bindable or not
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue // in use by something that is not a test
		}
		l.Close()
		out = append(out, p)
	}
	if len(out) < n {
		return nil, fmt.Errorf("testport: found %d free ports of %d in %d..%d", len(out), n, span[0], span[1]-1)
	}
	return out, nil
}

// Port reserves one port, failing tb if none is free.
func Port(tb testing.TB) int {
	tb.Helper()
	p, err := Ports(1)
	if err != nil {
		tb.Fatal(err)
	}
	return p[0]
}
