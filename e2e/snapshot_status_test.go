package e2e

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/strata-db/strata/e2e/harness"
)

// TestSnapshotStatusMatchesEtcdutl saves a snapshot from real etcd and
// checks that stratautl reports the same hash, revision, key count and
// size for it as etcdutl does.
func TestSnapshotStatusMatchesEtcdutl(t *testing.T) {
	b := needBins(t)
	stratautl, err := filepath.Abs("../bin/stratautl")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := harness.NewServer(harness.ServerConfig{Bin: b.Etcd, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	ctl := &harness.Ctl{Bin: b.Etcdctl, Endpoints: []string{srv.ClientURL}}
	for i := 0; i < 20; i++ {
		if r := ctl.Run("", "put", fmt.Sprintf("k%d", i%7), fmt.Sprintf("v%d", i)); r.Code != 0 {
			t.Fatal(r)
		}
	}
	ctl.Run("", "del", "k3")
	snap := filepath.Join(t.TempDir(), "snapshot.db")
	if r := ctl.Run("", "snapshot", "save", snap); r.Code != 0 {
		t.Fatal(r)
	}
	type status struct {
		Hash      uint32 `json:"hash"`
		Revision  int64  `json:"revision"`
		TotalKey  int    `json:"totalKey"`
		TotalSize int64  `json:"totalSize"`
	}
	read := func(bin string) status {
		out, err := exec.Command(bin, "snapshot", "status", snap, "-w", "json").Output()
		if err != nil {
			t.Fatalf("%s snapshot status: %v", bin, err)
		}
		var s status
		if err := json.Unmarshal(out, &s); err != nil {
			t.Fatalf("%s: %v in %s", bin, err, out)
		}
		return s
	}
	want, got := read(b.Etcdutl), read(stratautl)
	if got != want {
		t.Fatalf("stratautl %+v, etcdutl %+v", got, want)
	}
	t.Logf("both report %+v", got)
}
