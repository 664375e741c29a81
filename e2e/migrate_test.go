package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/strata-db/strata/e2e/harness"
)

// TestMigrate is the migration round trip: real etcd's data
// (keys with several revisions, deletes, a compaction, a lease with keys,
// a user with a role, auth enabled) goes through 'etcdctl snapshot save'
// and 'stratautl snapshot restore' into strata, which must serve the same
// keys, revisions and versions with the lease and the user working; then
// 'stratautl snapshot export-etcd' writes it back out, 'etcdutl snapshot
// status' accepts the file, and etcd restored from it by 'etcdutl
// snapshot restore' serves the same data again.
//
//	make build && cd e2e && STRATA_E2E_TARGET=../bin/strata go test -run TestMigrate -count=1 .
func TestMigrate(t *testing.T) {
	b := needBins(t)
	target := os.Getenv("STRATA_E2E_TARGET")
	if target == "" {
		t.Skip("SKIP: set STRATA_E2E_TARGET to the strata binary (make build writes ../bin/strata)")
	}
	strata, err := filepath.Abs(target)
	if err != nil {
		t.Fatal(err)
	}
	stratautl, err := harness.Stratautl(strata)
	if err != nil {
		t.Fatal(err)
	}
	const root, user = "root:rootpw", "u1:u1pw"
	work := t.TempDir()

	// 1. Real etcd gets the data.
	etcd := startServer(t, b.Etcd, "etcd")
	ctl := &harness.Ctl{Bin: b.Etcdctl, Endpoints: []string{etcd.ClientURL}}
	for rev := 0; rev < 3; rev++ {
		for i := 0; i < 10; i++ {
			must(t, ctl.Run("", "put", fmt.Sprintf("k%d", i), fmt.Sprintf("v%d.%d", i, rev)))
		}
	}
	must(t, ctl.Run("", "del", "k3"))
	must(t, ctl.Run("", "del", "k5"))
	must(t, ctl.Run("", "put", "k5", "reborn")) // a second generation
	must(t, ctl.Run("", "del", "--prefix", "k8"))
	must(t, ctl.Run("", "compact", "12"))
	grant := must(t, ctl.Run("", "lease", "grant", "600"))
	m := regexp.MustCompile(`lease ([0-9a-f]+) granted`).FindStringSubmatch(grant.Stdout)
	if m == nil {
		t.Fatalf("lease grant: %s", grant)
	}
	leaseID := m[1]
	must(t, ctl.Run("", "put", "--lease="+leaseID, "lk1", "leased"))
	must(t, ctl.Run("", "put", "--lease="+leaseID, "lk2", "leased"))
	must(t, ctl.Run("", "put", "other", "x"))
	must(t, ctl.Run("", "user", "add", "root", "--new-user-password=rootpw"))
	must(t, ctl.Run("", "user", "grant-role", "root", "root"))
	must(t, ctl.Run("", "role", "add", "r1"))
	must(t, ctl.Run("", "role", "grant-permission", "--prefix", "r1", "readwrite", "k"))
	must(t, ctl.Run("", "user", "add", "u1", "--new-user-password=u1pw"))
	must(t, ctl.Run("", "user", "grant-role", "u1", "r1"))
	must(t, ctl.Run("", "auth", "enable"))
	want := getAll(t, ctl, root)
	snap := filepath.Join(work, "etcd-snapshot.db")
	must(t, ctl.Run("", "--user="+root, "snapshot", "save", snap))
	wantStatus := snapshotStatus(t, b.Etcdutl, snap)
	if err := etcd.Stop(); err != nil {
		t.Fatal(err)
	}

	// 2. stratautl restores it; strata serves it.
	srv, err := harness.NewServer(harness.ServerConfig{Bin: strata, Dir: filepath.Join(work, "strata")})
	if err != nil {
		t.Fatal(err)
	}
	out := run(t, stratautl, "snapshot", "restore", snap, "--data-dir", srv.DataDir, "--name", srv.Name(),
		"--initial-cluster", srv.Name()+"="+srv.PeerURL, "--initial-cluster-token", "strata-e2e",
		"--initial-advertise-peer-urls", srv.PeerURL, "--no-progress")
	t.Logf("stratautl snapshot restore:\n%s", out)
	if err := srv.Start(); err != nil {
		t.Fatalf("strata on the restored dir: %v\n%s", err, srv.LogTail(30))
	}
	defer srv.Stop()
	sctl := &harness.Ctl{Bin: b.Etcdctl, Endpoints: []string{srv.ClientURL}}
	compareData(t, "strata restored from etcd's snapshot", want, getAll(t, sctl, root))

	ttl := must(t, sctl.Run("", "--user="+root, "lease", "timetolive", leaseID, "--keys"))
	if !strings.Contains(ttl.Stdout, "lk1") || !strings.Contains(ttl.Stdout, "lk2") || !strings.Contains(ttl.Stdout, "TTL(600s)") {
		t.Errorf("lease timetolive on strata:\n%s", ttl)
	}
	if ka := must(t, sctl.Run("", "--user="+root, "lease", "keep-alive", "--once", leaseID)); !strings.Contains(ka.Stdout, "keepalived with TTL(600)") {
		t.Errorf("lease keep-alive on strata:\n%s", ka)
	}
	if r := must(t, sctl.Run("", "--user="+user, "get", "k1")); !strings.Contains(r.Stdout, "v1.2") {
		t.Errorf("u1 reading k1 on strata:\n%s", r)
	}
	if r := sctl.Run("", "--user="+user, "get", "other"); r.Code == 0 || !strings.Contains(r.Stderr, "permission denied") {
		t.Errorf("u1 reading outside its role on strata should be denied:\n%s", r)
	}
	if r := sctl.Run("", "--user=u1:wrong", "get", "k1"); r.Code == 0 || !strings.Contains(r.Stderr, "authentication failed") {
		t.Errorf("a wrong password on strata should fail:\n%s", r)
	}
	if r := must(t, sctl.Run("", "--user="+root, "role", "get", "r1")); !strings.Contains(r.Stdout, "[k, l) (prefix k)") {
		t.Errorf("role r1 on strata:\n%s", r)
	}
	if r := sctl.Run("", "--user="+root, "get", "k1", "--rev=5"); r.Code == 0 || !strings.Contains(r.Stderr, "compacted") {
		t.Errorf("a read below the compaction on strata should fail:\n%s", r)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}

	// 3. export-etcd writes it back out; etcdutl accepts it, and etcd
	// restored from it serves the same data.
	exported := filepath.Join(work, "exported.db")
	out = run(t, stratautl, "snapshot", "export-etcd", "--data-dir", srv.DataDir, "--out", exported, "--no-progress")
	t.Logf("stratautl snapshot export-etcd:\n%s", out)
	gotStatus := snapshotStatus(t, b.Etcdutl, exported)
	if gotStatus.Revision != wantStatus.Revision || gotStatus.TotalKey != wantStatus.TotalKey {
		t.Errorf("etcdutl snapshot status: exported %+v, etcd's own snapshot %+v", gotStatus, wantStatus)
	}
	etcd2, err := harness.NewServer(harness.ServerConfig{Bin: b.Etcd, Dir: filepath.Join(work, "etcd2")})
	if err != nil {
		t.Fatal(err)
	}
	run(t, b.Etcdutl, "snapshot", "restore", exported, "--data-dir", etcd2.DataDir, "--name", etcd2.Name(),
		"--initial-cluster", etcd2.Name()+"="+etcd2.PeerURL, "--initial-cluster-token", "strata-e2e",
		"--initial-advertise-peer-urls", etcd2.PeerURL)
	if err := etcd2.Start(); err != nil {
		t.Fatalf("etcd on the restored export: %v\n%s", err, etcd2.LogTail(30))
	}
	defer etcd2.Stop()
	ectl := &harness.Ctl{Bin: b.Etcdctl, Endpoints: []string{etcd2.ClientURL}}
	compareData(t, "etcd restored from strata's export", want, getAll(t, ectl, root))
	if r := must(t, ectl.Run("", "--user="+user, "get", "k1")); !strings.Contains(r.Stdout, "v1.2") {
		t.Errorf("u1 reading k1 on etcd restored from the export:\n%s", r)
	}
	if ttl := must(t, ectl.Run("", "--user="+root, "lease", "timetolive", leaseID, "--keys")); !strings.Contains(ttl.Stdout, "lk1") {
		t.Errorf("lease timetolive on etcd restored from the export:\n%s", ttl)
	}
}

func startServer(t *testing.T, bin, name string) *harness.Server {
	t.Helper()
	s, err := harness.NewServer(harness.ServerConfig{Bin: bin, Dir: filepath.Join(t.TempDir(), name)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatalf("%s: %v\n%s", name, err, s.LogTail(30))
	}
	t.Cleanup(func() { s.Stop() })
	return s
}

func must(t *testing.T, r harness.Result) harness.Result {
	t.Helper()
	if r.Code != 0 {
		t.Fatalf("etcdctl failed: %s", r)
	}
	return r
}

// run runs a tool and returns its stdout; it fails the test on a
// non-zero exit.
func run(t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", filepath.Base(bin), strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

type etcdutlStatus struct {
	Hash      uint32 `json:"hash"`
	Revision  int64  `json:"revision"`
	TotalKey  int    `json:"totalKey"`
	TotalSize int64  `json:"totalSize"`
}

func snapshotStatus(t *testing.T, etcdutl, path string) etcdutlStatus {
	t.Helper()
	out := run(t, etcdutl, "snapshot", "status", path, "-w", "json")
	var s etcdutlStatus
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("etcdutl snapshot status %s: %v in %s", path, err, out)
	}
	return s
}

// getAll is 'etcdctl get --prefix "" -w json' as user, parsed, with the
// header's cluster_id, member_id and raft_term removed: the restored
// cluster is a new one.
func getAll(t *testing.T, ctl *harness.Ctl, user string) map[string]any {
	t.Helper()
	r := must(t, ctl.Run("", "--user="+user, "get", "--prefix", "", "-w", "json"))
	dec := json.NewDecoder(strings.NewReader(r.Stdout))
	dec.UseNumber() // lease ids do not fit a float64
	var v map[string]any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("get -w json: %v in %s", err, r.Stdout)
	}
	h, _ := v["header"].(map[string]any)
	if h == nil || h["revision"] == nil {
		t.Fatalf("get -w json: no header revision in %s", r.Stdout)
	}
	delete(h, "cluster_id")
	delete(h, "member_id")
	delete(h, "raft_term")
	return v
}

func compareData(t *testing.T, what string, want, got map[string]any) {
	t.Helper()
	if !reflect.DeepEqual(want, got) {
		w, _ := json.MarshalIndent(want, "", " ")
		g, _ := json.MarshalIndent(got, "", " ")
		t.Fatalf("%s serves other data than etcd did.\nwant:\n%s\ngot:\n%s", what, w, g)
	}
	kvs, _ := want["kvs"].([]any)
	t.Logf("%s: same %d keys at revision %v", what, len(kvs), want["header"].(map[string]any)["revision"])
}
