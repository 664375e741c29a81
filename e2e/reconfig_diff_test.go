package e2e

// TestReconfigDiff: etcd's runtime-reconfiguration walk-through, run on a
// 3-member etcd 3.7.3 (side A) and a 3-member $STRATA_E2E_TARGET (side
// B) started with the same flags, etcdctl 3.7.3 as the client; every
// step's normalized output must be the same on both (the step runner,
// the id numbering and the URL masks of cluster_diff_test.go).
//
// The walk: a learner m4 is added (the printed ETCD_* lines are the
// flags it is started with), promoted too early (before it runs, so its
// log is empty whatever the timing), started with
// --initial-cluster-state existing, refused linearizable requests while
// it catches up, promoted once in sync and given the leadership; m2's
// peer URL is updated and m2 restarted on it; m3 is removed and its
// process exits; m2 is SIGKILLed, removed and replaced by a fresh m5
// that serves the data. In between, every refusal with etcd's message:
// too many learners, a peer URL in use, unknown ids, promoting a voter,
// moving the leadership to a learner or an unknown id, and the strict
// reconfiguration checks while m5 is added but not started (they are
// made before the membership checks, and etcd answers "not enough
// started members" with gRPC code Unknown).
//
// Ids: <id1>..<id3> are m1..m3, <id4> the cluster, <id5> m4, <id6> m5
// (assigned when member add prints them). URLs: <clientN>, <peerN> by
// member; m2's new peer URL is <peer2-new> (its client URL stays
// <client2>, though m2 comes back on a new port).
//
// etcd refuses a member add (even a learner's) with "unhealthy cluster"
// until the member it reaches has been connected to every other voter
// for 5 s (HealthInterval), and a member remove in some such cases: those
// commands are retried on that message only, with a deadline; what is
// recorded is the answer that ended the retries.

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/strata-db/strata/e2e/harness"
	"github.com/strata-db/strata/internal/poll"
)

// reconfigFlags are every member's flags on both sides, the members that
// join included (they add --initial-cluster-state existing).
var reconfigFlags = []string{"--heartbeat-interval=50", "--election-timeout=500", "--max-learners=1"}

var (
	reRCAdded = regexp.MustCompile(`Member +([0-9a-f]+) added (?:as learner )?to cluster +([0-9a-f]+)`)
	reRCEnv   = regexp.MustCompile(`(?m)^(ETCD_[A-Z_]+)="([^"]*)"$`)
)

const (
	msgUnhealthy = "etcdserver: unhealthy cluster"
	msgNotInSync = "etcdserver: can only promote a learner member which is in sync with leader"
)

func TestReconfigDiff(t *testing.T) {
	start := time.Now()
	// m2's replacement process (same data dir, new ports), per side,
	// between the member update and the restart.
	next := map[*clusterSide]*harness.Server{}
	steps := []cstep{
		// 1. A running cluster with some keys.
		{name: "m1 leads", run: leaderOn(1), show: "make m1 the leader"},
		{name: "put k1", on: 1, args: []string{"put", "k1", "v1"}},
		{name: "put k2", on: 1, args: []string{"put", "k2", "v2"}},
		{name: "put k3", on: 1, args: []string{"put", "k3", "v3"}},
		{name: "member list (table) before", on: 1, args: []string{"member", "list", "-w", "table"}},

		// 2. A learner is added; its ETCD_* lines are what it starts with.
		{name: "member add m4 --learner", run: rcAddMember(4, 1, true),
			show: "etcdctl [m1] member add m4 --peer-urls=<peer4> --learner"},
		{name: "member list with an unstarted learner", on: 1, args: []string{"member", "list"}},
		{name: "member list -w json on a follower", on: 2, args: []string{"member", "list", "-w", "json"}},

		// 3. Promoted too early: it has not even started.
		{name: "promote the unstarted learner", on: 1, args: []string{"member", "promote", "${id4}"}},
		{name: "promote the unstarted learner through a follower", on: 2, args: []string{"member", "promote", "${id4}"}},
		// 5. (before promotion) the leadership cannot go to a learner.
		{name: "move-leader to the learner", on: 1, args: []string{"move-leader", "${id4}"}},
		// 9. Refusals while the learner slot is taken.
		{name: "a second learner beyond --max-learners=1", on: 1, args: []string{"member", "add", "m9", "--learner", "--peer-urls=http://10.0.0.9:2380"}},
		{name: "a learner with a peer URL in use", run: rcCtlURL(1, "<peer1>", "member", "add", "m9", "--learner", "--peer-urls=${url}"),
			show: "etcdctl [m1] member add m9 --learner --peer-urls=<peer1>"},
		{name: "a voter with a peer URL in use", run: rcCtlURL(2, "<peer2>", "member", "add", "m9", "--peer-urls=${url}"),
			show: "etcdctl [m2] member add m9 --peer-urls=<peer2>"},
		{name: "promote a voter", on: 1, args: []string{"member", "promote", "${id2}"}},
		{name: "promote a voter through a follower", on: 3, args: []string{"member", "promote", "${id2}"}},
		{name: "promote an unknown id", on: 1, args: []string{"member", "promote", "1234"}},
		{name: "remove an unknown id", on: 1, args: []string{"member", "remove", "1234"}},
		{name: "update an unknown id", on: 1, args: []string{"member", "update", "1234", "--peer-urls=http://10.0.0.11:2380"}},

		// 2. (cont.) The learner starts with the printed values, and
		// catches up while writes go on.
		{name: "start m4 (existing)", run: rcStartJoined(4), show: "start m4 with ETCD_NAME, ETCD_INITIAL_CLUSTER, ETCD_INITIAL_ADVERTISE_PEER_URLS, ETCD_INITIAL_CLUSTER_STATE as printed"},
		{name: "writes while m4 catches up", run: rcCatchUp(4, 1, "walk", 20), show: "20 puts through m1; wait until m4 serves revision <last> (serializable)"},
		{name: "endpoint status of the learner", on: 4, args: []string{"endpoint", "status", "-w", "table"}},
		// 4. A learner serves serializable reads only.
		{name: "linearizable get on the learner", on: 4, args: []string{"get", "walk/0019"}},
		{name: "serializable get on the learner", on: 4, args: []string{"get", "walk/0019", "--consistency=s"}},
		// RangeStream is a stream: a learner serves none but Snapshot.
		{name: "get --stream on the learner", on: 4, args: []string{"get", "walk/0019", "--consistency=s", "--stream"}},
		{name: "member list on the learner", on: 4, args: []string{"member", "list"}},
		{name: "member list --consistency=s on the learner", on: 4, args: []string{"member", "list", "--consistency=s"}},
		{name: "put on the learner", on: 4, args: []string{"put", "from-learner", "x"}},
		{name: "endpoint health of the learner", on: 4, args: []string{"endpoint", "health"}},
		// 3. (cont.) Promoted once in sync.
		{name: "promote m4 once in sync", run: rcPromoteWhenReady(4, 1), show: "etcdctl [m1] member promote ${id4} (again while: " + msgNotInSync + ")"},
		{name: "member list (table) after promotion", on: 1, args: []string{"member", "list", "-w", "table"}},
		{name: "linearizable get on the promoted member", on: 4, args: []string{"get", "walk/0019"}},
		{name: "promote it again", on: 1, args: []string{"member", "promote", "${id4}"}},

		// 5. The leadership moves to the new member.
		{name: "move-leader to m4", on: 1, args: []string{"move-leader", "${id4}"}},
		{name: "m4 leads", run: rcCheckLeader(), show: "which member leads"},
		{name: "move-leader to an unknown id", on: 4, args: []string{"move-leader", "1234"}},
		{name: "m1 leads again", run: leaderOn(1), show: "make m1 the leader"},

		// 6. m2 moves to a new peer URL and restarts there.
		{name: "member update m2 to a new peer URL", run: rcUpdatePeerURL(2, 1, next),
			show: "etcdctl [m1] member update ${id2} --peer-urls=<peer2-new>"},
		{name: "member update to a peer URL in use", run: rcCtlURL(1, "<peer1>", "member", "update", "${id4}", "--peer-urls=${url}"),
			show: "etcdctl [m1] member update ${id4} --peer-urls=<peer1>"},
		{name: "m2 restarts on its new peer URL", run: rcRestartOnNew(2, next), show: "stop m2; start it on <peer2-new> on the same data dir; wait for it to catch up"},
		{name: "member list (table) after update", on: 1, args: []string{"member", "list", "-w", "table"}},
		{name: "put on m2 after its move", on: 2, args: []string{"put", "k4", "v4"}},
		{name: "linearizable get on m3", on: 3, args: []string{"get", "k", "--prefix"}},

		// 7. m3 is removed; its process exits.
		{name: "member remove m3", run: rcCtlRetry(1, msgUnhealthy, "member", "remove", "${id3}"),
			show: "etcdctl [m1] member remove ${id3} (again while: " + msgUnhealthy + ")"},
		{name: "the removed member exits", run: rcWaitExit(3), show: "wait for m3's process to exit"},
		{name: "member list after remove", on: 1, args: []string{"member", "list"}},
		{name: "remove the removed member again", on: 1, args: []string{"member", "remove", "${id3}"}},
		{name: "update the removed member", on: 1, args: []string{"member", "update", "${id3}", "--peer-urls=http://10.0.0.12:2380"}},

		// 8. A failed member is replaced.
		{name: "SIGKILL m2", run: rcKill(2), show: "kill -9 m2"},
		{name: "member remove the failed m2", run: rcCtlRetry(1, msgUnhealthy, "member", "remove", "${id2}"),
			show: "etcdctl [m1] member remove ${id2} (again while: " + msgUnhealthy + ")"},
		{name: "member add m5", run: rcAddMember(5, 1, false),
			show: "etcdctl [m1] member add m5 --peer-urls=<peer5>"},
		{name: "member list with m5 unstarted", on: 1, args: []string{"member", "list"}},
		// 9. Strict reconfiguration checks while a voter is unstarted
		// (2 started of 3 voters): they come before the checks of the
		// membership itself.
		{name: "another voter while m5 is unstarted", on: 1, args: []string{"member", "add", "m9", "--peer-urls=http://10.0.0.9:2380"}},
		{name: "a voter with a peer URL in use while m5 is unstarted", run: rcCtlURL(1, "<peer1>", "member", "add", "m9", "--peer-urls=${url}"),
			show: "etcdctl [m1] member add m9 --peer-urls=<peer1>"},
		{name: "a learner while m5 is unstarted", on: 1, args: []string{"member", "add", "m9", "--learner", "--peer-urls=http://10.0.0.9:2380"}},
		{name: "a learner with a peer URL in use while m5 is unstarted", run: rcCtlURL(1, "<peer4>", "member", "add", "m9", "--learner", "--peer-urls=${url}"),
			show: "etcdctl [m1] member add m9 --learner --peer-urls=<peer4>"},
		{name: "remove a started voter while m5 is unstarted", on: 1, args: []string{"member", "remove", "${id4}"}},
		{name: "start m5 (existing, new data dir)", run: rcStartJoined(5), show: "start m5 with the printed ETCD_* values on an empty data dir"},
		{name: "m5 catches up", run: rcCatchUp(5, 4, "more", 5), show: "5 puts through m4; wait until m5 serves revision <last> (serializable)"},
		{name: "linearizable get on m5", on: 5, args: []string{"get", "k", "--prefix"}},
		{name: "serializable get on m5", on: 5, args: []string{"get", "walk/0019", "--consistency=s", "-w", "json"}},
		{name: "put on m5", on: 5, args: []string{"put", "k5", "v5"}},
		{name: "member list (table) at the end", on: 5, args: []string{"member", "list", "-w", "table"}},
		{name: "endpoint health --cluster at the end", on: 1, args: []string{"endpoint", "health", "--cluster"}, rows: true},
		{name: "endpoint status --cluster at the end", on: 1, args: []string{"endpoint", "status", "--cluster"}, rows: true},
	}
	runClusterDiff(t, "reconfig", reconfigFlags, steps)
	t.Logf("reconfig: both sides in %v", time.Since(start).Round(time.Millisecond))
}

// rcMask masks member n's URLs as <clientN>, <peerN>, ...
func (cs *clusterSide) rcMask(n int, s *harness.Server, peer string) {
	cs.norm.Literal(s.ClientURL, fmt.Sprintf("<client%d>", n))
	cs.norm.Literal(s.PeerURL, peer)
	cs.norm.Literal(s.MetricsURL, fmt.Sprintf("<metrics%d>", n))
	cs.norm.Literal(s.ClientAddr, fmt.Sprintf("<client-addr%d>", n))
}

// rcRun runs etcdctl on member on with args (${vars} expanded).
func (cs *clusterSide) rcRun(on int, args ...string) harness.Result {
	a := make([]string, len(args))
	for i, s := range args {
		a[i] = cs.expand(s)
	}
	return cs.ctlOn(on).Run("", a...)
}

// rcRetry runs the command until its output does not contain retryOn,
// and returns that last answer.
func (cs *clusterSide) rcRetry(t *testing.T, on int, retryOn string, args ...string) harness.Result {
	t.Helper()
	return retryWhile(t, cs.label+": "+shellJoin(args), retryOn, func() harness.Result { return cs.rcRun(on, args...) })
}

// retryWhile runs run until its output no longer contains retryOn (or
// poll.Deadline passes, an error of t) and returns the last result; what
// names the command in the log.
func retryWhile(t *testing.T, what, retryOn string, run func() harness.Result) harness.Result {
	t.Helper()
	var r harness.Result
	tries := 0
	err := linPoll(poll.Deadline, 100*time.Millisecond, fmt.Sprintf("%s to answer other than %q", what, retryOn), func() bool {
		tries++
		r = run()
		return !strings.Contains(r.Stdout+r.Stderr, retryOn)
	})
	if err != nil {
		t.Error(err)
	} else if tries > 1 {
		t.Logf("%s: answered after %d tries", what, tries)
	}
	return r
}

func rcCtlRetry(on int, retryOn string, args ...string) func(t *testing.T, cs *clusterSide) harness.Result {
	return func(t *testing.T, cs *clusterSide) harness.Result {
		return cs.rcRetry(t, on, retryOn, args...)
	}
}

// rcCtlURL runs etcdctl with ${url} set to the URL that placeholder masks
// (a member's peer URL).
func rcCtlURL(on int, placeholder string, args ...string) func(t *testing.T, cs *clusterSide) harness.Result {
	return func(t *testing.T, cs *clusterSide) harness.Result {
		var url string
		for i, m := range cs.c.Members {
			if placeholder == fmt.Sprintf("<peer%d>", i+1) {
				url = m.AdvertisePeerURL
			}
		}
		if url == "" {
			t.Fatalf("%s: no member's peer URL is %s", cs.label, placeholder)
		}
		cs.vars["url"] = url
		defer delete(cs.vars, "url")
		return cs.rcRun(on, args...)
	}
}

// rcAddMember allocates member n (its ports and data dir), adds it
// through member via with its peer URL (retrying while etcd would say
// "unhealthy cluster"), numbers its id, and sets the flags it will start
// with from the printed ETCD_* lines.
func rcAddMember(n, via int, learner bool) func(t *testing.T, cs *clusterSide) harness.Result {
	return func(t *testing.T, cs *clusterSide) harness.Result {
		name := fmt.Sprintf("m%d", n)
		if len(cs.c.Members) != n-1 {
			t.Fatalf("%s: adding %s to %d members", cs.label, name, len(cs.c.Members))
		}
		// Started with --initial-cluster-state existing (after the
		// harness's "new": the last one counts), checked below against
		// what member add prints.
		s, err := harness.NewServer(harness.ServerConfig{Bin: cs.c.Members[0].Bin(), Name: name, Dir: cs.dir,
			Flags: append(slices.Clone(reconfigFlags), "--initial-cluster-state=existing")})
		if err != nil {
			t.Fatal(err)
		}
		cs.rcMask(n, s, fmt.Sprintf("<peer%d>", n))
		args := []string{"member", "add", name, "--peer-urls=" + s.AdvertisePeerURL}
		if learner {
			args = append(args, "--learner")
		}
		r := cs.rcRetry(t, via, msgUnhealthy, args...)
		m := reRCAdded.FindStringSubmatch(r.Stdout)
		if r.Code != 0 || m == nil {
			t.Fatalf("%s: member add %s:\n%s", cs.label, name, r)
		}
		id, err := strconv.ParseUint(m[1], 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		cs.norm.AssignIDs(id)
		cs.vars[fmt.Sprintf("id%d", n)] = m[1]
		env := map[string]string{}
		for _, kv := range reRCEnv.FindAllStringSubmatch(r.Stdout, -1) {
			env[kv[1]] = kv[2]
		}
		want := map[string]string{
			"ETCD_NAME":                        name,
			"ETCD_INITIAL_ADVERTISE_PEER_URLS": s.AdvertisePeerURL,
			"ETCD_INITIAL_CLUSTER_STATE":       "existing",
		}
		for k, v := range want {
			if env[k] != v {
				t.Errorf("%s: member add printed %s=%q; the member starts with %q", cs.label, k, env[k], v)
			}
		}
		if env["ETCD_INITIAL_CLUSTER"] == "" {
			t.Fatalf("%s: member add printed no ETCD_INITIAL_CLUSTER:\n%s", cs.label, r)
		}
		harness.WithInitialCluster(s, env["ETCD_INITIAL_CLUSTER"])
		cs.c.Members = append(cs.c.Members, s)
		return r
	}
}

// rcStartJoined starts member n, added by rcAddMember, and waits until it
// serves client requests.
func rcStartJoined(n int) func(t *testing.T, cs *clusterSide) harness.Result {
	return func(t *testing.T, cs *clusterSide) harness.Result {
		m := cs.c.Members[n-1]
		if err := m.Start(); err != nil {
			t.Fatalf("%s: start %s: %v", cs.label, m.Name(), err)
		}
		return harness.Result{Stdout: fmt.Sprintf("%s ready\n", m.Name())}
	}
}

// rcCatchUp makes count puts through member via and waits until member
// n serves the last one's revision from its own state.
func rcCatchUp(n, via int, prefix string, count int) func(t *testing.T, cs *clusterSide) harness.Result {
	return func(t *testing.T, cs *clusterSide) harness.Result {
		rev := putN(t, memberClient(t, cs.c.Members[via-1]), prefix, count)
		waitRev(t, cs.c.Members[n-1], rev)
		return harness.Result{Stdout: fmt.Sprintf("%d puts, last at revision %d; m%d serves it\n", count, rev, n)}
	}
}

// rcPromoteWhenReady promotes member n through member via, again as long
// as the answer is that it is not in sync yet.
func rcPromoteWhenReady(n, via int) func(t *testing.T, cs *clusterSide) harness.Result {
	return func(t *testing.T, cs *clusterSide) harness.Result {
		return cs.rcRetry(t, via, msgNotInSync, "member", "promote", fmt.Sprintf("${id%d}", n))
	}
}

// rcCheckLeader records which member every running member names leader.
func rcCheckLeader() func(t *testing.T, cs *clusterSide) harness.Result {
	return func(t *testing.T, cs *clusterSide) harness.Result {
		return harness.Result{Stdout: clusterLeader(t, cs.c).Name() + " leads\n"}
	}
}

// rcUpdatePeerURL allocates member n's next process (same name and data
// dir, new ports) and updates n's peer URLs to its peer URL through
// member via. The process is started by rcRestartOnNew.
func rcUpdatePeerURL(n, via int, next map[*clusterSide]*harness.Server) func(t *testing.T, cs *clusterSide) harness.Result {
	return func(t *testing.T, cs *clusterSide) harness.Result {
		old := cs.c.Members[n-1]
		s, err := harness.NewServer(harness.ServerConfig{Bin: old.Bin(), Name: old.Name(), Dir: cs.dir,
			DataDir: old.DataDir, Flags: reconfigFlags})
		if err != nil {
			t.Fatal(err)
		}
		// What an operator would pass: the founders' --initial-cluster
		// with this member's new URL (ignored on an initialized data dir).
		var initial []string
		for _, m := range cs.c.Members[:3] {
			u := m.AdvertisePeerURL
			if m == old {
				u = s.AdvertisePeerURL
			}
			initial = append(initial, m.Name()+"="+u)
		}
		harness.WithInitialCluster(s, strings.Join(initial, ","))
		cs.rcMask(n, s, fmt.Sprintf("<peer%d-new>", n))
		next[cs] = s
		return cs.rcRun(via, "member", "update", fmt.Sprintf("${id%d}", n), "--peer-urls="+s.AdvertisePeerURL)
	}
}

// rcRestartOnNew stops member n and starts its next process (see
// rcUpdatePeerURL), then waits until it has applied what the leader has.
func rcRestartOnNew(n int, next map[*clusterSide]*harness.Server) func(t *testing.T, cs *clusterSide) harness.Result {
	return func(t *testing.T, cs *clusterSide) harness.Result {
		s := next[cs]
		if s == nil {
			t.Fatalf("%s: no next process for m%d", cs.label, n)
		}
		delete(next, cs)
		if err := cs.c.Members[n-1].Stop(); err != nil {
			t.Fatalf("%s: stop m%d: %v", cs.label, n, err)
		}
		cs.c.Members[n-1] = s
		if err := s.Start(); err != nil {
			t.Fatalf("%s: start m%d on its new peer URL: %v", cs.label, n, err)
		}
		lead := clusterLeader(t, cs.c)
		ctx, cancel := context.WithTimeout(context.Background(), poll.Deadline)
		defer cancel()
		resp, err := memberClient(t, lead).Get(ctx, "x")
		if err != nil {
			t.Fatalf("%s: %v", cs.label, err)
		}
		waitRev(t, s, resp.Header.Revision)
		return harness.Result{Stdout: fmt.Sprintf("m%d restarted on its new peer URL and caught up; %s leads\n", n, lead.Name())}
	}
}

// rcWaitExit waits for member n's process to exit by itself and records
// its exit status.
func rcWaitExit(n int) func(t *testing.T, cs *clusterSide) harness.Result {
	return func(t *testing.T, cs *clusterSide) harness.Result {
		m := cs.c.Members[n-1]
		code, err := m.WaitExit(poll.Deadline)
		if err != nil {
			return harness.Result{Stdout: fmt.Sprintf("m%d: %v\n", n, err), Code: 1}
		}
		return harness.Result{Stdout: fmt.Sprintf("m%d exited with status %d\n", n, code)}
	}
}

// rcKill SIGKILLs member n.
func rcKill(n int) func(t *testing.T, cs *clusterSide) harness.Result {
	return func(t *testing.T, cs *clusterSide) harness.Result {
		if err := cs.c.Members[n-1].Kill(); err != nil {
			t.Fatalf("%s: kill m%d: %v", cs.label, n, err)
		}
		return harness.Result{Stdout: fmt.Sprintf("killed m%d\n", n)}
	}
}
