package testport

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// TestPortsAreReservedAcrossProcesses: a port one process holds is never
// handed to another, and every port handed out can be bound.
func TestPortsAreReservedAcrossProcesses(t *testing.T) {
	if os.Getenv("TESTPORT_CHILD") != "" {
		ps, err := Ports(20)
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		for _, p := range ps {
			fmt.Println(p)
		}
		// Keep the locks until the parent has asked for its own ports.
		_, _ = os.Stdin.Read(make([]byte, 1))
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestPortsAreReservedAcrossProcesses$")
	cmd.Env = append(os.Environ(), "TESTPORT_CHILD=1")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outp, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { in.Close(); _ = cmd.Wait() }()
	child := map[int]bool{}
	buf := make([]byte, 0, 4096)
	for len(child) < 20 {
		chunk := make([]byte, 512)
		n, err := outp.Read(chunk)
		if err != nil {
			t.Fatalf("child: %v after %q", err, buf)
		}
		buf = append(buf, chunk[:n]...)
		child = map[int]bool{}
		for _, l := range strings.Split(string(buf), "\n") {
			if p, err := strconv.Atoi(l); err == nil && strings.HasSuffix(string(buf), "\n") {
				child[p] = true
			}
		}
		if strings.Contains(string(buf), "error:") {
			t.Fatalf("child: %s", buf)
		}
	}
	mine, err := Ports(200)
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := ephemeral()
	seen := map[int]bool{}
	for _, p := range mine {
		if child[p] {
			t.Fatalf("port %d was handed to both processes", p)
		}
		if seen[p] {
			t.Fatalf("port %d was handed out twice", p)
		}
		seen[p] = true
		if p >= lo && p <= hi {
			t.Fatalf("port %d is in the kernel's ephemeral range %d..%d", p, lo, hi)
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			t.Fatalf("port %d handed out but cannot be bound: %v", p, err)
		}
		l.Close()
	}
	t.Logf("200 ports in %d..%d, none of the child's 20", span[0], span[1]-1)
}

// TestBusyPortIsSkipped: a port something else listens on is not handed
// out even though no test process holds its lock.
func TestBusyPortIsSkipped(t *testing.T) {
	setup.Do(choose)
	mu.Lock()
	p := next
	mu.Unlock()
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
	if err != nil {
		t.Fatalf("listen on the next candidate %d: %v", p, err)
	}
	defer l.Close()
	got, err := Ports(1)
	if err != nil {
		t.Fatal(err)
	}
	if got[0] == p {
		t.Fatalf("port %d handed out while another listener holds it", p)
	}
}
