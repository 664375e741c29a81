package e2e

// Mixed clusters (issue 24, first part): a Strata member joins a running
// etcd 3.7.3 cluster as an ordinary member. The etcd leader has
// compacted its log, so it sends its database in etcd's format (bbolt);
// the Strata learner converts it into its page store, installs it,
// follows the log, and is promoted; both members then give the same
// HashKV at the same revision.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/strata-db/strata/e2e/harness"
	"github.com/strata-db/strata/internal/poll"
)

func TestMixedStrataJoinsEtcd(t *testing.T) {
	b := needBins(t)
	strata := strataTarget(t)
	dir := t.TempDir()
	etcd, err := harness.NewServer(harness.ServerConfig{Bin: b.Etcd, Name: "e1", Dir: dir,
		Flags: []string{"--snapshot-count=10", "--snapshot-catchup-entries=5"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := etcd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { etcd.Stop() })
	ecli := memberClient(t, etcd)
	putN(t, ecli, "mixed/a", 60)
	ctx, cancel := context.WithTimeout(context.Background(), poll.Deadline)
	defer cancel()
	lease, err := ecli.Grant(ctx, 300)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ecli.Put(ctx, "mixed/leased", "x", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}

	s, err := harness.NewServer(harness.ServerConfig{Bin: strata, Name: "s1", Dir: dir, InitialCluster: "pending",
		Flags: []string{"--initial-cluster-state=existing"}})
	if err != nil {
		t.Fatal(err)
	}
	added, err := ecli.MemberAddAsLearner(ctx, []string{s.AdvertisePeerURL})
	if err != nil {
		t.Fatal(err)
	}
	harness.WithInitialCluster(s, "e1="+etcd.AdvertisePeerURL+",s1="+s.AdvertisePeerURL)
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			t.Logf("log of s1:\n%s", s.LogTail(40))
			t.Logf("log of e1:\n%s", etcd.LogTail(40))
		}
	})
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the Strata learner to install the etcd leader's snapshot", func() bool {
		return harnessLogHas(s, "converted a snapshot in etcd's format into the page store") &&
			harnessLogHas(s, "installed a snapshot from the leader")
	})
	poll.UntilNil(t, "member promote of the Strata learner", func() error {
		pctx, pcancel := context.WithTimeout(context.Background(), time.Second)
		defer pcancel()
		_, err := ecli.MemberPromote(pctx, added.Member.ID)
		return err
	})

	// Writes through the Strata member once it has applied its own
	// promotion; both agree, key by key and by HashKV, at the same
	// revision.
	scli := memberClient(t, s)
	poll.UntilNil(t, "the Strata member to apply its promotion", func() error {
		lctx, lcancel := context.WithTimeout(context.Background(), time.Second)
		defer lcancel()
		st, err := scli.Status(lctx, s.ClientURL)
		if err != nil {
			return err
		}
		if st.IsLearner {
			return fmt.Errorf("still a learner")
		}
		return nil
	})
	rev := putN(t, scli, "mixed/b", 20)
	waitRev(t, etcd, rev)
	waitRev(t, s, rev)
	hash := func(m *harness.Server, cli *clientv3.Client) uint32 {
		hctx, hcancel := context.WithTimeout(context.Background(), poll.Deadline)
		defer hcancel()
		r, err := cli.HashKV(hctx, m.ClientURL, rev)
		if err != nil {
			t.Fatalf("HashKV on %s: %v", m.Name(), err)
		}
		return r.Hash
	}
	he, hs := hash(etcd, ecli), hash(s, scli)
	if he != hs {
		t.Fatalf("HashKV at revision %d: etcd %08x, Strata %08x", rev, he, hs)
	}
	for _, cli := range []*clientv3.Client{ecli, scli} {
		r, err := cli.Get(ctx, "mixed/", clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithSerializable())
		if err != nil || r.Count != 81 {
			t.Fatalf("keys under mixed/: %v, %v (want 81)", r, err)
		}
	}
	ttl, err := scli.TimeToLive(ctx, lease.ID, clientv3.WithAttachedKeys())
	if err != nil || ttl.TTL <= 0 || len(ttl.Keys) != 1 || string(ttl.Keys[0]) != "mixed/leased" {
		t.Fatalf("the etcd lease on the Strata member: %+v, %v", ttl, err)
	}
	ml, err := scli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range ml.Members {
		names = append(names, fmt.Sprintf("%s(learner=%v)", m.Name, m.IsLearner))
	}
	if strings.Join(names, " ") != "e1(learner=false) s1(learner=false)" && strings.Join(names, " ") != "s1(learner=false) e1(learner=false)" {
		t.Fatalf("members: %v", names)
	}

	// The converted state survives a restart of the Strata member.
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	rev = putN(t, ecli, "mixed/c", 5)
	waitRev(t, s, rev)
	if he, hs := hash(etcd, ecli), hash(s, memberClient(t, s)); he != hs {
		t.Fatalf("HashKV at revision %d after the restart: etcd %08x, Strata %08x", rev, he, hs)
	}
	t.Logf("MIXED: a Strata learner joined a 1-member etcd 3.7.3 cluster through the etcd leader's bbolt snapshot (converted into the page store), was promoted, and matched etcd's HashKV at revision %d after writes through either member and a restart", rev)
}
