package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/strata-db/strata/e2e/harness"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// stratautl is the tool built next to the server under test.
func stratautl(t *testing.T, b *harness.Bins) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join(filepath.Dir(targetBin(t, b)), "stratautl"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("stratautl not built next to the server: %v (run make build)", err)
	}
	return p
}

func startStrata(t *testing.T, b *harness.Bins) *harness.Server {
	t.Helper()
	srv, err := harness.NewServer(harness.ServerConfig{Bin: targetBin(t, b), Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	return srv
}

// TestWALDumpShowsIssuedRequests issues puts, deletes, txns and lease grants
// through etcdctl against strata, stops it, and checks that `stratautl wal
// dump -w json` lists exactly those requests, in the order issued, with their
// keys.
func TestWALDumpShowsIssuedRequests(t *testing.T) {
	b := needBins(t)
	util := stratautl(t, b)
	srv := startStrata(t, b)
	ctl := &harness.Ctl{Bin: b.Etcdctl, Endpoints: []string{srv.ClientURL}}

	type want struct{ kind, key string }
	var wants []want
	must := func(stdin string, args ...string) {
		t.Helper()
		if r := ctl.Run(stdin, args...); r.Code != 0 {
			t.Fatalf("etcdctl %v: %s", args, r)
		}
	}
	for i := 0; i < 3; i++ {
		k := fmt.Sprintf("/dump/put/%d", i)
		must("", "put", k, "v")
		wants = append(wants, want{"put", k})
	}
	must("", "del", "/dump/put/1")
	wants = append(wants, want{"delete_range", "/dump/put/1"})
	must("value(\"/dump/put/0\") = \"v\"\n\nput /dump/txn/ok yes\n\nput /dump/txn/no no\n\n", "txn")
	wants = append(wants, want{"txn", "/dump/put/0"})
	must("", "lease", "grant", "600")
	wants = append(wants, want{"lease_grant", ""})
	must("", "del", "--prefix", "/dump/txn/")
	wants = append(wants, want{"delete_range", "/dump/txn/"})
	must("", "put", "/dump/last", "z")
	wants = append(wants, want{"put", "/dump/last"})

	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(util, "wal", "dump", "--dir", srv.DataDir, "--type", "entry", "-w", "json").Output()
	if err != nil {
		t.Fatalf("wal dump: %v", err)
	}
	type rec struct {
		Index   uint64 `json:"index"`
		Decoded struct {
			Kind string   `json:"request"`
			Keys []string `json:"keys"`
		} `json:"decoded"`
	}
	var got []rec
	for _, ln := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r rec
		if err := json.Unmarshal([]byte(ln), &r); err != nil {
			t.Fatalf("wal dump line %q: %v", ln, err)
		}
		// The member's own bookkeeping (leader's empty entry, membership
		// publication) is not what the client issued.
		switch r.Decoded.Kind {
		case "put", "delete_range", "txn", "lease_grant", "lease_revoke", "compaction":
			got = append(got, r)
		}
	}
	if len(got) != len(wants) {
		t.Fatalf("wal dump shows %d client requests, issued %d:\n%s", len(got), len(wants), out)
	}
	for i, w := range wants {
		g := got[i]
		if i > 0 && g.Index <= got[i-1].Index {
			t.Fatalf("entry %d: index %d not after %d", i, g.Index, got[i-1].Index)
		}
		if g.Decoded.Kind != w.kind {
			t.Fatalf("entry %d (index %d): %s, issued %s\n%s", i, g.Index, g.Decoded.Kind, w.kind, out)
		}
		if w.key != "" && (len(g.Decoded.Keys) == 0 || g.Decoded.Keys[0] != w.key) {
			t.Fatalf("entry %d (index %d): keys %q, issued %q", i, g.Index, g.Decoded.Keys, w.key)
		}
	}
	// The txn's keys include the compared key and both branches.
	txn := got[4].Decoded.Keys
	if strings.Join(txn, ",") != "/dump/put/0,/dump/txn/ok,/dump/txn/no" {
		t.Fatalf("txn keys %q", txn)
	}

	// A key-prefix filter keeps only the requests on that prefix.
	out, err = exec.Command(util, "wal", "dump", "--dir", srv.DataDir, "--key-prefix", "/dump/txn/", "-w", "json").Output()
	if err != nil {
		t.Fatalf("wal dump --key-prefix: %v", err)
	}
	if n := strings.Count(strings.TrimSpace(string(out)), "\n") + 1; n != 2 {
		t.Fatalf("--key-prefix /dump/txn/ shows %d entries, want the txn and the delete:\n%s", n, out)
	}
}

// TestOfflineDefragShrinks fills strata, deletes 75% of the data, compacts,
// stops the server, runs `stratautl defrag` and checks the file is at most
// 1.2x the bytes in use, then that the restarted server serves identical data.
func TestOfflineDefragShrinks(t *testing.T) {
	b := needBins(t)
	util := stratautl(t, b)
	srv := startStrata(t, b)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.ClientURL}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	const keys, perTxn = 4000, 100
	// Random bytes: a value of one letter would be stored compressed, and
	// the file would be too small for the 1.2x bound to mean anything.
	raw := make([]byte, 2048)
	rand.NewChaCha8([32]byte{'x'}).Read(raw)
	val := string(raw)
	for i := 0; i < keys; i += perTxn {
		ops := make([]clientv3.Op, 0, perTxn)
		for j := i; j < i+perTxn; j++ {
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("/defrag/%05d", j), val))
		}
		if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	// Delete three keys in four.
	for i := 0; i < keys; i += perTxn {
		ops := make([]clientv3.Op, 0, perTxn)
		for j := i; j < i+perTxn; j++ {
			if j%4 != 0 {
				ops = append(ops, clientv3.OpDelete(fmt.Sprintf("/defrag/%05d", j)))
			}
		}
		if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := cli.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	ctl := &harness.Ctl{Bin: b.Etcdctl, Endpoints: []string{srv.ClientURL}}
	before := ctl.Run("", "get", "--prefix", "", "-w", "json")
	if before.Code != 0 {
		t.Fatal(before)
	}
	cli.Close()
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}

	db := filepath.Join(srv.DataDir, "member", "snap", "db")
	fi, err := os.Stat(db)
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(util, "defrag", "--data-dir", srv.DataDir)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("stratautl defrag: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	after, err := os.Stat(db)
	if err != nil {
		t.Fatal(err)
	}
	var inUse float64
	var unit string
	for _, ln := range strings.Split(stdout.String(), "\n") {
		if s, ok := strings.CutPrefix(strings.TrimSpace(ln), "in use:"); ok {
			fmt.Sscanf(strings.TrimSpace(s), "%f %s", &inUse, &unit)
		}
	}
	mult := map[string]float64{"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[unit]
	if inUse == 0 || mult == 0 {
		t.Fatalf("no 'in use:' figure in the defrag summary:\n%s", stdout.String())
	}
	inUse *= mult
	ratio := float64(after.Size()) / inUse
	t.Logf("defrag: %d -> %d bytes, %.0f in use (file/in-use %.2f)\n%s", fi.Size(), after.Size(), inUse, ratio, stdout.String())
	if after.Size() >= fi.Size() {
		t.Fatalf("defrag did not shrink the file: %d -> %d bytes", fi.Size(), after.Size())
	}
	if ratio > 1.2 {
		t.Fatalf("file is %.2fx the bytes in use after defrag, want <= 1.2x", ratio)
	}
	if !strings.Contains(stderr.String(), "100%") {
		t.Fatalf("no progress shown on stderr: %q", stderr.String())
	}

	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	got := ctl.Run("", "get", "--prefix", "", "-w", "json")
	if got.Code != 0 {
		t.Fatal(got)
	}
	type kvs struct {
		Header struct {
			Revision int64 `json:"revision"`
		} `json:"header"`
		Kvs   []map[string]any `json:"kvs"`
		Count int              `json:"count"`
	}
	var a, c kvs
	if err := json.Unmarshal([]byte(before.Stdout), &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(got.Stdout), &c); err != nil {
		t.Fatal(err)
	}
	if a.Count != keys/4 || c.Count != a.Count || a.Header.Revision != c.Header.Revision {
		t.Fatalf("before defrag: %d keys at revision %d; after: %d keys at revision %d", a.Count, a.Header.Revision, c.Count, c.Header.Revision)
	}
	ja, _ := json.Marshal(a.Kvs)
	jc, _ := json.Marshal(c.Kvs)
	if !bytes.Equal(ja, jc) {
		t.Fatalf("data differs after defrag")
	}
}
