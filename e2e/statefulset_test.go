package e2e

// The Helm chart's scale logic: members started as
// StatefulSet pods ('strata statefulset start') bootstrap a cluster, a
// scale-up pod joins as a learner and is promoted, a pod whose member was
// removed comes back as a new member, and a pod whose volume was lost
// replaces its stale record. The scale-down half (the preStop hook
// reading the StatefulSet from a real kube-apiserver) is in
// kube_test.go.

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/strata-db/strata/e2e/harness"
	"github.com/strata-db/strata/internal/poll"
)

// podSet is a StatefulSet's pods run as local processes: members named
// <set>-<ordinal>, each started with 'strata statefulset start' and the
// --initial-cluster the chart renders for the replicas.
type podSet struct {
	t    *testing.T
	bin  string
	dir  string
	name string
	pods []*harness.Server
}

func newPodSet(t *testing.T, bin, name string) *podSet {
	ps := &podSet{t: t, bin: bin, dir: t.TempDir(), name: name}
	t.Cleanup(func() {
		for _, p := range ps.pods {
			if err := p.Stop(); err != nil {
				t.Errorf("stop %s: %v", p.Name(), err)
			}
			if t.Failed() {
				t.Logf("log of %s:\n%s", p.Name(), p.LogTail(80))
			}
		}
	})
	return ps
}

// scaleTo allocates pods up to n and sets every pod's --initial-cluster
// to the first n, as a chart upgrade to n replicas does.
func (ps *podSet) scaleTo(n int) {
	ps.t.Helper()
	for len(ps.pods) < n {
		s, err := harness.NewServer(harness.ServerConfig{
			Bin: ps.bin, Name: fmt.Sprintf("%s-%d", ps.name, len(ps.pods)), Dir: ps.dir,
			Flags: clusterFlags, Subcommand: []string{"statefulset", "start"}, InitialCluster: "pending",
		})
		if err != nil {
			ps.t.Fatal(err)
		}
		ps.pods = append(ps.pods, s)
	}
	var parts []string
	for _, p := range ps.pods[:n] {
		parts = append(parts, p.Name()+"="+p.AdvertisePeerURL)
	}
	for _, p := range ps.pods {
		harness.WithInitialCluster(p, strings.Join(parts, ","))
	}
}

// start starts the pods given, in parallel.
func (ps *podSet) start(ords ...int) {
	ps.t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(ords))
	for i, o := range ords {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = ps.pods[o].Start()
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			ps.t.Fatalf("start %s: %v\n%s", ps.pods[ords[i]].Name(), err, ps.pods[ords[i]].LogTail(40))
		}
	}
}

type memberInfo struct {
	ID      uint64
	Name    string
	Learner bool
	Started bool
}

// waitVoters waits until the cluster lists exactly names, every one a
// started voter, and returns their ids by name.
func (ps *podSet) waitVoters(via int, names ...string) map[string]uint64 {
	ps.t.Helper()
	var ids map[string]uint64
	var last []*memberInfo
	cli := memberClient(ps.t, ps.pods[via])
	err := poll.Check(func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := cli.MemberList(ctx)
		cancel()
		if err != nil {
			return false
		}
		last = last[:0]
		ids = map[string]uint64{}
		for _, m := range resp.Members {
			last = append(last, &memberInfo{ID: m.ID, Name: m.Name, Learner: m.IsLearner, Started: len(m.ClientURLs) > 0})
			if m.IsLearner || len(m.ClientURLs) == 0 {
				return false
			}
			ids[m.Name] = m.ID
		}
		if len(ids) != len(names) {
			return false
		}
		for _, n := range names {
			if _, ok := ids[n]; !ok {
				return false
			}
		}
		return true
	})
	if err != nil {
		var desc []string
		for _, m := range last {
			desc = append(desc, fmt.Sprintf("%+v", *m))
		}
		ps.t.Fatalf("the cluster never listed exactly %v as started voters; last: %s", names, strings.Join(desc, " "))
	}
	return ids
}

func (ps *podSet) logHas(o int, text string) bool { return harnessLogHas(ps.pods[o], text) }

// TestStatefulSetLatePod: a pod of a new StatefulSet that starts after
// another pod is already up finds the cluster's bootstrap record of its
// own member (named from --initial-cluster, as etcd names every bootstrap
// member, but never started: no client URLs) and joins the bootstrap. It
// used to take the record for a stale one from a lost volume and try to
// remove it from a cluster with no quorum yet, and never started.
func TestStatefulSetLatePod(t *testing.T) {
	bin := strataTarget(t)
	ps := newPodSet(t, bin, "late")
	ps.scaleTo(3)
	first := make(chan error, 1)
	go func() { first <- ps.pods[0].Start() }() // ready only once a second member runs
	poll.Until(t, "late-0 to serve its peer port", func() bool {
		resp, err := http.Get(ps.pods[0].PeerURL + "/members")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	ps.start(1)
	if err := <-first; err != nil {
		t.Fatalf("start late-0: %v", err)
	}
	ps.start(2)
	ps.waitVoters(0, "late-0", "late-1", "late-2")
	for o := 1; o < 3; o++ {
		if !ps.logHas(o, "joining the bootstrap") {
			t.Errorf("late-%d did not join the bootstrap:\n%s", o, ps.pods[o].LogTail(20))
		}
	}
}

func TestStatefulSetScale(t *testing.T) {
	bin := strataTarget(t)
	ps := newPodSet(t, bin, "strata")

	// Parallel start of 3 replicas: each either finds no other member or
	// finds itself listed from the bootstrap; all bootstrap the same cluster.
	ps.scaleTo(3)
	ps.start(0, 1, 2)
	ids := ps.waitVoters(0, "strata-0", "strata-1", "strata-2")
	for o := 0; o < 3; o++ {
		if !ps.logHas(o, "bootstrapping the cluster from --initial-cluster") && !ps.logHas(o, "joining the bootstrap") {
			t.Errorf("strata-%d did not log a bootstrap decision", o)
		}
	}
	cli := memberClient(t, ps.pods[0])
	rev := putN(t, cli, "sts/a", 50)

	// Scale-up to 4 (helm upgrade --set replicas=...): the new pod is
	// added as a learner, catches up, and is promoted.
	ps.scaleTo(4)
	ps.start(3)
	if !ps.logHas(3, "added to the running cluster as a learner (scale-up)") {
		t.Fatalf("strata-3 did not join as a learner:\n%s", ps.pods[3].LogTail(30))
	}
	ids4 := ps.waitVoters(0, "strata-0", "strata-1", "strata-2", "strata-3")
	poll.Until(t, "strata-3 to log its promotion", func() bool { return ps.logHas(3, "promoted this member from learner to voter") })
	waitRev(t, ps.pods[3], rev)
	for n, id := range ids {
		if ids4[n] != id {
			t.Errorf("%s changed id on scale-up: %x -> %x", n, id, ids4[n])
		}
	}

	// A restart of a pod changes nothing: same id, no membership change.
	if err := ps.pods[1].Restart(); err != nil {
		t.Fatal(err)
	}
	if !ps.logHas(1, "the data directory holds a member of the cluster; restarting it") {
		t.Errorf("strata-1 restart was not a plain restart:\n%s", ps.pods[1].LogTail(20))
	}
	if got := ps.waitVoters(0, "strata-0", "strata-1", "strata-2", "strata-3"); got["strata-1"] != ids["strata-1"] {
		t.Errorf("strata-1 changed id on restart")
	}

	// The scale-down hook removed strata-3 (here: member remove, as the
	// hook does); the pod's volume is kept. Scaling up again brings the
	// pod back on its old volume: the member must start afresh.
	// (A cluster refuses reconfiguration until the restarted member has
	// been connected a while: "unhealthy cluster"; the hook retries too.)
	poll.UntilNil(t, "member remove strata-3", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := cli.MemberRemove(ctx, ids4["strata-3"])
		return err
	})
	code, err := ps.pods[3].WaitExit(poll.Deadline)
	if err != nil || code != 0 {
		t.Fatalf("removed strata-3 exited %d, %v", code, err)
	}
	ps.waitVoters(0, "strata-0", "strata-1", "strata-2")
	rev = putN(t, cli, "sts/b", 50)
	ps.start(3)
	if !ps.logHas(3, "removed from the cluster earlier; added again as a learner") {
		t.Fatalf("strata-3 did not rejoin as a new member:\n%s", ps.pods[3].LogTail(30))
	}
	moved, _ := filepath.Glob(ps.pods[3].DataDir + ".removed-*")
	if len(moved) != 1 {
		t.Errorf("the removed member's data directory was not moved aside once: %v", moved)
	}
	again := ps.waitVoters(0, "strata-0", "strata-1", "strata-2", "strata-3")
	if again["strata-3"] == ids4["strata-3"] {
		t.Errorf("strata-3 came back under its removed id %x", again["strata-3"])
	}
	waitRev(t, ps.pods[3], rev)

	// A pod whose volume is lost: its stale record is replaced.
	if err := ps.pods[2].Stop(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(ps.pods[2].DataDir); err != nil {
		t.Fatal(err)
	}
	rev = putN(t, cli, "sts/c", 50)
	ps.start(2)
	if !ps.logHas(2, "its data was lost; added again as a learner") {
		t.Fatalf("strata-2 did not replace its stale record:\n%s", ps.pods[2].LogTail(30))
	}
	final := ps.waitVoters(0, "strata-0", "strata-1", "strata-2", "strata-3")
	if final["strata-2"] == ids["strata-2"] {
		t.Errorf("strata-2 kept its lost id %x", final["strata-2"])
	}
	waitRev(t, ps.pods[2], rev)
	resp, err := memberClient(t, ps.pods[2]).Get(context.Background(), "sts/", clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithSerializable())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 150 {
		t.Fatalf("strata-2 after rejoining: %d keys under sts/, want 150", resp.Count)
	}
	t.Logf("STATEFULSET: bootstrap 3, scale-up to 4 (learner, promoted), restart kept id, removed pod rejoined as %x (was %x), lost volume replaced %x by %x",
		again["strata-3"], ids4["strata-3"], ids["strata-2"], final["strata-2"])
}
