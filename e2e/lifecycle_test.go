package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-db/strata/e2e/harness"
)

// TestServerLifecycle checks the harness itself against the target binary:
// start, write, SIGKILL, start again on the same data dir, graceful SIGTERM
// restart, and the data survives each.
func TestServerLifecycle(t *testing.T) {
	b := needBins(t)
	srv, err := harness.NewServer(harness.ServerConfig{Bin: targetBin(t, b), Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	ctl := &harness.Ctl{Bin: b.Etcdctl, Endpoints: []string{srv.ClientURL}}
	mustOut := func(want string, args ...string) {
		t.Helper()
		r := ctl.Run("", args...)
		if r.Code != 0 || strings.TrimSpace(r.Stdout) != want {
			t.Fatalf("etcdctl %v: want %q, got %s", args, want, r)
		}
	}
	mustOut("OK", "put", "k", "v1")
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if srv.Running() {
		t.Fatal("running after Kill")
	}
	if err := srv.Start(); err != nil {
		t.Fatalf("start after SIGKILL: %v", err)
	}
	mustOut("v1", "get", "k", "--print-value-only")
	mustOut("OK", "put", "k", "v2")
	if err := srv.Restart(); err != nil {
		t.Fatalf("restart: %v", err)
	}
	mustOut("v2", "get", "k", "--print-value-only")
	if err := srv.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	// A stopped server refuses connections: etcdctl fails, within its
	// timeout.
	if r := ctl.Run("", "--command-timeout=1s", "--dial-timeout=1s", "get", "k"); r.Code == 0 {
		t.Fatalf("get on a stopped server succeeded: %s", r)
	}
}

// TestReferenceTools smoke-tests the other two binaries build-etcd.sh
// provides, for the benchmark and migration tests that use them: etcd's
// benchmark drives a short put load, and etcdutl reads a snapshot that
// etcdctl saved. It runs against the reference etcd: it checks the tools,
// not the target.
func TestReferenceTools(t *testing.T) {
	b := needBins(t)
	dir := t.TempDir()
	srv, err := harness.NewServer(harness.ServerConfig{Bin: b.Etcd, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })

	bench := exec.Command(b.Benchmark, "--endpoints="+srv.ClientURL, "--conns=1", "--clients=1",
		"put", "--total=200", "--key-size=8", "--val-size=256")
	out, err := bench.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Requests/sec:") {
		t.Fatalf("benchmark put: %v\n%s", err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "Requests/sec:") {
			t.Logf("benchmark, 1 client, 200 puts: %s", strings.TrimSpace(l))
		}
	}

	ctl := &harness.Ctl{Bin: b.Etcdctl, Endpoints: []string{srv.ClientURL}}
	snap := filepath.Join(dir, "snap.db")
	if r := ctl.Run("", "snapshot", "save", snap); r.Code != 0 {
		t.Fatalf("snapshot save: %s", r)
	}
	st := exec.Command(b.Etcdutl, "snapshot", "status", snap, "-w", "json")
	out, err = st.CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"revision":201`) {
		t.Fatalf("etcdutl snapshot status: %v\n%s", err, out)
	}
}
