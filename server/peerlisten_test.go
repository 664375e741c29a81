package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/strata-db/strata/server/config"
)

// TestPeerPortBoundBeforeDiskProbe: a member binds its peer port before
// the slow part of its start (the WAL disk probe, the WAL), as etcd binds
// its listeners first. A member of the same new cluster that dials it
// meanwhile has its connection held until the port serves, instead of
// refused: behind etcd's e2e peer proxy, a refused backend left the
// dialer's stream request without an answer, and a member reported ready
// with its messages still going through the pipeline
// (TestHTTPLivezReadyzHandler/network_partitioned).
func TestPeerPortBoundBeforeDiskProbe(t *testing.T) {
	cp, pp := freePort(t), freePort(t)
	client := fmt.Sprintf("http://127.0.0.1:%d", cp)
	peer := fmt.Sprintf("127.0.0.1:%d", pp)
	args := []string{"--name", "m1", "--data-dir", t.TempDir(), "--disk-probe=false",
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", "http://" + peer, "--initial-advertise-peer-urls", "http://" + peer,
		"--initial-cluster", "m1=http://" + peer}
	cfg, err := config.Parse(args, nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var dialErr error
	answer := make(chan string, 1)
	hooks := storageHooks{beforeDiskProbe: func() {
		conn, err := net.DialTimeout("tcp", peer, 5*time.Second)
		if dialErr = err; err != nil {
			return
		}
		go func() {
			defer conn.Close()
			if _, err := io.WriteString(conn, "GET /version HTTP/1.0\r\n\r\n"); err != nil {
				answer <- err.Error()
				return
			}
			line, err := bufio.NewReader(conn).ReadString('\n')
			if err != nil {
				line = err.Error()
			}
			answer <- strings.TrimSpace(line)
		}()
	}}
	s, err := newServer(cfg, nil, hooks)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if dialErr != nil {
		t.Fatalf("dialing the peer port while the member was starting: %v", dialErr)
	}
	if err := s.Serve(); err != nil {
		t.Fatal(err)
	}
	select {
	case line := <-answer:
		if !strings.Contains(line, " 200 ") {
			t.Fatalf("the connection held during the start was answered %q, want 200", line)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the connection made during the start was never answered")
	}
}
