package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/strata-db/strata/e2e/harness"
	"github.com/strata-db/strata/internal/poll"
)

// rowCluster is row 12: a 3-member cluster of side's binary loaded with
// the data set through the client API, then a 4th member added as a
// learner, started, caught up and promoted, as Kubernetes operators
// grow a cluster, while the fixed-rate put load writes to the leader.
// It reports the time from the MemberAdd to the promotion (and to the
// learner being in sync: its revision at least the leader's), and the
// leader's put p99 during the join beside its p99 before it. After the
// join the four members must hash alike (HashKV at one revision).
func (sb *bscaleBench) rowCluster(side *bscaleSide) {
	if !sb.cfg.cluster {
		sb.t.Logf("SCALE row 12 on %s: skipped (STRATA_SCALE_CLUSTER=0)", side.label)
		return
	}
	sb.row(12, "4th member joins a loaded 3-member cluster", side, func() { sb.clusterJoin(side) })
}

func (sb *bscaleBench) clusterJoin(side *bscaleSide) {
	t := sb.t
	dir := sb.mkdir(side.label + "-cluster")
	defer os.RemoveAll(dir)
	// Four members hold the data set: room for four single-server data
	// dirs (row 2's, or three times the data set) and a fifth of more.
	each := 3 * float64(sb.plan.createBytes)
	if v, ok := side.fig["du.allocated"]; ok {
		each = v
	}
	need := int64(4 * each * 1.2)
	if free := freeBytes(t, dir); free < need {
		side.note["join.skipped"] = fmt.Sprintf("skipped: 4 members need about %s in %s, %s free", bscaleSize(need), sb.base, bscaleSize(free))
		t.Logf("SCALE row 12 on %s: %s", side.label, side.note["join.skipped"])
		return
	}
	c, err := harness.NewCluster(side.bin, dir, 3, sb.flags)
	if err != nil {
		t.Fatalf("%s cluster: %v", side.label, err)
	}
	if err := c.Start(); err != nil {
		t.Fatalf("%s cluster: start: %v", side.label, err)
	}
	defer c.Close()
	res := bscaleLoad(t, side.label+" (3 members)", c.ClientURLs(), sb.plan, bscaleLoadDataSet, bscaleClusterBatch)
	side.set("cluster.load", res.rate())

	admin, err := bscaleClient(c.ClientURLs())
	if err != nil {
		t.Fatalf("%s cluster: client: %v", side.label, err)
	}
	defer admin.Close()
	status := func(url string) (*clientv3.StatusResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return admin.Status(ctx, url)
	}
	var leader *harness.Server
	for _, m := range c.Members {
		st, err := status(m.ClientURL)
		if err != nil {
			t.Fatalf("%s cluster: status of %s: %v", side.label, m.Name(), err)
		}
		if st.Leader == st.Header.MemberId {
			leader = m
		}
	}
	if leader == nil {
		t.Fatalf("%s cluster: no member says it leads", side.label)
	}

	// The loaded cluster holds the same content as the single servers.
	conn, err := bscaleConn(leader.ClientURL)
	if err != nil {
		t.Fatalf("%s cluster: connection: %v", side.label, err)
	}
	defer conn.Close()
	st, err := status(leader.ClientURL)
	if err != nil {
		t.Fatalf("%s cluster: status of the leader: %v", side.label, err)
	}
	d, n, err := bscaleDigest(conn, st.Header.Revision)
	if err != nil {
		t.Fatalf("%s cluster: reading the data set back: %v", side.label, err)
	}
	if n != sb.plan.liveKeys {
		t.Fatalf("%s cluster: %d keys under /registry/ after the load, want %d", side.label, n, sb.plan.liveKeys)
	}
	if sb.digestFrom == "" {
		sb.digest, sb.digestFrom = d, side.label+" cluster"
	} else if d != sb.digest {
		t.Fatalf("content differs: the %s cluster's digest is %x, %s's %x", side.label, d[:8], sb.digestFrom, sb.digest[:8])
	}

	m4, err := harness.NewServer(harness.ServerConfig{Bin: side.bin, Name: "m4", Dir: dir,
		Flags:        append(slices.Clone(sb.flags), "--initial-cluster-state=existing"),
		ReadyTimeout: 2 * time.Hour, StopTimeout: 10 * time.Minute})
	if err != nil {
		t.Fatalf("%s cluster: m4: %v", side.label, err)
	}
	load, err := bsStartPutLoad([]string{leader.ClientURL}, sb.cfg.putRate, sb.cfg.putSize, sb.cfg.seed,
		func(n int) string { return fmt.Sprintf("/bench/join/%08d", n) }, false)
	if err != nil {
		t.Fatalf("%s cluster: put load: %v", side.label, err)
	}
	loadStart := time.Now()
	idlePuts := sb.cfg.putRate * int(sb.cfg.idleWindow/time.Second)
	poll.UntilNilWithin(t, time.Hour, 10*time.Millisecond, side.label+" cluster: the idle window's puts", func() error {
		if n := load.count(); n < idlePuts {
			return fmt.Errorf("%d of %d puts", n, idlePuts)
		}
		return nil
	})

	t0 := time.Now()
	var add *clientv3.MemberAddResponse
	// Retried while the cluster reports itself unhealthy (a member just
	// started); any other error fails the row.
	poll.UntilNilWithin(t, 5*time.Minute, 50*time.Millisecond, side.label+" cluster: member add --learner "+m4.AdvertisePeerURL, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		add, err = admin.MemberAddAsLearner(ctx, []string{m4.AdvertisePeerURL})
		cancel()
		if err != nil && !scaleIsErr(err, rpctypes.ErrUnhealthy) {
			t.Fatalf("%s cluster: member add --learner %s: %v", side.label, m4.AdvertisePeerURL, err)
		}
		return err
	})
	var initial []string
	for _, pm := range add.Members {
		name := pm.Name
		if pm.ID == add.Member.ID {
			name = m4.Name()
		}
		for _, u := range pm.PeerURLs {
			initial = append(initial, name+"="+u)
		}
	}
	harness.WithInitialCluster(m4, strings.Join(initial, ","))
	started := make(chan error, 1)
	go func() { started <- m4.Start() }()
	defer m4.Stop()
	m4cli, err := bscaleClient([]string{m4.ClientURL})
	if err != nil {
		t.Fatalf("%s cluster: m4 client: %v", side.label, err)
	}
	defer m4cli.Close()
	startErr := func() {
		select {
		case err := <-started:
			if err != nil {
				t.Fatalf("%s cluster: m4 did not start: %v", side.label, err)
			}
			started <- nil
		default:
		}
	}

	// In sync: the learner's revision reaches the one the leader had
	// just before it was asked.
	poll.UntilNilWithin(t, 2*time.Hour, 50*time.Millisecond, side.label+" cluster: m4 in sync", func() error {
		startErr()
		lst, lerr := status(leader.ClientURL)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		mst, merr := m4cli.Status(ctx, m4.ClientURL)
		cancel()
		switch {
		case lerr != nil:
			return fmt.Errorf("leader: %v", lerr)
		case merr != nil:
			return fmt.Errorf("m4: %v", merr)
		case mst.Header.Revision < lst.Header.Revision:
			return fmt.Errorf("m4 at revision %d, the leader at %d", mst.Header.Revision, lst.Header.Revision)
		}
		return nil
	})
	tSync := time.Now()
	promotes := 0
	// Retried while the learner is not ready (etcd's own check of its
	// log) or on a retryable error; any other error fails the row.
	poll.UntilNilWithin(t, 2*time.Hour, 50*time.Millisecond, fmt.Sprintf("%s cluster: member promote %x", side.label, add.Member.ID), func() error {
		promotes++
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := admin.MemberPromote(ctx, add.Member.ID)
		cancel()
		if err != nil && !scaleIsErr(err, rpctypes.ErrMemberLearnerNotReady) && !scaleRetryable(err) {
			t.Fatalf("%s cluster: member promote %x: %v", side.label, add.Member.ID, err)
		}
		return err
	})
	tProm := time.Now()
	if err := <-started; err != nil {
		t.Fatalf("%s cluster: m4 did not start: %v", side.label, err)
	}
	until := bsMaxTime(tProm, t0.Add(time.Second))
	time.Sleep(time.Until(until))
	samples := load.finish()
	idle := bsWindowStats(samples, loadStart.Add(time.Second), t0)
	join := bsWindowStats(samples, t0, until)
	if join.failed > 0 || idle.failed > 0 {
		msg := fmt.Sprintf("%d of %d puts failed: %v", join.failed+idle.failed, len(samples), bsFirstErr(samples))
		side.note["join.p99"] = msg
		t.Logf("SCALE %s cluster: %s", side.label, msg)
		if side == sb.sides[1] {
			t.Errorf("%s cluster: %s", side.label, msg)
		}
	}
	side.set("join.time", tProm.Sub(t0).Seconds())
	side.set("join.sync", tSync.Sub(t0).Seconds())
	side.set("join.p99", join.p99.Seconds())
	side.set("join.idle.p99", idle.p99.Seconds())
	side.note["join.time"] = fmt.Sprintf("in sync after %s", bscaleDur(tSync.Sub(t0).Seconds()))
	bySnap := harnessLogHas(m4, "snapshot")
	t.Logf("SCALE join %s: m4 (%x) in sync %s after the add, promoted after %s (%d tries; log mentions a snapshot: %v); leader put p99 %s (max %s, %d puts) during the join, %s (%d puts) before",
		side.label, add.Member.ID, bscaleDur(tSync.Sub(t0).Seconds()), bscaleDur(tProm.Sub(t0).Seconds()), promotes, bySnap,
		bscaleDur(join.p99.Seconds()), bscaleDur(join.max.Seconds()), join.n, bscaleDur(idle.p99.Seconds()), idle.n)

	// The four members agree: the same HashKV at the leader's revision
	// once each has applied it.
	lst, err := status(leader.ClientURL)
	if err != nil {
		t.Fatalf("%s cluster: status of the leader: %v", side.label, err)
	}
	rev := lst.Header.Revision
	members := append(slices.Clone(c.Members), m4)
	hashes := map[uint32][]string{}
	for _, m := range members {
		poll.UntilNilWithin(t, 10*time.Minute, 20*time.Millisecond, fmt.Sprintf("%s cluster: %s to apply revision %d", side.label, m.Name(), rev), func() error {
			st, err := status(m.ClientURL)
			if err != nil {
				return err
			}
			if st.Header.Revision < rev {
				return fmt.Errorf("at revision %d", st.Header.Revision)
			}
			return nil
		})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		hk, err := admin.HashKV(ctx, m.ClientURL, rev)
		cancel()
		if err != nil {
			t.Fatalf("%s cluster: HashKV of %s at %d: %v", side.label, m.Name(), rev, err)
		}
		hashes[hk.Hash] = append(hashes[hk.Hash], m.Name())
	}
	if len(hashes) != 1 {
		t.Errorf("%s cluster: the members' HashKV at revision %d differ after the join: %v", side.label, rev, hashes)
	} else {
		t.Logf("SCALE join %s: the 4 members' HashKV at revision %d agree", side.label, rev)
	}
	// All four at once: one after the other is seconds each.
	var wg sync.WaitGroup
	for _, m := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.Stop(); err != nil {
				t.Errorf("%s cluster: stop %s: %v", side.label, m.Name(), err)
			}
		}()
	}
	wg.Wait()
}
