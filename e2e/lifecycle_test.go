package e2e

import (
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
