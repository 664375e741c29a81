package e2e

// Disaster recovery into a new cluster, the way etcd's docs walk it: a
// snapshot of a member is restored with 'stratautl snapshot restore' into
// a single new member, which then grows to three with 'etcdctl member
// add', each new member started from exactly the ETCD_NAME,
// ETCD_INITIAL_CLUSTER and ETCD_INITIAL_CLUSTER_STATE lines member add
// prints.

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-db/strata/e2e/harness"
	"github.com/strata-db/strata/internal/poll"
)

// memberAddEnv parses the ETCD_* lines etcdctl member add prints.
func memberAddEnv(t *testing.T, out string) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, ln := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(ln), "=")
		if ok && strings.HasPrefix(k, "ETCD_") {
			env[k] = strings.Trim(v, `"`)
		}
	}
	for _, k := range []string{"ETCD_NAME", "ETCD_INITIAL_CLUSTER", "ETCD_INITIAL_CLUSTER_STATE"} {
		if env[k] == "" {
			t.Fatalf("member add printed no %s:\n%s", k, out)
		}
	}
	return env
}

func TestRestoreThenGrow(t *testing.T) {
	b := needBins(t)
	util := stratautl(t, b)
	dir := t.TempDir()

	// The old member: 200 keys, a snapshot.
	old := startStrata(t, b)
	ctl := &harness.Ctl{Bin: b.Etcdctl, Endpoints: []string{old.ClientURL}}
	for i := 0; i < 200; i++ {
		if r := ctl.Run("", "put", fmt.Sprintf("/restore/%03d", i), fmt.Sprintf("v%d", i)); r.Code != 0 {
			t.Fatalf("put: %s", r)
		}
	}
	snap := filepath.Join(dir, "snap.db")
	if r := ctl.Run("", "snapshot", "save", snap); r.Code != 0 {
		t.Fatalf("snapshot save: %s", r)
	}
	if err := old.Stop(); err != nil {
		t.Fatal(err)
	}

	// Restored into a new one-member cluster.
	r1, err := harness.NewServer(harness.ServerConfig{Bin: targetBin(t, b), Name: "r1", Dir: dir,
		Flags: []string{"--heartbeat-interval=50", "--election-timeout=500"}})
	if err != nil {
		t.Fatal(err)
	}
	members := []*harness.Server{r1}
	t.Cleanup(func() {
		for _, m := range members {
			_ = m.Stop()
			if t.Failed() {
				t.Logf("log of %s:\n%s", m.Name(), m.LogTail(40))
			}
		}
	})
	out, err := exec.Command(util, "snapshot", "restore", snap, "--no-progress", "--data-dir", r1.DataDir, "--name", "r1",
		"--initial-cluster", "r1="+r1.AdvertisePeerURL, "--initial-advertise-peer-urls", r1.AdvertisePeerURL,
		"--initial-cluster-token", harness.ClusterToken).CombinedOutput()
	if err != nil {
		t.Fatalf("stratautl snapshot restore: %v\n%s", err, out)
	}
	if err := r1.Start(); err != nil {
		t.Fatal(err)
	}

	// Grown to three by member add, each started from what it printed.
	for _, name := range []string{"r2", "r3"} {
		// The state flag comes after the harness's own, so it wins; the
		// test checks below that member add printed the same.
		m, err := harness.NewServer(harness.ServerConfig{Bin: targetBin(t, b), Name: name, Dir: dir,
			Flags: []string{"--heartbeat-interval=50", "--election-timeout=500", "--initial-cluster-state=existing"}})
		if err != nil {
			t.Fatal(err)
		}
		var eps []string
		for _, x := range members {
			eps = append(eps, x.ClientURL)
		}
		c := &harness.Ctl{Bin: b.Etcdctl, Endpoints: eps}
		// etcd's strict reconfiguration check refuses the add ("unhealthy
		// cluster") until the leader has been connected to the members
		// for 5 s; like an operator, retry on that refusal only.
		var r harness.Result
		poll.Until(t, "member add "+name+" to be accepted", func() bool {
			r = c.Run("", "member", "add", name, "--peer-urls="+m.AdvertisePeerURL)
			if r.Code != 0 && !strings.Contains(r.Stderr, "etcdserver: unhealthy cluster") {
				t.Fatalf("member add %s: %s", name, r)
			}
			return r.Code == 0
		})
		env := memberAddEnv(t, r.Stdout)
		if env["ETCD_NAME"] != name || env["ETCD_INITIAL_CLUSTER_STATE"] != "existing" {
			t.Fatalf("member add %s printed %v", name, env)
		}
		m = harness.WithInitialCluster(m, env["ETCD_INITIAL_CLUSTER"])
		members = append(members, m)
		if err := m.Start(); err != nil {
			t.Fatal(err)
		}
	}

	// Every member serves every restored key, and a new write.
	var eps []string
	for _, m := range members {
		eps = append(eps, m.ClientURL)
	}
	all := &harness.Ctl{Bin: b.Etcdctl, Endpoints: eps}
	if r := all.Run("", "put", "/restore/new", "after-grow"); r.Code != 0 {
		t.Fatalf("put after grow: %s", r)
	}
	for _, m := range members {
		c := &harness.Ctl{Bin: b.Etcdctl, Endpoints: []string{m.ClientURL}}
		poll.Until(t, m.Name()+" to serve the restored keys and the new one", func() bool {
			r := c.Run("", "get", "/restore/", "--prefix", "--count-only", "--consistency=s", "-w", "fields")
			return r.Code == 0 && strings.Contains(r.Stdout, `"Count" : 201`)
		})
	}
	r := all.Run("", "member", "list")
	if r.Code != 0 || strings.Count(strings.TrimSpace(r.Stdout), "\n") != 2 || strings.Contains(r.Stdout, "unstarted") || strings.Contains(r.Stdout, ", true") {
		t.Fatalf("member list after growing the restored member: %s", r)
	}
	t.Logf("RESTORE-GROW: restored 200 keys into r1, grown to 3 members by member add; member list:\n%s", r.Stdout)
}
