package e2e

// etcd's downgrade procedure on 3 members, side by side with etcd 3.7.3
// (cluster_diff_test.go's runner): TestDowngradeClusterDiff walks it on
// three members of the target; TestDowngradeMixed takes it to the end
// with real etcd 3.6.16 members, in clusters of both kinds.

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/strata-db/strata/e2e/harness"
)

// downgradeFlags are clusterDiffFlags with the downgrade monitor every
// second, so that its warnings and its cancel come within the test's
// waits.
var downgradeFlags = append(slices.Clone(clusterDiffFlags), "--downgrade-check-time=1s")

// allVersions is a step that polls every member's /version (up to 30 s)
// until each reports the given cluster and storage versions, and records
// each member's versions.
func allVersions(cluster, storage string) cstep {
	return cstep{name: fmt.Sprintf("every member at cluster %s, storage %s", cluster, storage),
		show: fmt.Sprintf("curl [each] /version until etcdcluster %s and storage %s", cluster, storage),
		run: func(t *testing.T, cs *clusterSide) harness.Result {
			var out strings.Builder
			for _, m := range cs.c.Members {
				var sv, c, st string
				deadline := time.Now().Add(30 * time.Second)
				for {
					var err error
					sv, c, st, err = versionsOf(m.ClientURL)
					if err == nil && c == cluster && st == storage || time.Now().After(deadline) {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
				if sv == "3.7.3" {
					sv = "3.7.x" // as the normalizer shows it
				}
				fmt.Fprintf(&out, "%s: etcdserver %s, etcdcluster %s, storage %s\n", m.Name(), sv, c, st)
			}
			return harness.Result{Stdout: out.String()}
		}}
}

// everyLogHas is a step that waits (up to 15 s) until each member's log
// (since its last start, for the members named; every member when none
// is) has a line with msg.
func everyLogHas(msg string, members ...int) cstep {
	return cstep{name: "logged: " + msg, show: fmt.Sprintf("grep %q <each log>", msg),
		run: func(t *testing.T, cs *clusterSide) harness.Result {
			var out strings.Builder
			for i, m := range cs.c.Members {
				if len(members) > 0 && !slices.Contains(members, i+1) {
					continue
				}
				deadline := time.Now().Add(15 * time.Second)
				found := false
				for !found && time.Now().Before(deadline) {
					if found = harnessLogHas(m, `"msg":"`+msg+`"`); !found {
						time.Sleep(100 * time.Millisecond)
					}
				}
				fmt.Fprintf(&out, "%s: %v\n", m.Name(), found)
			}
			return harness.Result{Stdout: out.String()}
		}}
}

// leaderLogHas is a step that waits (up to 15 s) for the leader's log to
// have a line with msg.
func leaderLogHas(msg string) cstep {
	return cstep{name: "the leader logged: " + msg, show: fmt.Sprintf("grep %q <leader's log>", msg),
		run: func(t *testing.T, cs *clusterSide) harness.Result {
			deadline := time.Now().Add(15 * time.Second)
			for time.Now().Before(deadline) {
				if harnessLogHas(clusterLeader(t, cs.c), `"msg":"`+msg+`"`) {
					return harness.Result{Stdout: "logged\n"}
				}
				time.Sleep(100 * time.Millisecond)
			}
			return harness.Result{Stdout: "not logged\n"}
		}}
}

// TestDowngradeClusterDiff is etcd's downgrade procedure up to replacing
// binaries, on 3 members: validate on a follower, enable, the versions
// lowered on every member, each member ready, the leader's monitor
// waiting for the members, the refusals during the downgrade, a cancel
// through a follower, and the versions raised back.
func TestDowngradeClusterDiff(t *testing.T) {
	runClusterDiff(t, "downgrade", downgradeFlags, []cstep{
		{name: "m1 leads", run: leaderOn(1), show: "make m1 the leader"},
		allVersions("3.7.0", "3.7.0"),
		{name: "endpoint status --cluster", on: 1, args: []string{"endpoint", "status", "--cluster", "-w", "json"}, json: true},
		{name: "downgrade validate 3.6 on a member", on: 2, args: []string{"downgrade", "validate", "3.6"}},
		{name: "downgrade enable 3.6", on: 3, args: []string{"downgrade", "enable", "3.6"}},
		allVersions("3.6.0", "3.6.0"),
		everyLogHas("The server is ready to downgrade"),
		leaderLogHas("remotes server has mismatching etcd version"),
		{name: "endpoint status --cluster during", on: 1, args: []string{"endpoint", "status", "--cluster", "-w", "json"}, json: true},
		{name: "downgrade enable 3.6 again", on: 1, args: []string{"downgrade", "enable", "3.6"}},
		{name: "downgrade enable 3.5", on: 2, args: []string{"downgrade", "enable", "3.5"}},
		{name: "put during the downgrade", on: 1, args: []string{"put", "dk", "dv"}},
		{name: "get on another member", on: 3, args: []string{"get", "dk", "-w", "json"}},
		{name: "downgrade cancel on a member", on: 2, args: []string{"downgrade", "cancel"}},
		allVersions("3.7.0", "3.7.0"),
		{name: "endpoint status --cluster after", on: 1, args: []string{"endpoint", "status", "--cluster", "-w", "json"}, json: true},
		{name: "downgrade cancel again", on: 3, args: []string{"downgrade", "cancel"}},
	})
}

// inPlace is a step that stops member n and starts it again on its data
// dir with bin: a binary replaced, as etcd's procedure does it.
func inPlace(n int, label string, bin func(*harness.Bins) string) cstep {
	return cstep{name: fmt.Sprintf("m%d restarts as %s", n, label), show: fmt.Sprintf("stop m%d; start %s on its data dir", n, label),
		run: func(t *testing.T, cs *clusterSide) harness.Result {
			m := cs.c.Members[n-1]
			if err := m.Stop(); err != nil {
				t.Fatalf("%s: stop %s: %v", cs.label, m.Name(), err)
			}
			m.SetBin(bin(cs.bins))
			if err := m.Start(); err != nil {
				t.Fatalf("%s: start %s as %s: %v", cs.label, m.Name(), label, err)
			}
			return harness.Result{Stdout: fmt.Sprintf("m%d ready\n", n)}
		}}
}

// joinFresh is a step that adds member n through member via and starts
// it with bin on an empty data dir, with what member add printed.
func joinFresh(n, via int, label string, bin func(*harness.Bins) string) cstep {
	return cstep{name: fmt.Sprintf("m%d joins as %s", n, label), show: fmt.Sprintf("etcdctl [m%d] member add m%d; start %s with its ETCD_* lines", via, n, label),
		run: func(t *testing.T, cs *clusterSide) harness.Result {
			name := fmt.Sprintf("m%d", n)
			s, err := harness.NewServer(harness.ServerConfig{Bin: bin(cs.bins), Name: name, Dir: cs.dir,
				Flags: append(slices.Clone(downgradeFlags), "--initial-cluster-state=existing")})
			if err != nil {
				t.Fatal(err)
			}
			cs.rcMask(n, s, fmt.Sprintf("<peer%d>", n))
			r := cs.rcRetry(t, via, msgUnhealthy, "member", "add", name, "--peer-urls="+s.AdvertisePeerURL)
			m := reRCAdded.FindStringSubmatch(r.Stdout)
			if r.Code != 0 || m == nil {
				t.Fatalf("%s: member add %s:\n%s", cs.label, name, r)
			}
			id, err := strconv.ParseUint(m[1], 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			cs.norm.AssignIDs(id)
			env := map[string]string{}
			for _, kv := range reRCEnv.FindAllStringSubmatch(r.Stdout, -1) {
				env[kv[1]] = kv[2]
			}
			harness.WithInitialCluster(s, env["ETCD_INITIAL_CLUSTER"])
			cs.c.Members = append(cs.c.Members, s)
			if err := s.Start(); err != nil {
				t.Fatalf("%s: start %s: %v", cs.label, name, err)
			}
			r.Stdout += name + " ready\n"
			return r
		}}
}

func etcd36(b *harness.Bins) string  { return b.Etcd36 }
func etcd373(b *harness.Bins) string { return b.Etcd }

// TestDowngradeMixed takes the downgrade to its end with real etcd
// 3.6.16 members, in clusters where the target's members are the ones a
// downgrade cannot replace in place (a Strata data dir is not an etcd
// one), and compares every step with the same walk on 3 etcd members:
//
//  1. downgrade enable 3.6: every member lowers its versions and is
//     ready;
//  2. the etcd members restart as etcd 3.6.16 on their data dirs and
//     rejoin (on side A the same positions do);
//  3. the leader keeps the downgrade (a 3.7 member is left); an operator
//     cancels it, and the cluster version stays 3.6, the lowest member's;
//  4. a fresh etcd 3.6.16 member joins through member add and serves the
//     data;
//  5. upgrade: the 3.6 members restart as etcd 3.7.3, and the leader
//     raises the cluster and storage versions back to 3.7.
//
// In a Strata cluster (m1, m2 Strata, m3 etcd) the 3.6 members join a
// cluster whose other members are Strata; in an etcd cluster (m1, m2
// etcd, m3 Strata) the Strata member does what a 3.7 etcd member does in
// the same place.
func TestDowngradeMixed(t *testing.T) {
	b := needBins(t)
	strata := strataTarget(t)
	for _, mix := range []struct {
		name  string
		bins  []string
		etcds []int // the etcd members, replaced in place
		// strataLeads: m1, a Strata member, leads when m4 joins, so the
		// 3.6 member installs a snapshot a Strata leader wrote.
		strataLeads bool
	}{
		{"m1-strata,m2-strata,m3-etcd", []string{strata, strata, b.Etcd}, []int{3}, true},
		{"m1-etcd,m2-etcd,m3-strata", []string{b.Etcd, b.Etcd, strata}, []int{1, 2}, false},
	} {
		t.Run(mix.name, func(t *testing.T) {
			steps := []cstep{
				allVersions("3.7.0", "3.7.0"),
				{name: "put before", on: 1, args: []string{"put", "before", "1"}},
				{name: "downgrade enable 3.6", on: 1, args: []string{"downgrade", "enable", "3.6"}},
				allVersions("3.6.0", "3.6.0"),
				everyLogHas("The server is ready to downgrade"),
			}
			for _, n := range mix.etcds {
				steps = append(steps, inPlace(n, "etcd 3.6.16", etcd36))
			}
			steps = append(steps,
				allVersions("3.6.0", "3.6.0"),
				cstep{name: "put on a 3.6 member", on: mix.etcds[0], args: []string{"put", "during", "2"}},
				cstep{name: "get on another member", on: 2, args: []string{"get", "during", "-w", "json"}},
				cstep{name: "m1 leads", run: leaderOn(1), show: "make m1 the leader"},
				cstep{name: "endpoint status --cluster", on: 1, args: []string{"endpoint", "status", "--cluster", "-w", "json"}, json: true},
				cstep{name: "endpoint hashkv --cluster", on: 1, args: []string{"endpoint", "hashkv", "--cluster"}, rows: true},
				leaderLogHas("remotes server has mismatching etcd version"),
				cstep{name: "downgrade cancel", on: 1, args: []string{"downgrade", "cancel"}},
				cstep{name: "endpoint status --cluster after the cancel", on: 1, args: []string{"endpoint", "status", "--cluster", "-w", "json"}, json: true},
				joinFresh(4, 1, "etcd 3.6.16", etcd36),
				cstep{name: "get on the new member", on: 4, args: []string{"get", "--prefix", "", "-w", "json"}},
				allVersions("3.6.0", "3.6.0"),
			)
			for _, n := range append(slices.Clone(mix.etcds), 4) {
				steps = append(steps, inPlace(n, "etcd 3.7.3", etcd373))
			}
			steps = append(steps,
				allVersions("3.7.0", "3.7.0"),
				cstep{name: "put after", on: 4, args: []string{"put", "after", "3"}},
				cstep{name: "get after on m3", on: 3, args: []string{"get", "--prefix", "", "-w", "json"}},
				cstep{name: "m1 leads at the end", run: leaderOn(1), show: "make m1 the leader"},
				cstep{name: "endpoint status --cluster at the end", on: 1, args: []string{"endpoint", "status", "--cluster", "-w", "json"}, json: true},
				cstep{name: "endpoint hashkv --cluster at the end", on: 1, args: []string{"endpoint", "hashkv", "--cluster"}, rows: true},
			)
			c := runClusterDiffBins(t, "downgrade "+mix.name, downgradeFlags, steps, mix.bins)
			if mix.strataLeads && !harnessLogHas(c.Members[0], "sending a snapshot in etcd's format to an etcd follower") {
				t.Errorf("m1 sent no snapshot: the 3.6 member did not join from a Strata leader's snapshot")
			}
			t.Logf("MIXED: downgrade %s: 3.6.16 members restarted in place and joined fresh, the cluster went to 3.6 and back to 3.7 as 3 etcd members do", mix.name)
		})
	}
}
