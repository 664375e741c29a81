package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/strata-db/strata/e2e/harness"
)

// TestRefusesWALBehindPageStore runs a real strata, writes with etcdctl,
// stops it, truncates its WAL ten entries before the end (as an operator's
// truncate or a disk that lost the end of a file would), and starts it
// again. The member must exit at once, naming both indexes, both paths and
// what to do; `stratautl wal verify --data-dir` must fail with the same
// facts; and the recovery the message gives (restore the page store into
// a new data dir) must bring every acknowledged key back.
func TestRefusesWALBehindPageStore(t *testing.T) {
	b := needBins(t)
	util := stratautl(t, b)
	srv := startStrata(t, b)
	ctl := &harness.Ctl{Bin: b.Etcdctl, Endpoints: []string{srv.ClientURL}}
	const n = 40
	for i := 0; i < n; i++ {
		if r := ctl.Run("", "put", fmt.Sprintf("/wb/%02d", i), fmt.Sprintf("v%d", i)); r.Code != 0 {
			t.Fatalf("put: %s", r)
		}
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}

	walDir := filepath.Join(srv.DataDir, "member", "wal")
	dbPath := filepath.Join(srv.DataDir, "member", "snap", "db")
	out, err := exec.Command(util, "wal", "dump", "--dir", walDir, "--type", "entry", "-w", "json").Output()
	if err != nil {
		t.Fatalf("wal dump: %v", err)
	}
	type row struct {
		File   string `json:"file"`
		Offset int64  `json:"offset"`
		Index  uint64 `json:"index"`
	}
	var rows []row
	for _, ln := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r row
		if err := json.Unmarshal([]byte(ln), &r); err != nil {
			t.Fatalf("wal dump line %q: %v", ln, err)
		}
		rows = append(rows, r)
	}
	cut := rows[len(rows)-10]
	if err := os.Truncate(filepath.Join(walDir, cut.File), cut.Offset); err != nil {
		t.Fatal(err)
	}
	walLast := rows[len(rows)-11].Index

	// The member refuses to start.
	err = srv.Start()
	if err == nil {
		t.Fatalf("strata started on a WAL that lost applied entries; log:\n%s", srv.LogTail(20))
	}
	if !strings.Contains(err.Error(), "exited before it was ready") {
		t.Fatalf("start: %v", err)
	}
	logb, _ := os.ReadFile(srv.LogPath)
	log := string(logb)
	m := regexp.MustCompile(`but the page store (\S+) has applied entries up to index (\d+)`).FindStringSubmatch(log)
	if m == nil || m[1] != dbPath {
		t.Fatalf("the refusal does not name the page store %s and its index; log:\n%s", dbPath, srv.LogTail(10))
	}
	ci := m[2]
	for _, want := range []string{
		"failed to start strata",
		fmt.Sprintf("the WAL in %s ends at index %d", walDir, walLast),
		"stratautl snapshot restore " + dbPath + " --skip-hash-check",
		"etcdctl member remove",
	} {
		if !strings.Contains(log, want) {
			t.Fatalf("the refusal lacks %q; log:\n%s", want, srv.LogTail(10))
		}
	}

	// The offline check says the same.
	cmd := exec.Command(util, "wal", "verify", "--data-dir", srv.DataDir)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil {
		t.Fatal("stratautl wal verify --data-dir passed on a WAL behind the page store")
	}
	for _, want := range []string{
		fmt.Sprintf("the WAL in %s ends at index %d", walDir, walLast),
		fmt.Sprintf("the page store %s has applied entries up to index %s", dbPath, ci),
	} {
		if !strings.Contains(stderr.String(), want) {
			t.Fatalf("wal verify --data-dir lacks %q:\n%s", want, stderr.String())
		}
	}

	// The way out the message gives for a single member.
	srv2, err := harness.NewServer(harness.ServerConfig{Bin: srv.Bin(), Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	restore := exec.Command(util, "snapshot", "restore", dbPath, "--skip-hash-check", "--data-dir", srv2.DataDir,
		"--name", srv2.Name(), "--initial-cluster", srv2.Name()+"="+srv2.PeerURL,
		"--initial-advertise-peer-urls", srv2.PeerURL, "--initial-cluster-token", "strata-e2e")
	if out, err := restore.CombinedOutput(); err != nil {
		t.Fatalf("snapshot restore: %v\n%s", err, out)
	}
	if err := srv2.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv2.Stop() })
	ctl2 := &harness.Ctl{Bin: b.Etcdctl, Endpoints: []string{srv2.ClientURL}}
	r := ctl2.Run("", "get", "--prefix", "/wb/", "--keys-only", "-w", "json")
	if r.Code != 0 || !strings.Contains(r.Stdout, fmt.Sprintf(`"count":%d`, n)) {
		t.Fatalf("after the restore: %s", r)
	}
	if r := ctl2.Run("", "put", "/wb/after", "x"); r.Code != 0 {
		t.Fatalf("put after the restore: %s", r)
	}
}
