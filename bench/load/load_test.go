package load

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/strata-db/strata/internal/testport"
	"github.com/strata-db/strata/server"
	"github.com/strata-db/strata/server/config"
)

// freePort reserves a port for this test process (testport: outside the
// kernel's ephemeral range, never handed to another test process).
func freePort(t *testing.T) int {
	t.Helper()
	return testport.Port(t)
}

// startServer runs an in-process strata member and returns its client
// address.
func startServer(t *testing.T) string {
	t.Helper()
	cp, pp := freePort(t), freePort(t)
	client := fmt.Sprintf("http://127.0.0.1:%d", cp)
	peer := fmt.Sprintf("http://127.0.0.1:%d", pp)
	cfg, err := config.Parse([]string{"--name", "m1", "--data-dir", t.TempDir(),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "m1=" + peer, "--log-level", "error"}, nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	s, err := server.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Serve(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	select {
	case <-s.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("server not ready")
	}
	return fmt.Sprintf("127.0.0.1:%d", cp)
}

// runJSON runs stratabench with -w json and decodes its summary.
func runJSON(t *testing.T, args ...string) (*JSONSummary, string) {
	t.Helper()
	var out, errw bytes.Buffer
	code := Main(args[0], append(args[1:], "-w", "json"), strings.NewReader(""), &out, &errw)
	if code != ExitOK {
		t.Fatalf("%q: exit %d\nstdout %s\nstderr %s", args, code, out.String(), errw.String())
	}
	var s JSONSummary
	if err := json.Unmarshal(out.Bytes(), &s); err != nil {
		t.Fatalf("%q: %v: %s", args, err, out.String())
	}
	return &s, errw.String()
}

func TestWorkloads(t *testing.T) {
	ep := startServer(t)
	g := []string{"--endpoints", ep, "--clients", "4", "--conns", "2"}
	with := func(w string, a ...string) []string { return append(append([]string{w}, g...), a...) }

	s, stderr := runJSON(t, with("put", "--total", "300", "--key-space-size", "50", "--sequential-keys", "--val-size", "16")...)
	if s.Name != "put" || s.Requests != 300 || s.Errors != 0 || s.RPS <= 0 || s.Percentiles["p99"] <= 0 {
		t.Errorf("put: %+v", s)
	}
	if !strings.Contains(stderr, "put 100%") {
		t.Errorf("no progress bar on stderr: %q", stderr)
	}

	s, _ = runJSON(t, with("range", "\x02", "--total", "200", "--consistency", "s")...)
	if s.Requests != 200 || s.Errors != 0 {
		t.Errorf("range: %+v", s)
	}
	s, _ = runJSON(t, with("range", "--prefix", "--total", "100", "--count-only")...)
	if s.Requests != 100 || s.Errors != 0 {
		t.Errorf("range --prefix: %+v", s)
	}

	s, _ = runJSON(t, with("txn-put", "--total", "100", "--txn-ops", "3", "--key-space-size", "10")...)
	if s.Requests != 100 || s.Errors != 0 {
		t.Errorf("txn-put: %+v", s)
	}

	s, _ = runJSON(t, with("txn-mixed", "--total", "200", "--rw-ratio", "3", "--key-space-size", "10", "--limit", "5")...)
	if s.Requests != 200 || len(s.Parts) != 2 || s.Parts[0].Requests+s.Parts[1].Requests != 200 || s.Parts[0].Requests < s.Parts[1].Requests {
		t.Errorf("txn-mixed: %+v", s)
	}

	s, _ = runJSON(t, with("lease-keepalive", "--total", "100")...)
	if s.Requests != 100 || s.Errors != 0 {
		t.Errorf("lease-keepalive: %+v", s)
	}

	// 3 streams x 4 watches over 2 keys (6 watchers each); 10 puts make
	// 60 events.
	s, _ = runJSON(t, with("watch", "--streams", "3", "--watch-per-stream", "4", "--watched-key-total", "2",
		"--key-space-size", "2", "--sequential-keys", "--put-total", "10")...)
	if s.Name != "watch-events" || s.Requests != 60 || s.Errors != 0 || len(s.Parts) != 3 ||
		s.Parts[0].Requests != 12 || s.Parts[1].Requests != 10 {
		t.Errorf("watch: %+v", s)
	}

	s, _ = runJSON(t, with("watch-latency", "--streams", "2", "--watchers-per-stream", "3", "--put-total", "20", "--put-rate", "500")...)
	if s.Requests != 120 || s.Errors != 0 || len(s.Parts) != 2 || s.Parts[0].Requests != 20 {
		t.Errorf("watch-latency: %+v", s)
	}
}

// Failed requests are counted by message and reported; they do not stop
// the run. With none succeeding the exit status is 1.
func TestErrorsAreCounted(t *testing.T) {
	ep := startServer(t)
	var out, errw bytes.Buffer
	code := Main("put", []string{"--endpoints", ep, "--total", "20", "--val-size", "3000000"}, nil, &out, &errw)
	if code != ExitFail {
		t.Errorf("exit %d, want %d", code, ExitFail)
	}
	if strings.Contains(out.String(), "Summary:") || !strings.HasPrefix(out.String(), "\nError distribution:\n  [20]\t") {
		t.Errorf("summary:\n%s", out.String())
	}

	out.Reset()
	errw.Reset()
	code = Main("put", []string{"--endpoints", "127.0.0.1:1", "--dial-timeout", "200ms"}, nil, &out, &errw)
	if code != ExitFail || !strings.Contains(errw.String(), "connection refused") {
		t.Errorf("no server: exit %d, stderr %q", code, errw.String())
	}
}

// An expired or unknown token makes the call authenticate again and retry.
func TestAuthTokenRefresh(t *testing.T) {
	ep := startServer(t)
	g := DefaultGlobal()
	g.Endpoints = []string{ep}
	d, err := newDialer(g, nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c, err := d.dial(t.Context(), ep)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	for _, r := range []*pb.AuthUserAddRequest{{Name: "root", Password: "pw"}} {
		if _, err := pb.NewAuthClient(c.cc).UserAdd(t.Context(), r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pb.NewAuthClient(c.cc).UserGrantRole(t.Context(), &pb.AuthUserGrantRoleRequest{User: "root", Role: "root"}); err != nil {
		t.Fatal(err)
	}
	if _, err := pb.NewAuthClient(c.cc).AuthEnable(t.Context(), &pb.AuthEnableRequest{}); err != nil {
		t.Fatal(err)
	}

	g.User = "root:pw"
	d, err = newDialer(g, nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ac, err := d.dial(t.Context(), ep)
	if err != nil {
		t.Fatal(err)
	}
	defer ac.close()
	bogus := "bogus.token"
	ac.token.Store(&bogus)
	if _, err := ac.kv.Put(t.Context(), &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatalf("put with a stale token: %v", err)
	}
	if tok := ac.token.Load(); tok == nil || *tok == bogus {
		t.Errorf("token not refreshed")
	}

	s, _ := runJSON(t, "put", "--endpoints", ep, "--user", "root:pw", "--total", "50", "--clients", "2")
	if s.Requests != 50 {
		t.Errorf("put with --user: %+v", s)
	}
	var out, errw bytes.Buffer
	if code := Main("put", []string{"--endpoints", ep, "--user", "root:nope"}, nil, &out, &errw); code != ExitFail ||
		!strings.Contains(errw.String(), "authentication failed") {
		t.Errorf("wrong password: exit %d, %q", code, errw.String())
	}
	// The password is read from stdin when --user has none.
	out.Reset()
	if code := Main("lease-keepalive", []string{"--endpoints", ep, "--user", "root", "--total", "5", "-w", "json"}, strings.NewReader("pw\n"), &out, &errw); code != ExitOK {
		t.Errorf("prompted password: exit %d, %q", code, errw.String())
	}
}
