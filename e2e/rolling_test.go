package e2e

// TestRollingMigration: a running etcd 3.7.3 cluster
// becomes a Strata cluster and back, one member at a time, under load,
// with zero downtime: the rolling replacement an operator does.
//
// Three etcd members serve clientv3 writers and readers (puts, deletes
// and txns on a few keys, gets and ranges, through every voter: the
// load of TestScaleUnderLoad), a watch on the key set, and a lease kept
// alive throughout. Then, three times: a Strata member is added as a
// learner, promoted once in sync, and an etcd member removed (the etcd
// leader in the first round), until only Strata members remain and a
// Strata member leads. Then the same back to etcd. After every change
// HashKV is equal on every member at a common revision; every member
// runs etcd's periodic corruption check (--corrupt-check-time) and no
// alarm may be raised.
//
// At the end, the checks of TestScaleUnderLoad (porcupine over the
// whole history, no acknowledged write lost, member lists, HashKV), the
// watch's guarantees (lin.CheckWatches: every revision exactly once, in
// order, atomic, reliable across the members it was moved between), and
// the lease alive on every member. The lease has no keys: keys written
// outside the load's model would move the revisions porcupine checks.
// A MIGRATE line gives the counts.
//
// make test runs the short mode (about 100 acknowledged operations per
// membership); STRATA_MIGRATE=long (make migrate-long) runs 1000 per
// membership; STRATA_MIGRATE_SEED replays a run's operations.

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/strata-db/strata/e2e/lin"
	"github.com/strata-db/strata/internal/poll"
)

func TestRollingMigration(t *testing.T) {
	b := needBins(t)
	strata := strataTarget(t)
	long := os.Getenv("STRATA_MIGRATE") == "long"
	cfg := scaleConfig{long: long, seed: time.Now().UnixNano(), outDir: os.Getenv("STRATA_E2E_OUT"),
		phaseOps: 100, rate: 300, checkTimeout: 300 * time.Second}
	if long {
		cfg.phaseOps, cfg.checkTimeout = 1000, 1800*time.Second
	}
	if s := os.Getenv("STRATA_MIGRATE_SEED"); s != "" {
		var err error
		if cfg.seed, err = strconv.ParseInt(s, 10, 64); err != nil {
			t.Fatalf("STRATA_MIGRATE_SEED=%q: %v", s, err)
		}
	}
	fmt.Printf("MIGRATE run seed=%d phase-ops=%d rate=%d/s long=%v (STRATA_MIGRATE_SEED=%d replays)\n",
		cfg.seed, cfg.phaseOps, cfg.rate, cfg.long, cfg.seed)
	rng := rand.New(rand.NewSource(cfg.seed))
	r := &scaleRun{t: t, cfg: cfg, bin: b.Etcd, dir: t.TempDir(), load: newScaleLoad(cfg.rate), next: 1,
		gen: rand.New(rand.NewSource(rng.Int63())), plan: rand.New(rand.NewSource(rng.Int63())), pick: rand.New(rand.NewSource(rng.Int63())),
		flags: append(slices.Clone(clusterFlags), "--corrupt-check-time=2s")}
	kind := func(m *scaleMember) string {
		if m.s.Bin() == b.Etcd {
			return "etcd"
		}
		return "strata"
	}
	t.Cleanup(func() {
		r.load.halt()
		// All at once: an etcd member stopped last, alone without its
		// quorum, can take longer than the harness waits.
		var wg sync.WaitGroup
		for _, m := range r.all {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := m.s.Stop(); err != nil {
					t.Errorf("stop %s: %v", m.name(), err)
				}
				m.cli.Close()
			}()
		}
		wg.Wait()
		if t.Failed() {
			for _, m := range r.all {
				t.Logf("log of %s (%s):\n%s", m.name(), kind(m), m.s.LogTail(40))
			}
		}
	})

	// Three etcd members: one bootstrapped alone, two added.
	first, initRev := r.bootstrap(b.Etcd)

	// The watch and the lease go through clients that follow the
	// membership: their endpoints are the voters', updated after every
	// change, so they move between members (and kinds) as members go.
	newClient := func() *clientv3.Client {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{first.s.ClientURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		return cli
	}
	wcli, lcli := newClient(), newClient()
	r.changed = func() {
		var urls []string
		for _, m := range r.active {
			urls = append(urls, m.s.ClientURL)
		}
		wcli.SetEndpoints(urls...)
		lcli.SetEndpoints(urls...)
	}
	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	watch := lin.RecordWatch(watchCtx, wcli, "migration", initRev+1, 200*time.Millisecond)
	gctx, gcancel := context.WithTimeout(context.Background(), poll.Deadline)
	lease, err := lcli.Grant(gctx, 10)
	gcancel()
	if err != nil {
		t.Fatal(err)
	}
	kaCtx, stopKA := context.WithCancel(context.Background())
	defer stopKA()
	ka, err := lcli.KeepAlive(kaCtx, lease.ID)
	if err != nil {
		t.Fatal(err)
	}
	kaAnswers := 0
	kaDone := make(chan struct{})
	go func() {
		defer close(kaDone)
		for range ka {
			kaAnswers++
		}
	}()

	start := time.Now()
	r.activate(first)
	r.phase()
	for len(r.active) < 3 {
		r.growWith(b.Etcd)
	}
	hashSteps := 0
	hashes := func(what string) {
		t.Helper()
		migrateHashes(t, r, what, kind)
		hashSteps++
	}
	hashes("3 etcd members")

	// Etcd to Strata, then back: each round adds one member of the new
	// kind and removes one of the old (the leader in the first round).
	var leaders []string
	migrate := func(from, to string, fromKind, toKind string) {
		for i := 0; i < 3; i++ {
			r.growWith(to)
			hashes(fmt.Sprintf("added %s #%d", toKind, i+1))
			lead, err := scaleLeader(r.active)
			if err != nil {
				t.Fatal(err)
			}
			var pool []*scaleMember
			for _, m := range r.active {
				if m.s.Bin() == from && m != lead {
					pool = append(pool, m)
				}
			}
			victim := lead
			if lead.s.Bin() != from || (i > 0 && len(pool) > 0) {
				victim = pool[r.plan.Intn(len(pool))]
			}
			r.remove(victim, lead)
			hashes(fmt.Sprintf("removed %s #%d", fromKind, i+1))
		}
		lead, err := scaleLeader(r.active)
		if err != nil {
			t.Fatal(err)
		}
		if kind(lead) != toKind {
			t.Fatalf("after the migration to %s, %s (%s) leads", toKind, lead.name(), kind(lead))
		}
		leaders = append(leaders, fmt.Sprintf("%s(%s)", lead.name(), kind(lead)))
		for _, m := range r.active {
			if kind(m) != toKind {
				t.Fatalf("after the migration to %s, %s is %s", toKind, m.name(), kind(m))
			}
		}
	}
	migrate(b.Etcd, strata, "etcd", "strata")
	migrate(strata, b.Etcd, "strata", "etcd")
	r.load.halt()
	workTime := time.Since(start)

	r.finish(initRev, workTime, "MIGRATE", func(finalRev int64, final [lin.MaxKeys]lin.KV, ops []lin.Op) (string, bool) {
		ok := true
		var notes []string
		// The watch: every revision exactly once, in order.
		if err := linWaitUntil("the watch to reach the final revision", func() bool { return watch.Reached() >= finalRev }); err != nil {
			notes = append(notes, fmt.Sprintf("watch reached %d of %d", watch.Reached(), finalRev))
			ok = false
		}
		stopWatch()
		rctx, rcancel := context.WithTimeout(context.Background(), poll.Deadline)
		ref, err := lin.ReadReference(rctx, r.active[0].cli, initRev, finalRev)
		rcancel()
		if err != nil {
			notes = append(notes, "reference watch: "+err.Error())
			ok = false
		} else {
			rep := lin.CheckWatches([]*lin.WatchLog{watch}, ref, initRev, finalRev, final, ops)
			if rep.Count() > 0 {
				ok = false
			}
			notes = append(notes, "watch: "+rep.Summary())
		}
		// The lease, kept alive through every kind of member, is alive on
		// every member; no corruption alarm was raised.
		for _, m := range r.active {
			tctx, tcancel := context.WithTimeout(context.Background(), poll.Deadline)
			ttl, err := m.cli.TimeToLive(tctx, lease.ID)
			al, aerr := m.cli.AlarmList(tctx)
			tcancel()
			if err != nil || ttl.TTL <= 0 {
				notes = append(notes, fmt.Sprintf("lease on %s: ttl %v, %v", m.name(), ttl, err))
				ok = false
			}
			if aerr != nil || len(al.Alarms) > 0 {
				notes = append(notes, fmt.Sprintf("alarms on %s: %v, %v", m.name(), al, aerr))
				ok = false
			}
		}
		stopKA()
		<-kaDone
		notes = append(notes, fmt.Sprintf("lease alive on every member after %d keep-alive answers", kaAnswers),
			fmt.Sprintf("HashKV equal after each of %d changes", hashSteps), "leaders at the end of each way: "+strings.Join(leaders, ", "),
			"no alarm")
		return strings.Join(notes, "; "), ok
	})
	if t.Failed() {
		if dir := scaleOutDir(t, cfg); dir != "" {
			t.Logf("logs in %s", filepath.Join(dir))
		}
	}
}

// migrateHashes waits until every member has applied the leader's
// current revision and compares their HashKV at it.
func migrateHashes(t *testing.T, r *scaleRun, what string, kind func(*scaleMember) string) {
	t.Helper()
	lead, err := scaleLeader(r.active)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), poll.Deadline)
	defer cancel()
	resp, err := lead.cli.Get(ctx, "migrate-probe")
	if err != nil {
		t.Fatalf("%s: read on the leader: %v", what, err)
	}
	rev := resp.Header.Revision
	var got []string
	var first uint32
	same := true
	for i, m := range r.active {
		waitRev(t, m.s, rev)
		h, err := m.cli.HashKV(ctx, m.s.ClientURL, rev)
		if err != nil {
			t.Fatalf("%s: HashKV on %s: %v", what, m.name(), err)
		}
		if i == 0 {
			first = h.Hash
		} else if h.Hash != first {
			same = false
		}
		got = append(got, fmt.Sprintf("%s(%s)=%08x", m.name(), kind(m), h.Hash))
	}
	if !same {
		t.Fatalf("%s: HashKV at revision %d differs: %s", what, rev, strings.Join(got, " "))
	}
	t.Logf("%.1fs: %s: HashKV at revision %d equal on %s", r.clock(), what, rev, strings.Join(got, " "))
}
