package e2e

// Mixed clusters: a member of one kind joins a
// running 1-member cluster of the other as an ordinary member. The
// leader has compacted its log, so the learner catches up by snapshot,
// in etcd's format (bbolt) both ways: an etcd leader sends its database,
// which a Strata learner converts into its page store; a Strata leader
// writes its state as etcd's database for an etcd learner. The learner
// follows the log, is promoted, and both members then give the same
// HashKV at the same revision, also after the learner restarts.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/strata-db/strata/e2e/harness"
	"github.com/strata-db/strata/internal/poll"
)

func TestMixedJoin(t *testing.T) {
	b := needBins(t)
	strata := strataTarget(t)
	t.Run("strata-joins-etcd", func(t *testing.T) {
		mixedJoin(t, b.Etcd, strata, "e1", "s1", "converted a snapshot in etcd's format into the page store", "")
	})
	t.Run("etcd-joins-strata", func(t *testing.T) {
		mixedJoin(t, strata, b.Etcd, "s1", "e1", "applied snapshot", "sending a snapshot in etcd's format to an etcd follower")
	})
}

// mixedJoin starts a 1-member cluster of leaderBin, writes past its
// snapshot count, adds a learner of joinerBin, and checks that it joins
// by snapshot (joinerLog in its log, leaderLog in the leader's), is
// promoted and agrees with the leader.
func mixedJoin(t *testing.T, leaderBin, joinerBin, leaderName, joinerName, joinerLog, leaderLog string) {
	dir := t.TempDir()
	lead, lcli := startMixedLead(t, leaderBin, leaderName, dir, []string{"--snapshot-count=10", "--snapshot-catchup-entries=5"})
	putN(t, lcli, "mixed/a", 60)
	ctx, cancel := context.WithTimeout(context.Background(), poll.Deadline)
	defer cancel()
	lease, err := lcli.Grant(ctx, 300)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lcli.Put(ctx, "mixed/leased", "x", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	join, id := joinMixed(t, lead, lcli, joinerBin, joinerName, dir, nil, true)
	poll.Until(t, "the learner to install the leader's snapshot", func() bool {
		return harnessLogHas(join, joinerLog) && (leaderLog == "" || harnessLogHas(lead, leaderLog))
	})
	// Writes through the joined member once it has applied its own
	// promotion; both agree, key by key and by HashKV, at the same
	// revision.
	promoteMixed(t, lcli, join, id)
	jcli := memberClient(t, join)
	rev := putN(t, jcli, "mixed/b", 20)
	waitRev(t, lead, rev)
	waitRev(t, join, rev)
	hash := func(m *harness.Server, cli *clientv3.Client) uint32 {
		hctx, hcancel := context.WithTimeout(context.Background(), poll.Deadline)
		defer hcancel()
		r, err := cli.HashKV(hctx, m.ClientURL, rev)
		if err != nil {
			t.Fatalf("HashKV on %s: %v", m.Name(), err)
		}
		return r.Hash
	}
	hl, hj := hash(lead, lcli), hash(join, jcli)
	if hl != hj {
		t.Fatalf("HashKV at revision %d: %s %08x, %s %08x", rev, leaderName, hl, joinerName, hj)
	}
	for _, cli := range []*clientv3.Client{lcli, jcli} {
		r, err := cli.Get(ctx, "mixed/", clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithSerializable())
		if err != nil || r.Count != 81 {
			t.Fatalf("keys under mixed/: %v, %v (want 81)", r, err)
		}
	}
	ttl, err := jcli.TimeToLive(ctx, lease.ID, clientv3.WithAttachedKeys())
	if err != nil || ttl.TTL <= 0 || len(ttl.Keys) != 1 || string(ttl.Keys[0]) != "mixed/leased" {
		t.Fatalf("the leader's lease on the joined member: %+v, %v", ttl, err)
	}
	ml, err := jcli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range ml.Members {
		names = append(names, fmt.Sprintf("%s(learner=%v)", m.Name, m.IsLearner))
	}
	sort.Strings(names)
	want := []string{leaderName + "(learner=false)", joinerName + "(learner=false)"}
	sort.Strings(want)
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Fatalf("members: %v, want %v", names, want)
	}

	// The installed state survives a restart of the joined member.
	if err := join.Restart(); err != nil {
		t.Fatal(err)
	}
	rev = putN(t, lcli, "mixed/c", 5)
	waitRev(t, join, rev)
	if hl, hj := hash(lead, lcli), hash(join, memberClient(t, join)); hl != hj {
		t.Fatalf("HashKV at revision %d after the restart: %s %08x, %s %08x", rev, leaderName, hl, joinerName, hj)
	}
	t.Logf("MIXED: %s (%s) joined the 1-member cluster of %s (%s) by a snapshot in etcd's format, was promoted, and matched its HashKV at revision %d after writes through either member and a restart",
		joinerName, filepath.Base(joinerBin), leaderName, filepath.Base(leaderBin), rev)
}

// TestMixedDivergenceCaught proves that the oracle can fail: a test build
// of Strata (-tags strata_diverge) gives puts under strata-diverge/ a
// wrong version. Joined to an etcd leader that runs etcd's periodic
// corruption check, one such put makes etcd raise the CORRUPT alarm for
// that member.
func TestMixedDivergenceCaught(t *testing.T) {
	b := needBins(t)
	dir := t.TempDir()
	diverge := filepath.Join(dir, "strata-diverge")
	build := exec.Command("go", "build", "-tags", "strata_diverge", "-o", diverge, "./cmd/strata")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -tags strata_diverge: %v\n%s", err, out)
	}
	const period = 2 * time.Second
	lead, lcli := startMixedLead(t, b.Etcd, "e1", dir, []string{"--corrupt-check-time=" + period.String()})
	putN(t, lcli, "plain", 10)
	join, id := joinMixed(t, lead, lcli, diverge, "s1", dir, nil, true)
	promoteMixed(t, lcli, join, id)
	ctx, cancel := context.WithTimeout(context.Background(), poll.Deadline)
	defer cancel()
	rev := putN(t, lcli, "plain2", 10)
	waitRev(t, join, rev)

	// The control: while the Strata member applies as etcd does, two
	// whole checks pass without a mismatch or an alarm.
	checks := func() int { return logCount(lead, "finished peer corruption check") }
	from := checks()
	poll.Until(t, "two of etcd's periodic checks with the Strata member", func() bool { return checks() >= from+2 })
	if harnessLogHas(lead, "same compact revision then hashes must match") {
		t.Fatal("etcd found a hash mismatch before any put was applied differently")
	}
	if r, err := lcli.AlarmList(ctx); err != nil || len(r.Alarms) != 0 {
		t.Fatalf("alarms before the divergence: %v, %v", r, err)
	}

	// One put applied differently.
	if _, err := lcli.Put(ctx, "strata-diverge/k", "v"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var alarms []string
	poll.UntilNil(t, "etcd's corruption check to raise CORRUPT", func() error {
		actx, acancel := context.WithTimeout(context.Background(), time.Second)
		defer acancel()
		r, err := lcli.AlarmList(actx)
		if err != nil {
			return err
		}
		alarms = alarms[:0]
		for _, a := range r.Alarms {
			alarms = append(alarms, fmt.Sprintf("%x:%s", a.MemberID, a.Alarm))
		}
		if len(alarms) == 0 {
			return fmt.Errorf("no alarm")
		}
		return nil
	})
	took := time.Since(start)
	if want := fmt.Sprintf("%x:CORRUPT", id); strings.Join(alarms, " ") != want {
		t.Fatalf("alarms %v, want only %s (the diverging Strata member)", alarms, want)
	}
	if !harnessLogHas(lead, "same compact revision then hashes must match") {
		t.Errorf("etcd did not log the hash mismatch")
	}
	t.Logf("MIXED: one put applied with a wrong version by a test build of Strata: etcd's periodic check (every %v) raised CORRUPT for that member %.1fs after the put", period, took.Seconds())
}

// logCount is how many lines of m's log contain text.
func logCount(m *harness.Server, text string) int {
	b, err := os.ReadFile(m.LogPath)
	if err != nil {
		return 0
	}
	return strings.Count(string(b), text)
}

// TestMixedAuthLeaseExpiry: with auth on, a lease with keys expires
// under a Strata leader. The leader revokes it as root, as etcd's does,
// so the etcd follower's apply-time check lets the revoke through and
// deletes the keys too: the two keep the same HashKV. (A revoke proposed
// with no user would be refused by etcd alone, and the key spaces would
// part.) Then an etcd leader expires one, and the Strata follower agrees.
func TestMixedAuthLeaseExpiry(t *testing.T) {
	b := needBins(t)
	strata := strataTarget(t)
	dir := t.TempDir()
	s1, scli := startMixedLead(t, strata, "s1", dir, clusterFlags)
	e1, _ := joinMixed(t, s1, scli, b.Etcd, "e1", dir, clusterFlags, false)
	ctx, cancel := context.WithTimeout(context.Background(), 2*poll.Deadline)
	defer cancel()
	// Auth on: root, and a user whose lease the leader will expire.
	for _, step := range []func() error{
		func() error { _, err := scli.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := scli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := scli.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	root := func(m *harness.Server) *clientv3.Client {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.ClientURL}, DialTimeout: 5 * time.Second,
			Logger: zap.NewNop(), Username: "root", Password: "rootpw"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		return cli
	}
	rs, re := root(s1), root(e1)
	expire := func(leader, follower *harness.Server, lcli, fcli *clientv3.Client, key string) {
		t.Helper()
		leadOn(t, ctx, leader, lcli, fcli)
		l, err := lcli.Grant(ctx, 2)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lcli.Put(ctx, key, "v", clientv3.WithLease(l.ID)); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			m   *harness.Server
			cli *clientv3.Client
		}{{leader, lcli}, {follower, fcli}} {
			poll.UntilNil(t, "the expired lease's key gone on "+c.m.Name(), func() error {
				r, err := c.cli.Get(ctx, key, clientv3.WithSerializable())
				if err != nil {
					return err
				}
				if len(r.Kvs) != 0 {
					return fmt.Errorf("%s still there", key)
				}
				return nil
			})
		}
		r, err := lcli.Get(ctx, "probe")
		if err != nil {
			t.Fatal(err)
		}
		poll.UntilNil(t, follower.Name()+" to apply the leader's revision", func() error {
			fr, err := fcli.Get(ctx, "probe", clientv3.WithSerializable())
			if err != nil {
				return err
			}
			if fr.Header.Revision < r.Header.Revision {
				return fmt.Errorf("at %d of %d", fr.Header.Revision, r.Header.Revision)
			}
			return nil
		})
		hl, err := lcli.HashKV(ctx, leader.ClientURL, r.Header.Revision)
		if err != nil {
			t.Fatal(err)
		}
		hf, err := fcli.HashKV(ctx, follower.ClientURL, r.Header.Revision)
		if err != nil {
			t.Fatal(err)
		}
		if hl.Hash != hf.Hash {
			t.Fatalf("after %s expired a lease with auth on: HashKV %08x on %s, %08x on %s", leader.Name(), hl.Hash, leader.Name(), hf.Hash, follower.Name())
		}
	}
	expire(s1, e1, rs, re, "leased-s")
	expire(e1, s1, re, rs, "leased-e")
	t.Logf("MIXED: with auth on, leases with keys expired under a Strata leader and under an etcd leader; both members deleted the keys and kept equal HashKV")
}

// TestMixedClusterVersionAndDowngrade: an etcd member that joins a
// Strata cluster through the log (no snapshot) learns the cluster
// version from the Strata leader's ClusterVersionSet, as from an etcd
// leader's; and a downgrade enabled through a Strata member goes through
// raft, so the etcd member reports it too (its /downgrade/enabled, and
// Status), and a cancel through the etcd member clears it on both.
func TestMixedClusterVersionAndDowngrade(t *testing.T) {
	b := needBins(t)
	strata := strataTarget(t)
	dir := t.TempDir()
	s1, scli := startMixedLead(t, strata, "s1", dir, clusterFlags)
	putN(t, scli, "cv", 5)
	e1, _ := joinMixed(t, s1, scli, b.Etcd, "e1", dir, clusterFlags, false)
	ctx, cancel := context.WithTimeout(context.Background(), 2*poll.Deadline)
	defer cancel()
	if harnessLogHas(e1, "applied snapshot") {
		t.Fatal("e1 joined by snapshot; this test needs it to learn everything from the log")
	}
	version := func(m *harness.Server) (string, error) {
		resp, err := http.Get(m.ClientURL + "/version")
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		var v struct{ Etcdcluster string }
		err = json.NewDecoder(resp.Body).Decode(&v)
		return v.Etcdcluster, err
	}
	for _, m := range []*harness.Server{s1, e1} {
		poll.UntilNil(t, m.Name()+" to report cluster version 3.7.0", func() error {
			v, err := version(m)
			if err != nil {
				return err
			}
			if v != "3.7.0" {
				return fmt.Errorf("etcdcluster %q", v)
			}
			return nil
		})
	}
	ecli := memberClient(t, e1)
	enabled := func(m *harness.Server, cli *clientv3.Client, want bool) {
		t.Helper()
		poll.UntilNil(t, fmt.Sprintf("%s to report the downgrade enabled=%v", m.Name(), want), func() error {
			resp, err := http.Get(m.PeerURL + "/downgrade/enabled")
			if err != nil {
				return err
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			st, err := cli.Status(ctx, m.ClientURL)
			if err != nil {
				return err
			}
			got := st.DowngradeInfo != nil && st.DowngradeInfo.Enabled
			if string(body) != strconv.FormatBool(want) || got != want {
				return fmt.Errorf("/downgrade/enabled %q, Status %v", body, st.DowngradeInfo)
			}
			return nil
		})
	}
	if _, err := scli.Downgrade(ctx, clientv3.DowngradeEnable, "3.6"); err != nil {
		t.Fatalf("downgrade enable through s1: %v", err)
	}
	enabled(s1, scli, true)
	enabled(e1, ecli, true)
	if _, err := ecli.Downgrade(ctx, clientv3.DowngradeCancel, ""); err != nil {
		t.Fatalf("downgrade cancel through e1: %v", err)
	}
	enabled(s1, scli, false)
	enabled(e1, ecli, false)
	t.Logf("MIXED: an etcd member that joined a Strata cluster through the log reports cluster version 3.7.0; a downgrade enabled through Strata and cancelled through etcd shows on both")
}

// TestMixedCompactionHashCheck: etcd's compaction hash check
// (--feature-gates=CompactHashCheck=true) over a mixed cluster of one
// etcd and two Strata members: the hashes every member stores as its
// compaction passes are the same, so the leader's check succeeds on the
// whole cluster, with an etcd leader and then with a Strata leader, and
// no alarm is raised. Then etcd's initial check (InitialCorruptCheck)
// passes on a restarted member of each kind.
func TestMixedCompactionHashCheck(t *testing.T) {
	b := needBins(t)
	strata := strataTarget(t)
	flags := append(slices.Clone(clusterFlags), "--feature-gates=CompactHashCheck=true,InitialCorruptCheck=true", "--compact-hash-check-time=1s")
	c, err := harness.NewClusterBins([]string{b.Etcd, strata, strata}, t.TempDir(), flags)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Stop()
		if t.Failed() {
			for _, m := range c.Members {
				t.Logf("log of %s:\n%s", m.Name(), m.LogTail(30))
			}
		}
	})
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*poll.Deadline)
	defer cancel()
	checkedBy := map[bool]bool{} // etcd? -> a check succeeded
	check := func(leader *harness.Server, round int) {
		t.Helper()
		poll.UntilNil(t, leader.Name()+" to lead", func() error {
			lead := clusterLeader(t, c)
			if lead == leader {
				return nil
			}
			st, err := memberClient(t, leader).Status(ctx, leader.ClientURL)
			if err != nil {
				return err
			}
			_, err = memberClient(t, lead).MoveLeader(ctx, st.Header.MemberId)
			if err == nil {
				err = fmt.Errorf("moved")
			}
			return err
		})
		cli := memberClient(t, leader)
		rev := putN(t, cli, fmt.Sprintf("chk%d", round), 100)
		for _, m := range c.Members {
			waitRev(t, m, rev)
		}
		if _, err := cli.Compact(ctx, rev-10, clientv3.WithCompactPhysical()); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("%d", rev-10)
		// The leader's check, whoever leads by then (under load an
		// election can move it): which kind checked is recorded.
		poll.Until(t, "a compaction hash check to succeed on the whole cluster at revision "+want, func() bool {
			for _, m := range c.Members {
				body, err := os.ReadFile(m.LogPath)
				if err != nil {
					continue
				}
				for _, line := range strings.Split(string(body), "\n") {
					if strings.Contains(line, "successfully checked hash on whole cluster") &&
						(strings.Contains(line, `"revision":`+want) || strings.Contains(line, " revision="+want+" ")) {
						checkedBy[m.Bin() == b.Etcd] = true
						return true
					}
				}
			}
			return false
		})
		for _, m := range c.Members {
			al, err := memberClient(t, m).AlarmList(ctx)
			if err != nil || len(al.Alarms) > 0 {
				t.Fatalf("alarms on %s: %v, %v", m.Name(), al, err)
			}
		}
	}
	check(c.Members[0], 1) // the etcd member leads
	check(c.Members[1], 2) // a Strata member leads
	if !checkedBy[true] || !checkedBy[false] {
		t.Fatalf("the compaction hash checks that succeeded were not made by a leader of each kind (etcd: %v, Strata: %v)", checkedBy[true], checkedBy[false])
	}

	// The initial check (InitialCorruptCheck): each kind, restarted on
	// its data, compares its hash with the other kind's before it serves.
	for _, m := range []*harness.Server{c.Members[0], c.Members[2]} {
		if err := m.Restart(); err != nil {
			t.Fatal(err)
		}
		if !harnessLogHas(m, "initial corruption checking passed; no corruption") {
			t.Fatalf("%s did not log a passed initial corruption check:\n%s", m.Name(), m.LogTail(20))
		}
	}
	t.Logf("MIXED: etcd's compaction hash check passed on the whole cluster (1 etcd + 2 Strata) with an etcd leader and with a Strata leader, no alarm; the initial corruption check passed on a restarted etcd member and a restarted Strata member")
}

// startMixedLead starts a one-member cluster of bin, named name.
func startMixedLead(t *testing.T, bin, name, dir string, flags []string) (*harness.Server, *clientv3.Client) {
	t.Helper()
	lead, err := harness.NewServer(harness.ServerConfig{Bin: bin, Name: name, Dir: dir, Flags: flags})
	if err != nil {
		t.Fatal(err)
	}
	if err := lead.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lead.Stop() })
	return lead, memberClient(t, lead)
}

// joinMixed adds a member of bin, named name, to lead's cluster (member
// add, as a learner if learner), starts it with --initial-cluster-state
// existing and flags, and returns it with its id. Both logs are shown if
// the test fails.
func joinMixed(t *testing.T, lead *harness.Server, lcli *clientv3.Client, bin, name, dir string, flags []string, learner bool) (*harness.Server, uint64) {
	t.Helper()
	join, err := harness.NewServer(harness.ServerConfig{Bin: bin, Name: name, Dir: dir, InitialCluster: "pending",
		Flags: append(slices.Clone(flags), "--initial-cluster-state=existing")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), poll.Deadline)
	defer cancel()
	var added *clientv3.MemberAddResponse
	if learner {
		added, err = lcli.MemberAddAsLearner(ctx, []string{join.AdvertisePeerURL})
	} else {
		added, err = lcli.MemberAdd(ctx, []string{join.AdvertisePeerURL})
	}
	if err != nil {
		t.Fatal(err)
	}
	harness.WithInitialCluster(join, lead.Name()+"="+lead.AdvertisePeerURL+","+name+"="+join.AdvertisePeerURL)
	t.Cleanup(func() {
		join.Stop()
		if t.Failed() {
			t.Logf("log of %s:\n%s", name, join.LogTail(40))
			t.Logf("log of %s:\n%s", lead.Name(), lead.LogTail(40))
		}
	})
	if err := join.Start(); err != nil {
		t.Fatal(err)
	}
	return join, added.Member.ID
}

// promoteMixed promotes learner id through lcli, retrying while the
// leader says it is not in sync, and waits until join knows it votes.
func promoteMixed(t *testing.T, lcli *clientv3.Client, join *harness.Server, id uint64) {
	t.Helper()
	poll.UntilNil(t, "member promote of "+join.Name(), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := lcli.MemberPromote(ctx, id)
		return err
	})
	jcli := memberClient(t, join)
	poll.UntilNil(t, join.Name()+" to apply its promotion", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		st, err := jcli.Status(ctx, join.ClientURL)
		if err != nil {
			return err
		}
		if st.IsLearner {
			return fmt.Errorf("still a learner")
		}
		return nil
	})
}

// TestAutoCompactionUnderAuth: with auth on, the automatic compactor
// (which proposes with no user, as etcd's does) compacts: a Compaction is
// checked when the Compact RPC is called, not at apply. An apply-time
// admin check refused it ("user name is empty"), on Strata members only.
func TestAutoCompactionUnderAuth(t *testing.T) {
	strata := strataTarget(t)
	s, cli := startMixedLead(t, strata, "s1", t.TempDir(),
		append(slices.Clone(clusterFlags), "--auto-compaction-mode=periodic", "--auto-compaction-retention=2s"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*poll.Deadline)
	defer cancel()
	for _, step := range []func() error{
		func() error { _, err := cli.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	root, err := clientv3.New(clientv3.Config{Endpoints: []string{s.ClientURL}, DialTimeout: 5 * time.Second,
		Logger: zap.NewNop(), Username: "root", Password: "rootpw"})
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	// Writes until a compaction past revision 2 has gone through (the
	// compactor samples the revision as it grows and compacts to the one
	// 2 s old).
	i := 0
	var readErr error
	poll.UntilNil(t, "an automatic compaction under auth", func() error {
		i++
		if _, err := root.Put(ctx, fmt.Sprintf("ac/%d", i%10), "v"); err != nil {
			return err
		}
		if harnessLogHas(s, "failed auto compaction") {
			t.Fatalf("the automatic compaction failed:\n%s", s.LogTail(10))
		}
		_, readErr = root.Get(ctx, "ac/0", clientv3.WithRev(2))
		if readErr == nil || !strings.Contains(readErr.Error(), "required revision has been compacted") {
			return fmt.Errorf("a read at revision 2 after %d puts: %v", i, readErr)
		}
		return nil
	})
	err = readErr
	t.Logf("MIXED: with auth on, the automatic compactor compacted (a read at revision 2: %v)", err)
}
