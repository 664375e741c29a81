package e2e

// TestLinearizability: histories of get, put, delete and txn
// driven through clientv3 on all three members of a cluster while a fault
// injector SIGKILLs the leader, SIGSTOPs a member, isolates the leader and
// cuts one direction between two members (the peer proxies of
// harness.Network), checked with porcupine against the revision-level
// model in e2e/lin. Per history: 0 violations, 0 acknowledged writes lost,
// the members' final reads equal and HashKV equal at the final revision.
// Each history prints a LIN line, the run a LIN total line.
//
// STRATA_LIN_HISTORIES (default 2), STRATA_LIN_OPS (operations per
// history, default 300) and STRATA_LIN_SEED (replay) set the run; `make
// robustness` runs 20 × 2000. The target is $STRATA_E2E_TARGET, real etcd
// 3.7.3 without it: the same check passes on etcd, the reference.

import (
	"context"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/strata-db/strata/e2e/harness"
	"github.com/strata-db/strata/e2e/lin"
	"github.com/strata-db/strata/internal/poll"
)

const (
	linKeys           = 6
	linClientsPerNode = 2
	linOpTimeout      = 2 * time.Second
)

type linConfig struct {
	histories, ops int
	seed           int64
	checkTimeout   time.Duration
	faults         []string
	outDir         string
}

func linEnvInt(t *testing.T, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, s)
	}
	return n
}

func linSettings(t *testing.T) linConfig {
	c := linConfig{
		histories:    linEnvInt(t, "STRATA_LIN_HISTORIES", 2),
		ops:          linEnvInt(t, "STRATA_LIN_OPS", 300),
		seed:         time.Now().UnixNano(),
		checkTimeout: time.Duration(linEnvInt(t, "STRATA_LIN_CHECK_SECONDS", 300)) * time.Second,
		faults:       linFaultKinds,
		outDir:       os.Getenv("STRATA_E2E_OUT"),
	}
	if s := os.Getenv("STRATA_LIN_SEED"); s != "" {
		var err error
		if c.seed, err = strconv.ParseInt(s, 10, 64); err != nil {
			t.Fatalf("STRATA_LIN_SEED=%q: %v", s, err)
		}
	}
	if s := os.Getenv("STRATA_LIN_FAULTS"); s != "" {
		c.faults = strings.Split(s, ",")
		for _, f := range c.faults {
			if !slices.Contains(linFaultKinds, f) {
				t.Fatalf("STRATA_LIN_FAULTS: unknown fault %q (have %v)", f, linFaultKinds)
			}
		}
	}
	return c
}

// linFaultKinds are the faults the injector draws from (linFault.inject):
// SIGKILL of the leader and restart; SIGSTOP of a member, then SIGCONT;
// the leader isolated by the peer proxies; a one-way partition between
// the leader and a follower.
var linFaultKinds = []string{"kill", "stop", "partition", "oneway"}

// linTotals adds up the histories.
type linTotals struct {
	histories, ops, ok, failed, indoubt, probes, probesOK, violations, lost, hashMismatch, unknown int
	faults                                                                                         map[string]int
}

func TestLinearizability(t *testing.T) {
	b := needBins(t)
	bin := targetBin(t, b)
	cfg := linSettings(t)
	fmt.Printf("LIN run seed=%d histories=%d ops=%d faults=%s target=%s (STRATA_LIN_SEED=%d replays)\n",
		cfg.seed, cfg.histories, cfg.ops, strings.Join(cfg.faults, ","), filepath.Base(bin), cfg.seed)
	tot := linTotals{faults: map[string]int{}}
	for i := 0; i < cfg.histories; i++ {
		seed := cfg.seed + int64(i)
		t.Run(fmt.Sprintf("h%02d", i), func(t *testing.T) {
			linHistory(t, bin, cfg, i, seed, &tot)
		})
	}
	fmt.Printf("LIN total histories=%d ops=%d ok=%d failed=%d indoubt=%d probes=%d/%d faults=%s violations=%d lost=%d hashkv-mismatch=%d unknown=%d seed=%d\n",
		tot.histories, tot.ops, tot.ok, tot.failed, tot.indoubt, tot.probesOK, tot.probes, linFaultCounts(cfg.faults, tot.faults),
		tot.violations, tot.lost, tot.hashMismatch, tot.unknown, cfg.seed)
}

func linFaultCounts(kinds []string, n map[string]int) string {
	var parts []string
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s:%d", k, n[k]))
	}
	return strings.Join(parts, ",")
}

// linHistory runs and checks one history on a fresh cluster.
func linHistory(t *testing.T, bin string, cfg linConfig, idx int, seed int64, tot *linTotals) {
	t.Logf("history %d seed=%d (STRATA_LIN_SEED=%d STRATA_LIN_HISTORIES=1 replays it)", idx, seed, seed)
	rng := rand.New(rand.NewSource(seed))
	c, err := harness.NewClusterWithProxies(bin, t.TempDir(), 3, clusterFlags, uint64(rng.Int63()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("stop cluster: %v", err)
		}
		if t.Failed() {
			for _, m := range c.Members {
				t.Logf("log of %s:\n%s", m.Name(), m.LogTail(60))
			}
			t.Logf("peer traffic:\n%s", c.Net.Report())
		}
	})
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A member left stopped would hold Stop up for its timeout.
		for _, m := range c.Members {
			if pid := m.Pid(); pid != 0 {
				_ = syscall.Kill(pid, syscall.SIGCONT)
			}
		}
	})
	clients := map[*harness.Server]*clientv3.Client{}
	for _, m := range c.Members {
		clients[m] = memberClient(t, m)
	}

	// The key space starts empty; its revision is the model's start.
	ctx, cancel := context.WithTimeout(context.Background(), poll.Deadline)
	resp, err := clients[c.Members[0]].Get(ctx, lin.Prefix, clientv3.WithPrefix())
	cancel()
	if err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("initial read: %v, %d keys", err, len(resp.Kvs))
	}
	initRev := resp.Header.Revision

	// Watch streams on every member from the first revision, with prev_kv
	// and progress notifications (etcd's watch guarantees), checked
	// after the history against a reference watch.
	watchCtx, stopWatches := context.WithCancel(context.Background())
	defer stopWatches()
	var watches []*lin.WatchLog
	for _, m := range c.Members {
		watches = append(watches, lin.RecordWatch(watchCtx, memberClient(t, m), m.Name(), initRev+1, 200*time.Millisecond))
	}

	h := lin.NewHistory()
	inj := &linFault{c: c, h: h, rng: rand.New(rand.NewSource(rng.Int63())), kinds: cfg.faults, counts: map[string]int{},
		down: map[*harness.Server]*atomic.Bool{}, clients: map[*harness.Server]*clientv3.Client{}}
	for _, m := range c.Members {
		inj.down[m] = &atomic.Bool{}
		inj.clients[m] = memberClient(t, m)
	}

	// Workers: linClientsPerNode per member, each with its own clientv3
	// client pinned to that member, until cfg.ops operations are sent.
	// The operations are cut into one segment more than there are
	// faults: the injector starts fault p once segment p-1 is handed out
	// and the workers send segment p while it lasts and after; so every
	// fault has traffic during it however fast the target is.
	gate := &linGate{n: int64(cfg.ops), faults: int64(inj.planned(cfg.ops))}
	var wg sync.WaitGroup
	for _, m := range c.Members {
		for j := 0; j < linClientsPerNode; j++ {
			name := fmt.Sprintf("%s.%d", m.Name(), j)
			gen := &lin.Gen{Name: name, Keys: linKeys, Mix: lin.DefaultMix, Rand: rand.New(rand.NewSource(rng.Int63()))}
			lc := lin.NewClient(memberClient(t, m), h, name, linOpTimeout)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for gate.next() {
					op := lc.Do(gen.Next())
					gen.Saw(op)
					if op.Failed() {
						// Back off; while the member is down, wait for it
						// rather than pile up operations that fail at once.
						time.Sleep(20 * time.Millisecond)
						for inj.down[m].Load() {
							time.Sleep(10 * time.Millisecond)
						}
					}
				}
			}()
		}
	}
	start := time.Now()
	injErr := inj.run(gate)
	wg.Wait()
	if injErr != nil {
		t.Fatalf("fault injector: %v", injErr)
	}
	workTime := time.Since(start)

	// Final reads: on every member, once they all are at one revision;
	// recorded like every other operation.
	if err := linWaitHealthy(c); err != nil {
		t.Fatal(err)
	}
	// A disagreement that outlasts the wait is reported with the verdict.
	var readers []linReader
	for _, m := range c.Members {
		readers = append(readers, linReader{m.Name(), clients[m]})
	}
	finals, finalsErr := linFinalReads(h, readers, linOpTimeout)
	if len(finals) < len(c.Members) {
		t.Fatalf("final reads: %v", finalsErr)
	}
	finalRev := finals[0].Out.Rev

	// HashKV at the final revision on every member.
	var hashes []string
	for _, m := range c.Members {
		ctx, cancel := context.WithTimeout(context.Background(), poll.Deadline)
		hr, err := clients[m].HashKV(ctx, m.ClientURL, finalRev)
		cancel()
		if err != nil {
			t.Fatalf("hashkv on %s: %v", m.Name(), err)
		}
		hashes = append(hashes, fmt.Sprintf("%d@%d", hr.Hash, hr.HashRevision))
	}
	hashOK := hashes[0] == hashes[1] && hashes[1] == hashes[2]
	hashWord := "equal"
	if !hashOK {
		hashWord = "DIFFERENT:" + strings.Join(hashes, ",")
	}

	ops := h.Ops()
	wrep := linCheckWatches(t, c, clients, watches, stopWatches, initRev, finalRev, finals[0].Out.KV, ops)
	fmt.Printf("WATCH history=%d streams=%d events=%d progress=%d reopens=%d violations=%d (%s)\n",
		idx, wrep.Streams, wrep.Events, wrep.Progress, wrep.Reopens, wrep.Count(), wrep.Summary())
	for kind, vs := range wrep.Violations {
		for _, v := range vs {
			t.Errorf("watch guarantee %s: %s", kind, v)
		}
	}
	res := lin.Check(ops, initRev, cfg.checkTimeout)
	sent, failed, probes, probesOK := 0, 0, 0, 0
	for _, op := range ops {
		if strings.HasSuffix(op.Member, ".final") {
			continue
		}
		if strings.HasSuffix(op.Member, ".probe") {
			probes++
			if !op.Failed() {
				probesOK++
			}
			continue
		}
		sent++
		if op.Failed() {
			failed++
		}
	}
	fmt.Printf("LIN history=%d seed=%d ops=%d ok=%d failed=%d indoubt=%d pinned=%d gaps=%d probes=%d/%d faults=%s violations=%d lost=%d phantoms=%d hashkv=%s result=%s rev=%d work=%.1fs check=%.2fs\n",
		idx, seed, sent, sent-failed, failed, res.InDoubt, res.Pinned, len(res.Gaps), probesOK, probes, linFaultCounts(cfg.faults, inj.counts),
		res.Violations(), len(res.Lost), len(res.Phantoms), hashWord, res.Verdict, finalRev, workTime.Seconds(), res.Elapsed.Seconds())

	tot.histories++
	tot.ops += sent
	tot.ok += sent - failed
	tot.failed += failed
	tot.indoubt += res.InDoubt
	tot.probes += probes
	tot.probesOK += probesOK
	tot.violations += res.Violations()
	tot.lost += len(res.Lost)
	if res.Verdict != "Ok" && res.Verdict != "Illegal" {
		tot.unknown++
	}
	if !hashOK {
		tot.hashMismatch++
	}
	for k, n := range inj.counts {
		tot.faults[k] += n
	}

	if finalsErr != nil {
		for _, op := range finals {
			t.Errorf("final read on %s: %s", op.Member, lin.DescribeOutput(op.In, op.Out))
		}
		t.Errorf("%v", finalsErr)
	}
	if !res.OK() || !hashOK || finalsErr != nil {
		dir := linOutDir(t, cfg, idx)
		if err := res.Visualize(filepath.Join(dir, "history.html")); err != nil {
			t.Errorf("visualization: %v", err)
		}
		if err := lin.WriteOps(filepath.Join(dir, "ops.txt"), ops); err != nil {
			t.Errorf("ops: %v", err)
		}
		for _, m := range c.Members {
			linCopyFile(m.LogPath, filepath.Join(dir, m.Name()+".log"))
		}
		fmt.Printf("LIN history=%d FAILED: porcupine's visualization %s, operations %s, member logs in %s\n",
			idx, filepath.Join(dir, "history.html"), filepath.Join(dir, "ops.txt"), dir)
		if e := res.Explain(); e != "" {
			t.Errorf("not linearizable: %s", e)
		}
		for _, l := range res.Lost {
			t.Errorf("lost: %s", l)
		}
		for _, v := range res.Phantoms {
			t.Errorf("a read returned %q, which no operation wrote", v)
		}
		t.Fatalf("history %d (seed %d): %s, %d lost writes, hashkv %s", idx, seed, res.Verdict, len(res.Lost), hashWord)
	}
}

// linCheckWatches waits until every stream has reached finalRev, stops
// them, reads the reference and checks the streams against it.
func linCheckWatches(t *testing.T, c *harness.Cluster, clients map[*harness.Server]*clientv3.Client, watches []*lin.WatchLog,
	stop context.CancelFunc, initRev, finalRev int64, final [lin.MaxKeys]lin.KV, ops []lin.Op) *lin.WatchReport {
	t.Helper()
	if err := linWaitUntil("every watch stream to reach the final revision", func() bool {
		for _, w := range watches {
			if w.Reached() < finalRev {
				return false
			}
		}
		return true
	}); err != nil {
		for _, w := range watches {
			t.Logf("watch on %s reached %d of %d", w.Member, w.Reached(), finalRev)
		}
		t.Error(err)
	}
	stop()
	ctx, cancel := context.WithTimeout(context.Background(), poll.Deadline)
	defer cancel()
	ref, err := lin.ReadReference(ctx, clients[c.Members[0]], initRev, finalRev)
	if err != nil {
		t.Fatalf("reference watch: %v", err)
	}
	return lin.CheckWatches(watches, ref, initRev, finalRev, final, ops)
}

func linOutDir(t *testing.T, cfg linConfig, idx int) string {
	var dir string
	var err error
	if cfg.outDir != "" {
		dir = filepath.Join(cfg.outDir, fmt.Sprintf("lin-%d-h%02d", cfg.seed, idx))
		err = os.MkdirAll(dir, 0o755)
	} else {
		dir, err = os.MkdirTemp("", fmt.Sprintf("strata-lin-h%02d-", idx))
	}
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func linCopyFile(from, to string) {
	in, err := os.Open(from)
	if err != nil {
		return
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return
	}
	defer out.Close()
	_, _ = io.Copy(out, in)
}

// linFault injects faults until the workload is done, one at a time,
// each followed by a wait for a healthy cluster.
type linFault struct {
	c      *harness.Cluster
	rng    *rand.Rand
	kinds  []string
	counts map[string]int
	// down is set while a member is killed; its clients wait.
	down map[*harness.Server]*atomic.Bool
	// h, clients, probes: the probe reads (holdWithProbes) in flight.
	h       *lin.History
	clients map[*harness.Server]*clientv3.Client
	probes  sync.WaitGroup
}

// planned is how many faults a history of ops operations gets: every
// kind at least once, and one per 250 operations.
func (f *linFault) planned(ops int) int {
	return max(len(f.kinds), ops/250)
}

// run injects gate.faults faults, fault p once the workers have taken
// segment p-1 of the operations, each followed by a wait for a healthy
// cluster. On an error it opens the gate so the workers finish.
func (f *linFault) run(gate *linGate) error {
	defer gate.open(gate.faults + 1)
	var order []string
	for p := int64(1); p <= gate.faults; p++ {
		// Bounds a hang only: a segment of operations that all time out
		// takes segment size × linOpTimeout / clients.
		if err := linWaitUntilFor(10*time.Minute, fmt.Sprintf("segment %d of the operations to be taken", p-1), func() bool {
			return gate.taken.Load() >= gate.boundary(p)
		}); err != nil {
			return err
		}
		if len(order) == 0 {
			// Every kind once, in a random order, then again.
			for _, i := range f.rng.Perm(len(f.kinds)) {
				order = append(order, f.kinds[i])
			}
		}
		kind := order[0]
		order = order[1:]
		gate.open(p)
		if err := f.inject(kind); err != nil {
			return fmt.Errorf("%s: %w", kind, err)
		}
		f.counts[kind]++
		if err := linWaitHealthy(f.c); err != nil {
			return fmt.Errorf("after %s: %w", kind, err)
		}
	}
	return nil
}

// linGate hands out n operation slots in faults+1 segments; segment p
// opens when fault p starts (segment 0 at once).
type linGate struct {
	n, faults int64
	taken     atomic.Int64
	phase     atomic.Int64
}

// boundary is the number of slots in segments before p.
func (g *linGate) boundary(p int64) int64 { return p * g.n / (g.faults + 1) }

func (g *linGate) open(p int64) { g.phase.Store(p) }

// next takes a slot, waiting for its segment to open; false when all n
// are taken.
func (g *linGate) next() bool {
	s := g.taken.Add(1)
	if s > g.n {
		return false
	}
	seg := (s - 1) * (g.faults + 1) / g.n
	for g.phase.Load() < seg {
		time.Sleep(time.Millisecond)
	}
	return true
}

func (f *linFault) inject(kind string) error {
	lead, err := linLeaderOf(f.c)
	if err != nil {
		return err
	}
	switch kind {
	case "kill":
		// SIGKILL the leader; restart it after 0-500 ms.
		f.down[lead].Store(true)
		defer f.down[lead].Store(false)
		if err := lead.Kill(); err != nil {
			return err
		}
		time.Sleep(time.Duration(f.rng.Intn(500)) * time.Millisecond)
		return lead.Start()
	case "stop":
		// SIGSTOP the leader or a follower for 0.5-2.5 s, then SIGCONT:
		// a leader's followers elect another and the old one steps down
		// when it wakes; a follower falls behind and catches up. Its
		// clients' requests wait or time out and are sent again (the
		// process is there, so no fast failures to hold back), and probe
		// reads sent during the stop are answered as it wakes, when a
		// leader that has not yet heard of its successor must not answer
		// from its own state.
		victim := lead
		if f.rng.Intn(2) == 0 {
			victim = f.c.Members[f.rng.Intn(len(f.c.Members))]
		}
		pid := victim.Pid()
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			return err
		}
		f.holdWithProbes(victim, time.Duration(500+f.rng.Intn(2000))*time.Millisecond)
		err := syscall.Kill(pid, syscall.SIGCONT)
		f.probes.Wait()
		return err
	case "partition":
		// Cut the leader off from its peers, both ways, for 0.5-2 s: the
		// others elect a leader, the old one steps down (check quorum),
		// its clients' requests fail or wait; then heal.
		dropped := func() int64 {
			return f.c.Net.Stats(harness.Any, lead.Name()).Dropped + f.c.Net.Stats(lead.Name(), harness.Any).Dropped
		}
		before := dropped()
		f.c.Net.Isolate(lead.Name())
		f.holdWithProbes(lead, time.Duration(500+f.rng.Intn(1500))*time.Millisecond)
		f.c.Net.HealMember(lead.Name())
		f.probes.Wait()
		if dropped() == before {
			return fmt.Errorf("isolating %s dropped no peer traffic", lead.Name())
		}
		return nil
	case "oneway":
		// Blackhole one direction between the leader and a follower for
		// 0.5-2 s: the follower hears nothing and campaigns, or the
		// leader hears nothing from it.
		var other *harness.Server
		for other == nil || other == lead {
			other = f.c.Members[f.rng.Intn(len(f.c.Members))]
		}
		from, to := lead.Name(), other.Name()
		if f.rng.Intn(2) == 0 {
			from, to = to, from
		}
		before := f.c.Net.Stats(from, to).Dropped
		f.c.Net.Partition(from, to)
		time.Sleep(time.Duration(500+f.rng.Intn(1500)) * time.Millisecond)
		f.c.Net.Heal(from, to)
		if f.c.Net.Stats(from, to).Dropped == before {
			return fmt.Errorf("partitioning %s→%s dropped no peer traffic", from, to)
		}
		return nil
	}
	return fmt.Errorf("unknown fault %q", kind)
}

// holdWithProbes waits d, sending a probe read to m a third of the way,
// two thirds of the way and just before the end: reads called while m is
// cut off, after writes the others acknowledged, that m answers when it
// is back (or that time out). They go in the history like any read.
func (f *linFault) holdWithProbes(m *harness.Server, d time.Duration) {
	start := time.Now()
	for _, at := range []time.Duration{d / 3, 2 * d / 3, d - 10*time.Millisecond} {
		time.Sleep(time.Until(start.Add(at)))
		in := lin.Input{Kind: lin.Range}
		if f.rng.Intn(2) == 0 {
			in = lin.Input{Kind: lin.Get, Key: f.rng.Intn(linKeys)}
		}
		lc := lin.NewClient(f.clients[m], f.h, m.Name()+".probe", linOpTimeout)
		f.probes.Add(1)
		go func() {
			defer f.probes.Done()
			lc.Do(in)
		}()
	}
	time.Sleep(time.Until(start.Add(d)))
}

// linWaitUntil is poll.Until for a goroutine other than the test's: it
// returns an error instead of failing the test.
// linReader is a member's name and a client of it.
type linReader struct {
	name string
	cli  *clientv3.Client
}

// linFinalReads reads the whole key set on every member, recorded in h
// like every other operation, until all of them succeed and agree. A
// disagreement that outlasts the wait is returned as the error, with the
// last reads.
func linFinalReads(h *lin.History, readers []linReader, timeout time.Duration) ([]lin.Op, error) {
	var finals []lin.Op
	err := linWaitUntil("the members' final reads to agree", func() bool {
		finals = finals[:0]
		for _, r := range readers {
			op := lin.NewClient(r.cli, h, r.name+".final", timeout).Do(lin.Input{Kind: lin.Range})
			if op.Failed() {
				return false
			}
			finals = append(finals, op)
		}
		for _, op := range finals[1:] {
			if op.Out != finals[0].Out {
				return false
			}
		}
		return true
	})
	return finals, err
}

func linWaitUntil(what string, cond func() bool) error {
	return linWaitUntilFor(poll.Deadline, what, cond)
}

// linWaitUntilFor is linWaitUntil with a deadline of d.
func linWaitUntilFor(d time.Duration, what string, cond func() bool) error {
	return linPoll(d, time.Millisecond, what, cond)
}

// linPoll checks cond every interval until it holds or d has passed. A
// cond that sends a request (a retried membership change) takes a longer
// interval than a local check, so a refusal is not asked a thousand times
// a second.
func linPoll(d, every time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(every)
	}
	return nil
}

// linMemberStatus asks m for its status with a client of its own.
func linMemberStatus(m *harness.Server) (*clientv3.StatusResponse, *clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.ClientURL}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err := cli.Status(ctx, m.ClientURL)
	if err != nil {
		cli.Close()
		return nil, nil, err
	}
	return st, cli, nil
}

// linLeaderOf waits until every member names the same leader and returns it.
func linLeaderOf(c *harness.Cluster) (*harness.Server, error) {
	var lead *harness.Server
	err := linWaitUntil("the members to agree on a leader", func() bool {
		lead = nil
		var id uint64
		byID := map[uint64]*harness.Server{}
		for _, m := range c.Members {
			st, cli, err := linMemberStatus(m)
			if err != nil {
				return false
			}
			cli.Close()
			if st.Leader == 0 || (id != 0 && st.Leader != id) {
				return false
			}
			id = st.Leader
			byID[st.Header.MemberId] = m
		}
		lead = byID[id]
		return lead != nil
	})
	return lead, err
}

// linWaitHealthy waits until the members agree on a leader and each serves a
// linearizable read.
func linWaitHealthy(c *harness.Cluster) error {
	if _, err := linLeaderOf(c); err != nil {
		return err
	}
	return linWaitUntil("a linearizable read on every member", func() bool {
		for _, m := range c.Members {
			_, cli, err := linMemberStatus(m)
			if err != nil {
				return false
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err = cli.Get(ctx, "health")
			cancel()
			cli.Close()
			if err != nil {
				return false
			}
		}
		return true
	})
}
