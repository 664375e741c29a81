package e2e

// Mixed clusters (issue 24, first part): a member of one kind joins a
// running 1-member cluster of the other as an ordinary member. The
// leader has compacted its log, so the learner catches up by snapshot,
// in etcd's format (bbolt) both ways: an etcd leader sends its database,
// which a Strata learner converts into its page store; a Strata leader
// writes its state as etcd's database for an etcd learner. The learner
// follows the log, is promoted, and both members then give the same
// HashKV at the same revision, also after the learner restarts.

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

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
	lead, err := harness.NewServer(harness.ServerConfig{Bin: leaderBin, Name: leaderName, Dir: dir,
		Flags: []string{"--snapshot-count=10", "--snapshot-catchup-entries=5"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := lead.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lead.Stop() })
	lcli := memberClient(t, lead)
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

	join, err := harness.NewServer(harness.ServerConfig{Bin: joinerBin, Name: joinerName, Dir: dir, InitialCluster: "pending",
		Flags: []string{"--initial-cluster-state=existing"}})
	if err != nil {
		t.Fatal(err)
	}
	added, err := lcli.MemberAddAsLearner(ctx, []string{join.AdvertisePeerURL})
	if err != nil {
		t.Fatal(err)
	}
	harness.WithInitialCluster(join, leaderName+"="+lead.AdvertisePeerURL+","+joinerName+"="+join.AdvertisePeerURL)
	t.Cleanup(func() {
		join.Stop()
		if t.Failed() {
			t.Logf("log of %s:\n%s", joinerName, join.LogTail(40))
			t.Logf("log of %s:\n%s", leaderName, lead.LogTail(40))
		}
	})
	if err := join.Start(); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the learner to install the leader's snapshot", func() bool {
		return harnessLogHas(join, joinerLog) && (leaderLog == "" || harnessLogHas(lead, leaderLog))
	})
	poll.UntilNil(t, "member promote of the learner", func() error {
		pctx, pcancel := context.WithTimeout(context.Background(), time.Second)
		defer pcancel()
		_, err := lcli.MemberPromote(pctx, added.Member.ID)
		return err
	})

	// Writes through the joined member once it has applied its own
	// promotion; both agree, key by key and by HashKV, at the same
	// revision.
	jcli := memberClient(t, join)
	poll.UntilNil(t, "the joined member to apply its promotion", func() error {
		lctx, lcancel := context.WithTimeout(context.Background(), time.Second)
		defer lcancel()
		st, err := jcli.Status(lctx, join.ClientURL)
		if err != nil {
			return err
		}
		if st.IsLearner {
			return fmt.Errorf("still a learner")
		}
		return nil
	})
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
