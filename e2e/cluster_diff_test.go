package e2e

// The 3-member differential test: a 3-member etcd 3.7.3 (side A) and a
// 3-member $STRATA_E2E_TARGET (side B), started with the same static
// bootstrap flags, answer the same etcdctl commands; the normalized
// transcripts must be identical. Each member's URLs are masked by member
// name (<client1>, <peer2>, ...) and the member ids are numbered in
// member-name order (<id1> is m1 on both sides), so the comparison still
// checks that every row names the right member.

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/strata-db/strata/e2e/harness"
	"github.com/strata-db/strata/internal/poll"
)

// cstep is one step of a cluster scenario: an etcdctl command against
// one member (on: 1..3) or all of them (on: 0), or a custom action.
type cstep struct {
	name string
	on   int
	args []string
	// rows sorts the lines of the output: for commands that print one
	// line per member in the order of the member ids (which hash the
	// random ports), or in the order the answers arrived.
	rows bool
	// json sorts a JSON array answer by its "endpoint" (or "Endpoint")
	// field: etcdctl prints the endpoints in the order they answered.
	json bool
	// run is a custom action, recorded like a command.
	run  func(t *testing.T, cs *clusterSide) harness.Result
	show string
}

type clusterSide struct {
	*side
	c   *harness.Cluster
	ids []uint64 // member ids, in member order
}

func (cs *clusterSide) ctlOn(on int) *harness.Ctl {
	if on == 0 {
		return &harness.Ctl{Bin: cs.bins.Etcdctl, Endpoints: cs.c.ClientURLs()}
	}
	return &harness.Ctl{Bin: cs.bins.Etcdctl, Endpoints: []string{cs.c.Members[on-1].ClientURL}}
}

func startClusterSide(t *testing.T, label string, bins []string, b *harness.Bins, flags []string) *clusterSide {
	dir := filepath.Join(t.TempDir(), label)
	c, err := harness.NewClusterBins(bins, dir, flags)
	if err != nil {
		t.Fatal(err)
	}
	cs := &clusterSide{side: &side{label: label, bins: b, dir: dir, norm: harness.NewNormalizer(),
		vars: map[string]string{}, bg: map[string]*harness.Proc{}, bgCmd: map[string]string{}}, c: c}
	cs.norm.Literal(dir, "<dir>")
	return cs
}

// started masks the members' addresses and numbers their ids by name.
func (cs *clusterSide) started(t *testing.T) {
	cs.srv = cs.c.Members[0]
	for i, m := range cs.c.Members {
		n := i + 1
		cs.norm.Literal(m.ClientURL, fmt.Sprintf("<client%d>", n))
		cs.norm.Literal(m.PeerURL, fmt.Sprintf("<peer%d>", n))
		cs.norm.Literal(m.MetricsURL, fmt.Sprintf("<metrics%d>", n))
		cs.norm.Literal(m.ClientAddr, fmt.Sprintf("<client-addr%d>", n))
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: cs.c.ClientURLs(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), poll.Deadline)
	defer cancel()
	ml, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatalf("%s: member list: %v", cs.label, err)
	}
	byName := map[string]uint64{}
	for _, m := range ml.Members {
		byName[m.Name] = m.ID
	}
	var ids []uint64
	for _, m := range cs.c.Members {
		id, ok := byName[m.Name()]
		if !ok {
			t.Fatalf("%s: member %s not in the member list %v", cs.label, m.Name(), ml.Members)
		}
		ids = append(ids, id)
	}
	cs.norm.AssignIDs(append(ids, ml.Header.ClusterId)...)
	cs.ids = ids
	for i, id := range ids {
		cs.vars[fmt.Sprintf("id%d", i+1)] = fmt.Sprintf("%x", id)
	}
}

func (cs *clusterSide) exec(t *testing.T, st cstep) string {
	var r harness.Result
	show := st.show
	if st.run != nil {
		r = st.run(t, cs)
	} else {
		args := make([]string, len(st.args))
		for i, a := range st.args {
			args[i] = cs.expand(a)
		}
		r = cs.ctlOn(st.on).Run("", args...)
		where := "all"
		if st.on > 0 {
			where = fmt.Sprintf("m%d", st.on)
		}
		show = fmt.Sprintf("etcdctl [%s] %s", where, shellJoin(st.args))
	}
	// Sorted by member: the client URLs are masked first (by member
	// name), as the raw ports sort differently on each side.
	if st.rows {
		r.Stdout = sortLines(cs.maskClients(r.Stdout))
		r.Stderr = sortLines(cs.maskClients(r.Stderr))
	}
	if st.json {
		r.Stdout = sortJSONByEndpoint(t, cs.maskClients(r.Stdout))
	}
	return cs.record(step{name: st.name}, show, r, true)
}

// maskClients replaces each member's client URL by its placeholder.
func (cs *clusterSide) maskClients(s string) string {
	for i, m := range cs.c.Members {
		s = strings.ReplaceAll(s, m.ClientURL, fmt.Sprintf("<client%d>", i+1))
	}
	return s
}

func sortJSONByEndpoint(t *testing.T, s string) string {
	var rows []map[string]any
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber() // ids do not fit a float64
	if err := dec.Decode(&rows); err != nil {
		return s // recorded as it is; the diff shows it
	}
	key := func(r map[string]any) string { return fmt.Sprint(r["endpoint"], r["Endpoint"]) }
	sort.SliceStable(rows, func(i, j int) bool { return key(rows[i]) < key(rows[j]) })
	b, err := json.Marshal(rows)
	if err != nil {
		t.Fatal(err)
	}
	return string(b) + "\n"
}

// leaderOn makes member n the leader (moving leadership there if
// another member leads) and waits until every member agrees, so the
// leader columns of later steps are deterministic.
func leaderOn(n int) func(t *testing.T, cs *clusterSide) harness.Result {
	return func(t *testing.T, cs *clusterSide) harness.Result {
		want := cs.ids[n-1]
		lead := clusterLeader(t, cs.c)
		if lead != cs.c.Members[n-1] {
			cli := memberClient(t, lead)
			ctx, cancel := context.WithTimeout(context.Background(), poll.Deadline)
			_, err := cli.MoveLeader(ctx, want)
			cancel()
			if err != nil {
				t.Fatalf("%s: move leader to m%d: %v", cs.label, n, err)
			}
		}
		if lead := clusterLeader(t, cs.c); lead != cs.c.Members[n-1] {
			t.Fatalf("%s: m%d does not lead after the move (%s does)", cs.label, n, lead.Name())
		}
		return harness.Result{Stdout: fmt.Sprintf("m%d leads\n", n)}
	}
}

func sortLines(s string) string {
	if s == "" {
		return s
	}
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	sort.Strings(l)
	return strings.Join(l, "\n") + "\n"
}

// runClusterDiff starts both clusters, runs every step on A then on B,
// and reports each step whose normalized records differ.
func runClusterDiff(t *testing.T, name string, flags []string, steps []cstep) {
	b := needBins(t)
	bin := targetBin(t, b)
	runClusterDiffBins(t, name, flags, steps, []string{bin, bin, bin})
}

// runClusterDiffBins is runClusterDiff with side B's member binaries
// given one by one: a mixed cluster of etcd and Strata members.
func runClusterDiffBins(t *testing.T, name string, flags []string, steps []cstep, bBins []string) *harness.Cluster {
	b := needBins(t)
	sides := []*clusterSide{
		startClusterSide(t, "A", []string{b.Etcd, b.Etcd, b.Etcd}, b, flags),
		startClusterSide(t, "B", bBins, b, flags),
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, cs := range sides {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = cs.c.Start()
		}()
	}
	wg.Wait()
	for i, cs := range sides {
		t.Cleanup(func() {
			if err := cs.c.Stop(); err != nil {
				t.Logf("%s: stop: %v", cs.label, err)
			}
		})
		if errs[i] != nil {
			t.Fatalf("side %s: %v", cs.label, errs[i])
		}
	}
	for _, cs := range sides {
		cs.started(t)
	}
	mismatches := 0
	for _, st := range steps {
		ra := sides[0].exec(t, st)
		rb := sides[1].exec(t, st)
		if ra != rb {
			mismatches++
			t.Errorf("step %q differs (A=%s, B=%v):\n%s", st.name, b.Etcd, bBins, harness.UnifiedDiff("A", "B", ra, rb))
		}
	}
	if mismatches > 0 || testing.Verbose() {
		t.Logf("A transcript:\n%s", sides[0].out.String())
		for _, cs := range sides {
			for _, m := range cs.c.Members {
				t.Logf("%s %s log: %s", cs.label, m.Name(), m.LogPath)
			}
		}
	}
	t.Logf("%s: %d steps, %d mismatches", name, len(steps), mismatches)
	return sides[1].c
}

// waitApplied waits until every member serves revision rev locally, so a
// serializable read on any of them is deterministic.
func waitAppliedAll(t *testing.T, cs *clusterSide, rev int64) {
	for _, m := range cs.c.Members {
		waitRev(t, m, rev)
	}
}

func TestClusterDiff(t *testing.T) {
	runClusterDiff(t, "cluster", clusterDiffFlags, clusterDiffSteps())
}

// TestClusterDiffMixed runs the same scenario with side B a mixed
// cluster: 2 etcd members and 1 Strata, and 1 etcd and 2
// Strata. The scenario moves the leadership to m1, then to m2, kills the
// leader, and has a member catch up by snapshot, so the leader is of
// each kind in each mix, and snapshots go between kinds.
func TestClusterDiffMixed(t *testing.T) {
	b := needBins(t)
	strata := strataTarget(t)
	for _, mix := range []struct {
		name string
		bins []string
		// snapshot is the log line of the Strata member that shows m3
		// caught up by a snapshot sent across kinds.
		member   int
		snapshot string
	}{
		{"m1-strata,m2-etcd,m3-etcd", []string{strata, b.Etcd, b.Etcd}, 1, "sending a snapshot in etcd's format to an etcd follower"},
		{"m1-etcd,m2-strata,m3-strata", []string{b.Etcd, strata, strata}, 3, "converted a snapshot in etcd's format into the page store"},
	} {
		t.Run(mix.name, func(t *testing.T) {
			c := runClusterDiffBins(t, "cluster "+mix.name, clusterDiffFlags, clusterDiffSteps(), mix.bins)
			if m := c.Members[mix.member-1]; !harnessLogHas(m, mix.snapshot) {
				t.Errorf("m%d never logged %q: no snapshot crossed kinds", mix.member, mix.snapshot)
			}
			t.Logf("MIXED: 3-member differential, %s: m1 and m2 each led (one of each kind), m3 caught up by a snapshot across kinds, 0 mismatches with 3 etcd members", mix.name)
		})
	}
}

var clusterDiffFlags = []string{"--heartbeat-interval=50", "--election-timeout=500",
	"--snapshot-count=100", "--snapshot-catchup-entries=20"}

func clusterDiffSteps() []cstep {
	return []cstep{
		{name: "member list", on: 0, args: []string{"member", "list"}},
		{name: "member list (table)", on: 0, args: []string{"member", "list", "-w", "table"}},
		{name: "member list (json)", on: 1, args: []string{"member", "list", "-w", "json"}},
		{name: "put on m1", on: 1, args: []string{"put", "k1", "v1"}},
		{name: "linearizable get on m2", on: 2, args: []string{"get", "k1", "-w", "json"}},
		{name: "linearizable get on m3", on: 3, args: []string{"get", "k1"}},
		{name: "all members applied the put", run: func(t *testing.T, cs *clusterSide) harness.Result {
			waitAppliedAll(t, cs, 2)
			return harness.Result{Stdout: "ok\n"}
		}, show: "wait until every member applied revision 2"},
		{name: "serializable get on m2", on: 2, args: []string{"get", "k1", "--consistency=s"}},
		{name: "serializable get on m3", on: 3, args: []string{"get", "k1", "--consistency=s", "-w", "json"}},
		{name: "put on m3", on: 3, args: []string{"put", "k2", "v2"}},
		{name: "get prefix on m1", on: 1, args: []string{"get", "k", "--prefix"}},
		{name: "endpoint health --cluster", on: 0, args: []string{"endpoint", "health", "--cluster"}, rows: true},
		{name: "endpoint health --cluster (json)", on: 0, args: []string{"endpoint", "health", "--cluster", "-w", "json"}, json: true},
		{name: "m1 leads", run: leaderOn(1), show: "make m1 the leader"},
		{name: "move-leader to m2 through m1", on: 1, args: []string{"move-leader", "${id2}"}},
		{name: "move-leader on a follower", on: 3, args: []string{"move-leader", "${id1}"}},
		{name: "m2 leads", run: leaderOn(2), show: "check m2 leads"},
		{name: "endpoint status --cluster", on: 0, args: []string{"endpoint", "status", "--cluster"}, rows: true},
		{name: "endpoint status --cluster (table)", on: 0, args: []string{"endpoint", "status", "--cluster", "-w", "table"}, rows: true},
		{name: "endpoint status --cluster (json)", on: 0, args: []string{"endpoint", "status", "--cluster", "-w", "json"}, json: true},
		{name: "all members applied the puts", run: func(t *testing.T, cs *clusterSide) harness.Result {
			waitAppliedAll(t, cs, 3)
			return harness.Result{Stdout: "ok\n"}
		}, show: "wait until every member applied revision 3"},
		{name: "endpoint hashkv --cluster", on: 0, args: []string{"endpoint", "hashkv", "--cluster"}, rows: true},
		{name: "endpoint hashkv --cluster (table)", on: 0, args: []string{"endpoint", "hashkv", "--cluster", "-w", "table"}, rows: true},
		{name: "a watch on a follower sees a put on the leader", run: watchFollower(3, 2, "w1"), show: "etcdctl [m3] watch w1 --rev=<next> & etcdctl [m2] put w1 from-m2"},
		{name: "a lease granted on a follower expires on the leader's clock", run: leaseExpiresOnLeader(3, 1),
			show: "etcdctl [m3] lease grant 2; put leased --lease; [m1] timetolive --keys; wait; [m1] get leased; [m3] timetolive"},
		{name: "SIGKILL the leader", run: killLeader(2), show: "kill -9 m2"},
		{name: "put on a survivor", on: 3, args: []string{"put", "after-kill", "1"}},
		{name: "linearizable get on the other survivor", on: 1, args: []string{"get", "after-kill"}},
		{name: "the killed member restarts and catches up", run: restartCaughtUp(2), show: "start m2; wait for it to catch up"},
		{name: "serializable get on the restarted member", on: 2, args: []string{"get", "after-kill", "--consistency=s"}},
		{name: "a member stopped past --snapshot-count catches up", run: writeWhileStopped(3, 1, 250),
			show: "stop m3; 250 puts through m1; start m3; wait for it to catch up"},
		{name: "count on the caught-up member", on: 3, args: []string{"get", "bulk/", "--prefix", "--limit=2", "--consistency=s", "-w", "json"}},
		// RangeStream on followers: linearizable (the read index comes
		// from the leader) and serializable.
		{name: "get --stream on a follower", on: 2, args: []string{"get", "bulk/", "--prefix", "--stream", "-w", "json", "--keys-only"}},
		{name: "get --stream --limit on a follower", on: 3, args: []string{"get", "bulk/", "--prefix", "--stream", "--limit=120", "--consistency=s", "-w", "json"}},
		{name: "get --stream --count-only on a follower", on: 2, args: []string{"get", "bulk/", "--prefix", "--stream", "--count-only", "-w", "fields"}},
		{name: "m1 leads again", run: leaderOn(1), show: "make m1 the leader"},
		{name: "endpoint status --cluster at the end", on: 0, args: []string{"endpoint", "status", "--cluster"}, rows: true},
		{name: "endpoint hashkv --cluster at the end", on: 0, args: []string{"endpoint", "hashkv", "--cluster"}, rows: true},
	}
}

// stopMembers stops members ns and waits until the running ones know no
// leader (a lone member steps down once it loses its quorum).
func stopMembers(ns ...int) func(t *testing.T, cs *clusterSide) harness.Result {
	return func(t *testing.T, cs *clusterSide) harness.Result {
		var names []string
		for _, n := range ns {
			m := cs.c.Members[n-1]
			if err := m.Stop(); err != nil {
				t.Fatalf("%s: stop %s: %v", cs.label, m.Name(), err)
			}
			names = append(names, m.Name())
		}
		for _, m := range cs.c.Members {
			if !m.Running() {
				continue
			}
			cli := memberClient(t, m)
			poll.Until(t, m.Name()+" to know no leader", func() bool {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				st, err := cli.Status(ctx, m.ClientURL)
				return err == nil && st.Leader == 0
			})
		}
		return harness.Result{Stdout: fmt.Sprintf("stopped %s; no leader\n", strings.Join(names, ", "))}
	}
}

// startMembers starts members ns again and waits for a leader.
func startMembers(ns ...int) func(t *testing.T, cs *clusterSide) harness.Result {
	return func(t *testing.T, cs *clusterSide) harness.Result {
		var wg sync.WaitGroup
		errs := make([]error, len(ns))
		for i, n := range ns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = cs.c.Members[n-1].Start()
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatalf("%s: %v", cs.label, err)
			}
		}
		clusterLeader(t, cs.c)
		return harness.Result{Stdout: "started; a leader\n"}
	}
}

// TestClusterDiffQuorumLoss: with two of three members down, the survivor
// refuses writes and linearizable reads as etcd does, still serves
// serializable reads, reports itself unhealthy, and all of it recovers
// when the quorum returns.
func TestClusterDiffQuorumLoss(t *testing.T) {
	steps := []cstep{
		{name: "put", on: 1, args: []string{"put", "k", "v1"}},
		{name: "all members applied the put", run: func(t *testing.T, cs *clusterSide) harness.Result {
			waitAppliedAll(t, cs, 2)
			return harness.Result{Stdout: "ok\n"}
		}, show: "wait until every member applied revision 2"},
		{name: "stop m2 and m3", run: stopMembers(2, 3), show: "stop m2, m3"},
		{name: "put without quorum", on: 1, args: []string{"put", "k", "v2"}},
		{name: "linearizable get without quorum", on: 1, args: []string{"get", "k"}},
		{name: "serializable get without quorum", on: 1, args: []string{"get", "k", "--consistency=s"}},
		{name: "endpoint health without quorum", on: 1, args: []string{"endpoint", "health"}},
		{name: "endpoint status without quorum", on: 1, args: []string{"endpoint", "status"}},
		{name: "/health without quorum", run: httpGet(1, "/health"), show: "curl <client1>/health"},
		{name: "/health?serializable=true without quorum", run: httpGet(1, "/health?serializable=true"), show: "curl <client1>/health?serializable=true"},
		{name: "/readyz?verbose without quorum", run: httpGet(1, "/readyz?verbose"), show: "curl <client1>/readyz?verbose"},
		{name: "/livez?verbose without quorum", run: httpGet(1, "/livez?verbose"), show: "curl <client1>/livez?verbose"},
		{name: "start m2 and m3", run: startMembers(2, 3), show: "start m2, m3"},
		{name: "put after recovery", on: 1, args: []string{"put", "k", "v3"}},
		{name: "get after recovery", on: 1, args: []string{"get", "k"}},
		{name: "endpoint health after recovery", on: 0, args: []string{"endpoint", "health", "--cluster"}, rows: true},
		{name: "/health after recovery", run: httpGet(1, "/health"), show: "curl <client1>/health"},
	}
	runClusterDiff(t, "quorum-loss", []string{"--heartbeat-interval=50", "--election-timeout=500"}, steps)
}

// watchFollower starts a watch on member on (from the next revision, so
// the result does not depend on when the watch registers), puts key on
// member from, and records what the watch printed.
func watchFollower(on, from int, key string) func(t *testing.T, cs *clusterSide) harness.Result {
	return func(t *testing.T, cs *clusterSide) harness.Result {
		cli := memberClient(t, cs.c.Members[on-1])
		ctx, cancel := context.WithTimeout(context.Background(), poll.Deadline)
		defer cancel()
		resp, err := cli.Get(ctx, key)
		if err != nil {
			t.Fatalf("%s: %v", cs.label, err)
		}
		p, err := cs.ctlOn(on).Start("", "watch", key, fmt.Sprintf("--rev=%d", resp.Header.Revision+1))
		if err != nil {
			t.Fatalf("%s: %v", cs.label, err)
		}
		put := cs.ctlOn(from).Run("", "put", key, "from-m"+fmt.Sprint(from))
		if put.Code != 0 {
			t.Fatalf("%s: put: %s", cs.label, put)
		}
		if !p.WaitOutput(func(out string) bool { return strings.Contains(out, "from-m") }, poll.Deadline) {
			t.Errorf("%s: the watch on m%d saw nothing", cs.label, on)
		}
		r := p.Stop(3 * time.Second)
		r.Code, r.Signal = 0, ""
		return r
	}
}

// leaseExpiresOnLeader grants a 2 s lease on member on (a follower),
// attaches a key to it, asks another follower for its time to live, and
// waits for the leader's clock to expire it.
func leaseExpiresOnLeader(on, other int) func(t *testing.T, cs *clusterSide) harness.Result {
	return func(t *testing.T, cs *clusterSide) harness.Result {
		var out harness.Result
		add := func(r harness.Result) {
			out.Stdout += r.Stdout
			out.Stderr += r.Stderr
			if r.Code != 0 {
				out.Code = r.Code
			}
		}
		g := cs.ctlOn(on).Run("", "lease", "grant", "2")
		add(g)
		m := regexp.MustCompile(`lease ([0-9a-f]+) granted`).FindStringSubmatch(g.Stdout)
		if m == nil {
			t.Errorf("%s: lease grant: %s", cs.label, g)
			return out
		}
		add(cs.ctlOn(on).Run("", "put", "leased", "v", "--lease="+m[1]))
		add(cs.ctlOn(other).Run("", "lease", "timetolive", m[1], "--keys"))
		poll.Until(t, "the leased key to expire", func() bool {
			r := cs.ctlOn(other).Run("", "get", "leased", "--print-value-only")
			return r.Code == 0 && r.Stdout == ""
		})
		add(cs.ctlOn(other).Run("", "get", "leased"))
		add(cs.ctlOn(on).Run("", "lease", "timetolive", m[1]))
		return out
	}
}

// killLeader SIGKILLs member n, the leader, and waits until the others
// agree on a new one.
func killLeader(n int) func(t *testing.T, cs *clusterSide) harness.Result {
	return func(t *testing.T, cs *clusterSide) harness.Result {
		m := cs.c.Members[n-1]
		if lead := clusterLeader(t, cs.c); lead != m {
			t.Fatalf("%s: m%d is not the leader (%s is)", cs.label, n, lead.Name())
		}
		if err := m.Kill(); err != nil {
			t.Fatal(err)
		}
		if lead := clusterLeader(t, cs.c); lead == m {
			t.Fatalf("%s: the killed member still leads", cs.label)
		}
		return harness.Result{Stdout: fmt.Sprintf("killed m%d; a new leader\n", n)}
	}
}

// restartCaughtUp starts member n again and waits until it has applied
// what the leader has.
func restartCaughtUp(n int) func(t *testing.T, cs *clusterSide) harness.Result {
	return func(t *testing.T, cs *clusterSide) harness.Result {
		m := cs.c.Members[n-1]
		if err := m.Start(); err != nil {
			t.Fatalf("%s: %v", cs.label, err)
		}
		lead := clusterLeader(t, cs.c)
		ctx, cancel := context.WithTimeout(context.Background(), poll.Deadline)
		defer cancel()
		resp, err := memberClient(t, lead).Get(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		waitRev(t, m, resp.Header.Revision)
		return harness.Result{Stdout: fmt.Sprintf("m%d restarted and caught up\n", n)}
	}
}

// writeWhileStopped stops member n, writes count keys through member via,
// so the leader's log moves past --snapshot-count, and restarts n, which
// must catch up (by snapshot).
func writeWhileStopped(n, via, count int) func(t *testing.T, cs *clusterSide) harness.Result {
	return func(t *testing.T, cs *clusterSide) harness.Result {
		m := cs.c.Members[n-1]
		if err := m.Stop(); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: writing while m%d is stopped", cs.label, n)
		rev := putN(t, memberClient(t, cs.c.Members[via-1]), "bulk", count)
		if err := m.Start(); err != nil {
			t.Fatalf("%s: %v", cs.label, err)
		}
		waitRev(t, m, rev)
		return harness.Result{Stdout: fmt.Sprintf("m%d stopped, %d puts through m%d, m%d restarted and caught up\n", n, count, via, n)}
	}
}

// httpGet fetches path from member n's client URL.
func httpGet(n int, path string) func(t *testing.T, cs *clusterSide) harness.Result {
	return func(t *testing.T, cs *clusterSide) harness.Result {
		r, err := harness.HTTPRequest{URL: cs.c.Members[n-1].ClientURL + path}.Do()
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
}
