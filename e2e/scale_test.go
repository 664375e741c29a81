package e2e

// TestScaleUnderLoad: runtime reconfiguration under load. One member
// grows to three, then five, then shrinks back to three, one member at a
// time (1→2→3→4→5→4→3), while clientv3 writers (puts, deletes and txns of
// unique values on a few keys) and readers (gets and whole-key-set
// ranges) work through every voting member; a member's clients join the
// load once it is promoted and leave it once it is removed. Each
// membership gets its share of acknowledged operations, through every
// voter, before the next change; the load also runs during every change.
//
// A new member is added as a learner (MemberAdd through a voter), started
// with --initial-cluster-state existing and the --initial-cluster that
// etcdctl member add prints, polled until it serves (a serializable read,
// all a learner answers) and promoted, retried while the leader says it
// is not in sync yet. A shrink removes two voters (MemberRemove), the
// current leader among them, in an order the seed picks; each removed
// process must stop by itself, exit 0 and log that it was removed. Its
// clients' errors are recorded as in-doubt operations, as in
// TestLinearizability. Requests the strict reconfiguration checks refuse
// while peer links are younger than etcd's 5 s ("unhealthy cluster") are
// retried.
//
// At the end: porcupine over the whole history against e2e/lin's model
// (values and revisions), no acknowledged write lost (lin.LostWrites on
// the final state, and each acknowledged write read back at its own
// revision on every remaining member), the remaining members' member
// lists equal (started voters only) and HashKV equal at the final
// revision. The run prints a SCALE line with the counts.
//
// Short mode (make e2e): one cycle, 200 acknowledged operations per
// membership at 300 operations a second, about 25-35 s. STRATA_SCALE=long
// repeats the 3→5→3 cycle STRATA_SCALE_CYCLES times (default 4; the
// leader is removed in the first shrink and in half of the others) with
// STRATA_SCALE_PHASE_OPS (default 1500) operations per membership;
// STRATA_SCALE_RATE sets the rate. STRATA_SCALE_SEED replays a run's
// operations and which members go (given the same leader); the timing of
// the interleaving is the machine's. The target is $STRATA_E2E_TARGET,
// real etcd 3.7.3 without it: the same checks pass on etcd.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/strata-db/strata/e2e/harness"
	"github.com/strata-db/strata/e2e/lin"
	"github.com/strata-db/strata/internal/poll"
)

const (
	scaleKeys             = 6
	scaleWritersPerMember = 2
	scaleReadersPerMember = 1
	scaleOpTimeout        = 2 * time.Second
	// scaleMinPerMember is how many operations every voter's clients
	// must have acknowledged in each membership before the next change.
	scaleMinPerMember = 10
	// scaleAdminTimeout bounds one MemberAdd, MemberPromote, MemberRemove
	// or Status call; a retried call's whole wait is poll.Deadline.
	scaleAdminTimeout = 5 * time.Second
	// scalePhaseDeadline bounds a hang only: the wait for a membership's
	// share of operations.
	scalePhaseDeadline = 2 * time.Minute
)

// The writers never read except through a failed txn's else branch (the
// mix adds up to 100, so no gets); the readers only read.
var (
	scaleWriteMix = lin.Mix{Put: 35, Delete: 10, TxnMod: 30, TxnValue: 10, TxnMulti: 15}
	scaleReadMix  = lin.Mix{Range: 40}
)

type scaleConfig struct {
	long         bool
	seed         int64
	cycles       int // 3→5→3 cycles after the first growth 1→3
	phaseOps     int // acknowledged operations per membership
	rate         int // operations a second, all workers together
	checkTimeout time.Duration
	outDir       string
}

func scaleSettings(t *testing.T) scaleConfig {
	c := scaleConfig{long: os.Getenv("STRATA_SCALE") == "long", seed: time.Now().UnixNano(), outDir: os.Getenv("STRATA_E2E_OUT")}
	cycles, phaseOps, rate, check := 1, 200, 300, 300
	if c.long {
		cycles, phaseOps, rate, check = 4, 1500, 300, 1800
	}
	c.cycles = linEnvInt(t, "STRATA_SCALE_CYCLES", cycles)
	c.phaseOps = linEnvInt(t, "STRATA_SCALE_PHASE_OPS", phaseOps)
	c.rate = linEnvInt(t, "STRATA_SCALE_RATE", rate)
	c.checkTimeout = time.Duration(linEnvInt(t, "STRATA_LIN_CHECK_SECONDS", check)) * time.Second
	if s := os.Getenv("STRATA_SCALE_SEED"); s != "" {
		var err error
		if c.seed, err = strconv.ParseInt(s, 10, 64); err != nil {
			t.Fatalf("STRATA_SCALE_SEED=%q: %v", s, err)
		}
	}
	return c
}

// scaleMember is one member of the run, from its MemberAdd (or the
// first start) to its removal.
type scaleMember struct {
	s   *harness.Server
	id  uint64
	cli *clientv3.Client // admin calls, Status, HashKV, the final reads
	// retire tells its workers to stop using it; wg waits for them.
	retire atomic.Bool
	wg     sync.WaitGroup
	// acked counts its clients' acknowledged operations.
	acked atomic.Int64
}

func (m *scaleMember) name() string { return m.s.Name() }

// scaleLoad runs the workers and records their operations in h. The
// workers share a budget of rate operations a second (tokens), which
// keeps the history small enough for porcupine however fast the target:
// the membership changes, not the operation count, set the run's length.
type scaleLoad struct {
	h      *lin.History
	stop   atomic.Bool
	acked  atomic.Int64
	wg     sync.WaitGroup
	tokens chan struct{}
	done   chan struct{}
}

func newScaleLoad(rate int) *scaleLoad {
	l := &scaleLoad{h: lin.NewHistory(), tokens: make(chan struct{}, 8), done: make(chan struct{})}
	go func() {
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				select {
				case l.tokens <- struct{}{}:
				default:
				}
			case <-l.done:
				return
			}
		}
	}()
	return l
}

// halt stops the workers and waits for them.
func (l *scaleLoad) halt() {
	if !l.stop.Swap(true) {
		close(l.done)
	}
	l.wg.Wait()
}

// attach starts m's writers and readers, each with a clientv3 client of
// its own pinned to m, until the load stops or m retires.
func (l *scaleLoad) attach(m *scaleMember, rng *rand.Rand) error {
	for j := 0; j < scaleWritersPerMember+scaleReadersPerMember; j++ {
		name, mix := fmt.Sprintf("%s.w%d", m.name(), j), scaleWriteMix
		if j >= scaleWritersPerMember {
			name, mix = fmt.Sprintf("%s.r%d", m.name(), j-scaleWritersPerMember), scaleReadMix
		}
		gen := &lin.Gen{Name: name, Keys: scaleKeys, Mix: mix, Rand: rand.New(rand.NewSource(rng.Int63()))}
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.s.ClientURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return err
		}
		lc := lin.NewClient(cli, l.h, name, scaleOpTimeout)
		l.wg.Add(1)
		m.wg.Add(1)
		go func() {
			defer l.wg.Done()
			defer m.wg.Done()
			defer cli.Close()
			for !l.stop.Load() && !m.retire.Load() {
				select {
				case <-l.tokens:
				case <-l.done:
					return
				}
				op := lc.Do(gen.Next())
				gen.Saw(op)
				if op.Failed() {
					// Back off a little; a failed write is in doubt and
					// goes on under a fresh porcupine client (lin.Client).
					time.Sleep(20 * time.Millisecond)
					continue
				}
				m.acked.Add(1)
				l.acked.Add(1)
			}
		}()
	}
	return nil
}

// scaleRun is the state of one run: the members, in the order they
// joined, and what happened to them.
type scaleRun struct {
	t        *testing.T
	cfg      scaleConfig
	bin, dir string
	// Three streams from the seed: gen seeds the workers' operation
	// generators and plan picks what goes (both drawn in the same order
	// on every run of a seed); pick chooses the member each request is
	// sent through, also inside retries, whose number is the machine's.
	gen, plan, pick *rand.Rand
	load            *scaleLoad
	// flags are the members' flags; clusterFlags when nil.
	flags []string
	// changed, if set, runs after every membership change (the
	// migration points its watch and lease clients at the new members).
	changed func()
	active  []*scaleMember // voters taking load
	all     []*scaleMember
	next    int // number of the next member's name
	sizes   []string
	// counts for the SCALE line
	promoteTries, addRetries, removeRetries, leaderRemovals int
	// joined, bySnapshot: members that joined, and those of them whose
	// log says they installed a snapshot from the leader to catch up.
	joined, bySnapshot int
}

func TestScaleUnderLoad(t *testing.T) {
	b := needBins(t)
	bin := targetBin(t, b)
	cfg := scaleSettings(t)
	fmt.Printf("SCALE run seed=%d cycles=%d phase-ops=%d rate=%d/s long=%v target=%s (STRATA_SCALE_SEED=%d replays)\n",
		cfg.seed, cfg.cycles, cfg.phaseOps, cfg.rate, cfg.long, filepath.Base(bin), cfg.seed)
	rng := rand.New(rand.NewSource(cfg.seed))
	r := &scaleRun{t: t, cfg: cfg, bin: bin, dir: t.TempDir(), load: newScaleLoad(cfg.rate), next: 1,
		gen: rand.New(rand.NewSource(rng.Int63())), plan: rand.New(rand.NewSource(rng.Int63())), pick: rand.New(rand.NewSource(rng.Int63()))}
	t.Cleanup(func() {
		r.load.halt()
		for _, m := range r.all {
			if err := m.s.Stop(); err != nil {
				t.Errorf("stop %s: %v", m.name(), err)
			}
			m.cli.Close()
		}
		if t.Failed() {
			for _, m := range r.all {
				t.Logf("log of %s:\n%s", m.name(), m.s.LogTail(60))
			}
		}
	})

	first, initRev := r.bootstrap(bin)

	start := time.Now()
	r.activate(first)
	r.phase()
	for len(r.active) < 3 {
		r.grow()
	}
	for c := 0; c < cfg.cycles; c++ {
		for len(r.active) < 5 {
			r.grow()
		}
		// Two removals, one of them the leader (always in the first
		// cycle, in half of the others), in an order the seed picks.
		leaderAt := -1
		if c == 0 || r.plan.Intn(2) == 0 {
			leaderAt = r.plan.Intn(2)
		}
		for i := 0; i < 2; i++ {
			r.shrink(i == leaderAt)
		}
	}
	r.load.halt()
	workTime := time.Since(start)

	r.finish(initRev, workTime, "SCALE", nil)
}

// finish ends a run whose load has halted: final reads on every member
// (recorded like every other operation), member lists, HashKV at the
// final revision, every acknowledged write read back, porcupine, and a
// summary line starting with tag. extra, if not nil, adds its checks
// (the migration's watch and lease) with what they print and whether
// they passed.
func (r *scaleRun) finish(initRev int64, workTime time.Duration, tag string,
	extra func(finalRev int64, final [lin.MaxKeys]lin.KV, ops []lin.Op) (string, bool)) {
	t, cfg := r.t, r.cfg
	// Final reads on every member, once they agree: recorded like every
	// other operation.
	if _, err := scaleLeader(r.active); err != nil {
		t.Fatal(err)
	}
	var readers []linReader
	for _, m := range r.active {
		readers = append(readers, linReader{m.name(), m.cli})
	}
	finals, finalsErr := linFinalReads(r.load.h, readers, scaleOpTimeout)
	if len(finals) < len(r.active) {
		t.Fatalf("final reads: %v", finalsErr)
	}
	finalRev := finals[0].Out.Rev

	// The remaining members list the same voters, all started.
	memberErr := r.checkMemberLists()

	// HashKV at the final revision on every member.
	var hashes []string
	for _, m := range r.active {
		ctx, cancel := context.WithTimeout(context.Background(), poll.Deadline)
		hr, err := m.cli.HashKV(ctx, m.s.ClientURL, finalRev)
		cancel()
		if err != nil {
			t.Fatalf("hashkv on %s: %v", m.name(), err)
		}
		hashes = append(hashes, fmt.Sprintf("%s:%d@%d", m.name(), hr.Hash, hr.HashRevision))
	}
	hashOK := true
	for _, h := range hashes[1:] {
		if h[strings.Index(h, ":"):] != hashes[0][strings.Index(hashes[0], ":"):] {
			hashOK = false
		}
	}

	// Every acknowledged write, read back at its revision on every member.
	ops := r.load.h.Ops()
	ackedWrites, verified, missing := r.readBackAckedWrites(ops)

	res := lin.Check(ops, initRev, cfg.checkTimeout)
	sent, failed := 0, 0
	for _, op := range ops {
		if strings.HasSuffix(op.Member, ".final") {
			continue
		}
		sent++
		if op.Failed() {
			failed++
		}
	}
	lost := len(res.Lost) + len(missing)
	// What the failed operations saw, by member and error: a removed
	// member's clients are expected here.
	errs := map[string]int{}
	for _, op := range ops {
		if op.Failed() {
			errs[fmt.Sprintf("%s %s: %s", strings.Split(op.Member, ".")[0], op.In.Kind, op.Err)]++
		}
	}
	for _, e := range slices.Sorted(maps.Keys(errs)) {
		t.Logf("failed: %d× %s", errs[e], e)
	}
	extraLine, extraOK := "", true
	if extra != nil {
		extraLine, extraOK = extra(finalRev, finals[0].Out.KV, ops)
	}
	fmt.Printf("%s: seed=%d ops=%d acked=%d failed=%d acked-writes=%d verified=%d lost=%d indeterminate=%d pinned=%d failed-reads=%d members %s joined-by-snapshot=%d/%d leader-removals=%d promote-tries=%d add-retries=%d remove-retries=%d linearizable=%v (%s) hashkv-equal=%v rev=%d work=%.1fs check=%.2fs\n",
		tag, cfg.seed, sent, sent-failed, failed, ackedWrites, verified, lost, res.InDoubt, res.Pinned, res.FailedReads,
		strings.Join(r.sizes, "→"), r.bySnapshot, r.joined, r.leaderRemovals, r.promoteTries, r.addRetries, r.removeRetries,
		res.Verdict == "Ok", res.Verdict, hashOK, finalRev, workTime.Seconds(), res.Elapsed.Seconds())
	if extraLine != "" {
		fmt.Printf("%s: %s\n", tag, extraLine)
	}

	if finalsErr != nil {
		for _, op := range finals {
			t.Errorf("final read on %s: %s", op.Member, lin.DescribeOutput(op.In, op.Out))
		}
		t.Errorf("%v", finalsErr)
	}
	if memberErr != nil {
		t.Errorf("member lists: %v", memberErr)
	}
	if !hashOK {
		t.Errorf("HashKV differs at revision %d: %s", finalRev, strings.Join(hashes, " "))
	}
	for _, l := range missing {
		t.Errorf("lost: %s", l)
	}
	if !extraOK {
		t.Errorf("%s: %s", tag, extraLine)
	}
	if !res.OK() || !hashOK || finalsErr != nil || len(missing) > 0 {
		dir := scaleOutDir(t, cfg)
		if err := res.Visualize(filepath.Join(dir, "history.html")); err != nil {
			t.Errorf("visualization: %v", err)
		}
		if err := lin.WriteOps(filepath.Join(dir, "ops.txt"), ops); err != nil {
			t.Errorf("ops: %v", err)
		}
		for _, m := range r.all {
			linCopyFile(m.s.LogPath, filepath.Join(dir, m.name()+".log"))
		}
		fmt.Printf("%s FAILED (seed %d): porcupine's visualization %s, operations %s, member logs in %s\n",
			tag, cfg.seed, filepath.Join(dir, "history.html"), filepath.Join(dir, "ops.txt"), dir)
		if e := res.Explain(); e != "" {
			t.Errorf("not linearizable: %s", e)
		}
		for _, l := range res.Lost {
			t.Errorf("lost (final state): %s", l)
		}
		for _, v := range res.Phantoms {
			t.Errorf("a read returned %q, which no operation wrote", v)
		}
		t.Fatalf("seed %d: porcupine %s, %d lost writes, hashkv equal=%v", cfg.seed, res.Verdict, lost, hashOK)
	}
}

// bootstrap starts the run's first member, of bin, alone, and returns it
// with the revision of its (empty) key space: the model's start.
func (r *scaleRun) bootstrap(bin string) (*scaleMember, int64) {
	t := r.t
	t.Helper()
	flags := clusterFlags
	if r.flags != nil {
		flags = r.flags
	}
	s, err := harness.NewServer(harness.ServerConfig{Bin: bin, Name: r.newName(), Dir: r.dir, Flags: flags})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	first := r.track(s)
	st, err := scaleStatus(first)
	if err != nil {
		t.Fatalf("status of %s: %v", first.name(), err)
	}
	first.id = st.Header.MemberId
	ctx, cancel := context.WithTimeout(context.Background(), poll.Deadline)
	resp, err := first.cli.Get(ctx, lin.Prefix, clientv3.WithPrefix())
	cancel()
	if err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("initial read: %v, %v", err, resp)
	}
	return first, resp.Header.Revision
}

// clock is the history's time in seconds, to match the steps with the
// operations (lin.WriteOps prints the same clock).
func (r *scaleRun) clock() float64 { return float64(r.load.h.Now()) / 1e9 }

func (r *scaleRun) newName() string {
	n := fmt.Sprintf("m%d", r.next)
	r.next++
	return n
}

// track opens s's admin client and records it as a member of the run.
func (r *scaleRun) track(s *harness.Server) *scaleMember {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{s.ClientURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		r.t.Fatal(err)
	}
	m := &scaleMember{s: s, cli: cli}
	r.all = append(r.all, m)
	return m
}

// activate puts m's clients in the load.
func (r *scaleRun) activate(m *scaleMember) {
	if err := r.load.attach(m, r.gen); err != nil {
		r.t.Fatal(err)
	}
	r.active = append(r.active, m)
	r.sizes = append(r.sizes, strconv.Itoa(len(r.active)))
	if r.changed != nil {
		r.changed()
	}
}

// phase waits until the load has acknowledged its share of operations in
// the current membership: cfg.phaseOps in all, and scaleMinPerMember
// through every voter.
func (r *scaleRun) phase() {
	r.t.Helper()
	cfgOps := int64(r.cfg.phaseOps)
	base := r.load.acked.Load()
	per := map[*scaleMember]int64{}
	for _, m := range r.active {
		per[m] = m.acked.Load()
	}
	began := time.Now()
	if err := linWaitUntilFor(scalePhaseDeadline, fmt.Sprintf("%d acknowledged operations with %d members", cfgOps, len(r.active)), func() bool {
		if r.load.acked.Load()-base < cfgOps {
			return false
		}
		for _, m := range r.active {
			if m.acked.Load()-per[m] < scaleMinPerMember {
				return false
			}
		}
		return true
	}); err != nil {
		var b strings.Builder
		for _, m := range r.active {
			fmt.Fprintf(&b, " %s:%d", m.name(), m.acked.Load()-per[m])
		}
		r.t.Fatalf("%v; acknowledged per member:%s", err, b.String())
	}
	r.t.Logf("%.1fs: %d members: %d operations acknowledged in %.1fs", r.clock(), len(r.active), r.load.acked.Load()-base, time.Since(began).Seconds())
}

// via picks a voter to send an admin request through.
func (r *scaleRun) via() *scaleMember { return r.active[r.pick.Intn(len(r.active))] }

// follower picks a voter other than lead, to remove.
func (r *scaleRun) follower(lead *scaleMember) *scaleMember {
	var pool []*scaleMember
	for _, m := range r.active {
		if m != lead {
			pool = append(pool, m)
		}
	}
	return pool[r.plan.Intn(len(pool))]
}

func scaleIsErr(err error, want error) bool {
	return err != nil && (errors.Is(err, want) || rpctypes.ErrorDesc(err) == rpctypes.ErrorDesc(want))
}

// scaleRetryable are the refusals a reconfiguration request gets while
// the cluster is still settling: the strict checks want peer links up
// for a while (etcd's 5 s), and a request can meet a leader election.
func scaleRetryable(err error) bool {
	for _, e := range []error{rpctypes.ErrUnhealthy, rpctypes.ErrLeaderChanged, rpctypes.ErrNoLeader, rpctypes.ErrTimeout,
		rpctypes.ErrTimeoutDueToLeaderFail, rpctypes.ErrTooManyRequests} {
		if scaleIsErr(err, e) {
			return true
		}
	}
	return errors.Is(err, context.DeadlineExceeded)
}

// grow adds one member: MemberAdd as a learner through a voter, start it
// with --initial-cluster-state existing, wait until it serves, promote it
// (retrying while the leader says it is not in sync), wait until it knows
// it votes, and put it in the load.
func (r *scaleRun) grow() { r.t.Helper(); r.growWith(r.bin) }

// growWith is grow with the new member's binary: etcd or Strata.
func (r *scaleRun) growWith(bin string) {
	t := r.t
	t.Helper()
	name := r.newName()
	flags := clusterFlags
	if r.flags != nil {
		flags = r.flags
	}
	s, err := harness.NewServer(harness.ServerConfig{Bin: bin, Name: name, Dir: r.dir,
		Flags: append(slices.Clone(flags), "--initial-cluster-state=existing")})
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	// The revision before the add: the learner serves once it shows it.
	var rev0 int64
	if err := linWaitUntil("a read before the add", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		resp, err := r.via().cli.Get(ctx, "scale-probe")
		if err == nil {
			rev0 = resp.Header.Revision
		}
		return err == nil
	}); err != nil {
		t.Fatal(err)
	}
	var add *clientv3.MemberAddResponse
	var via *scaleMember
	tries := 0
	ambiguous := false
	if err := linPoll(poll.Deadline, 50*time.Millisecond, fmt.Sprintf("MemberAdd of %s to be accepted", name), func() bool {
		via = r.via()
		tries++
		ctx, cancel := context.WithTimeout(context.Background(), scaleAdminTimeout)
		defer cancel()
		var err error
		add, err = via.cli.MemberAddAsLearner(ctx, []string{s.AdvertisePeerURL})
		switch {
		case err == nil:
			return true
		case ambiguous && scaleIsErr(err, rpctypes.ErrPeerURLExist):
			// An earlier try that timed out went through: take the
			// member from the list.
			list, lerr := via.cli.MemberList(ctx)
			if lerr != nil {
				return false
			}
			for _, pm := range list.Members {
				if slices.Contains(pm.PeerURLs, s.AdvertisePeerURL) {
					add = &clientv3.MemberAddResponse{Header: list.Header, Member: pm, Members: list.Members}
					return true
				}
			}
			t.Fatalf("MemberAdd of %s through %s: %v, and no member has that peer URL", name, via.name(), err)
		case scaleRetryable(err):
			ambiguous = ambiguous || !scaleIsErr(err, rpctypes.ErrUnhealthy)
		default:
			t.Fatalf("MemberAdd of %s (learner, %s) through %s: %v", name, s.AdvertisePeerURL, via.name(), err)
		}
		return false
	}); err != nil {
		t.Fatal(err)
	}
	r.addRetries += tries - 1
	if !add.Member.IsLearner {
		t.Fatalf("MemberAdd as learner answered %+v", add.Member)
	}
	// The --initial-cluster etcdctl member add prints: the started
	// members and the new one under its name.
	var initial []string
	for _, pm := range add.Members {
		n := pm.Name
		if pm.ID == add.Member.ID {
			n = name
		}
		if n == "" {
			continue
		}
		for _, u := range pm.PeerURLs {
			initial = append(initial, n+"="+u)
		}
	}
	harness.WithInitialCluster(s, strings.Join(initial, ","))
	if err := s.Start(); err != nil {
		t.Fatalf("start %s joining %s: %v", name, strings.Join(initial, ","), err)
	}
	m := r.track(s)
	m.id = add.Member.ID
	joined := time.Since(began)

	// A learner answers serializable reads only; it serves once one
	// shows a revision at least the one before the MemberAdd.
	if err := linWaitUntil(name+" (learner) to serve a serializable read", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		resp, err := m.cli.Get(ctx, lin.Prefix, clientv3.WithPrefix(), clientv3.WithSerializable())
		return err == nil && resp.Header.Revision >= rev0
	}); err != nil {
		t.Fatal(err)
	}
	st, err := scaleStatus(m)
	if err != nil {
		t.Fatalf("status of %s: %v", name, err)
	}
	if st.Header.MemberId != m.id || !st.IsLearner {
		t.Fatalf("%s says it is member %x learner=%v; added as %x, a learner", name, st.Header.MemberId, st.IsLearner, m.id)
	}

	// Promote, through any voter: refused until the learner is in sync.
	ptries := 0
	notReady := 0
	ambiguous = false
	if err := linPoll(poll.Deadline, 20*time.Millisecond, fmt.Sprintf("%s to be promoted", name), func() bool {
		pv := r.via()
		ptries++
		ctx, cancel := context.WithTimeout(context.Background(), scaleAdminTimeout)
		defer cancel()
		_, err := pv.cli.MemberPromote(ctx, m.id)
		switch {
		case err == nil:
			return true
		case ambiguous && scaleIsErr(err, rpctypes.ErrMemberNotLearner):
			return true // an earlier try that timed out went through
		case scaleIsErr(err, rpctypes.ErrMemberLearnerNotReady):
			notReady++
		case scaleRetryable(err):
			ambiguous = true
		default:
			t.Fatalf("MemberPromote of %s through %s: %v", name, pv.name(), err)
		}
		return false
	}); err != nil {
		t.Fatal(err)
	}
	r.promoteTries += ptries
	if err := linWaitUntil(name+" to know it votes", func() bool {
		st, err := scaleStatus(m)
		return err == nil && !st.IsLearner
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%.1fs: added %s (%x) through %s after %d tries, started in %.1fs, promoted after %d tries (%d not in sync) %.1fs after the add",
		r.clock(), name, m.id, via.name(), tries, joined.Seconds(), ptries, notReady, time.Since(began).Seconds())
	r.joined++
	if harnessLogHas(m.s, "restored the state from a leader's snapshot") || harnessLogHas(m.s, "applied snapshot") {
		r.bySnapshot++
	}
	r.activate(m)
	r.phase()
}

// shrink removes one voter: the leader, or a follower the seed picks,
// through a voter the seed picks (the victim itself included); the
// removed process must stop by itself, exit 0 and log etcd's lines;
// then its clients stop.
func (r *scaleRun) shrink(leader bool) {
	t := r.t
	t.Helper()
	lead, err := scaleLeader(r.active)
	if err != nil {
		t.Fatal(err)
	}
	victim := lead
	if !leader {
		victim = r.follower(lead)
	}
	r.remove(victim, lead)
}

// remove removes victim (lead is the leader now), as shrink describes.
func (r *scaleRun) remove(victim, lead *scaleMember) {
	t := r.t
	t.Helper()
	if victim == lead {
		r.leaderRemovals++
	}
	began := time.Now()
	tries := 0
	ambiguous := false
	var via *scaleMember
	if err := linPoll(poll.Deadline, 50*time.Millisecond, fmt.Sprintf("MemberRemove of %s to be accepted", victim.name()), func() bool {
		via = r.via()
		tries++
		ctx, cancel := context.WithTimeout(context.Background(), scaleAdminTimeout)
		defer cancel()
		_, err := via.cli.MemberRemove(ctx, victim.id)
		switch {
		case err == nil:
			return true
		case ambiguous && scaleIsErr(err, rpctypes.ErrMemberNotFound):
			return true
		case via == victim && scaleIsErr(err, rpctypes.ErrStopped):
			// The victim removed itself and stopped before it answered
			// (etcd does): the next try, through another member, finds
			// it gone.
			ambiguous = true
		case scaleRetryable(err):
			ambiguous = ambiguous || !scaleIsErr(err, rpctypes.ErrUnhealthy)
		default:
			t.Fatalf("MemberRemove of %s through %s: %v", victim.name(), via.name(), err)
		}
		return false
	}); err != nil {
		t.Fatal(err)
	}
	r.removeRetries += tries - 1
	code, err := victim.s.WaitExit(poll.Deadline)
	if err != nil {
		t.Fatalf("%s after its removal: %v", victim.name(), err)
	}
	if code != 0 {
		t.Fatalf("%s exited with status %d after its removal, want 0", victim.name(), code)
	}
	if !harnessLogHas(victim.s, "the member has been permanently removed from the cluster") {
		t.Fatalf("%s's log does not say it was removed:\n%s", victim.name(), victim.s.LogTail(30))
	}
	exited := time.Since(began)
	victim.retire.Store(true)
	victim.wg.Wait()
	r.active = slices.DeleteFunc(r.active, func(m *scaleMember) bool { return m == victim })
	r.sizes = append(r.sizes, strconv.Itoa(len(r.active)))
	if r.changed != nil {
		r.changed()
	}
	role := "follower"
	if victim == lead {
		role = "leader"
	}
	nl, err := scaleLeader(r.active)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%.1fs: removed %s (%s) through %s after %d tries; it exited 0 %.1fs after the request; leader now %s",
		r.clock(), victim.name(), role, via.name(), tries, exited.Seconds(), nl.name())
	r.phase()
}

// checkMemberLists: every remaining member lists exactly the remaining
// members, as started voters.
func (r *scaleRun) checkMemberLists() error {
	want := map[uint64]string{}
	for _, m := range r.active {
		want[m.id] = m.name()
	}
	for _, m := range r.active {
		ctx, cancel := context.WithTimeout(context.Background(), scaleAdminTimeout)
		resp, err := m.cli.MemberList(ctx)
		cancel()
		if err != nil {
			return fmt.Errorf("member list on %s: %w", m.name(), err)
		}
		got := map[uint64]string{}
		for _, pm := range resp.Members {
			if pm.IsLearner || pm.Name == "" {
				return fmt.Errorf("%s lists %x (%q) learner=%v", m.name(), pm.ID, pm.Name, pm.IsLearner)
			}
			got[pm.ID] = pm.Name
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("%s lists %v, want %v", m.name(), got, want)
		}
	}
	return nil
}

// readBackAckedWrites reads every acknowledged write that changed the key
// space back at its revision on every remaining member: each value it put
// is there with that mod revision, each key it deleted is absent. It
// returns the number of acknowledged write operations, how many of them
// changed the key space (and were checked), and one line per miss.
func (r *scaleRun) readBackAckedWrites(ops []lin.Op) (acked, checked int, missing []string) {
	type want struct {
		op   lin.Op
		puts map[int]string
		dels []int
	}
	var wants []want
	revs := map[int64]bool{}
	for _, op := range ops {
		if op.Failed() || !op.In.Kind.Writes() {
			continue
		}
		acked++
		w := want{op: op, puts: map[int]string{}}
		switch op.In.Kind {
		case lin.Put:
			w.puts[op.In.Key] = op.In.Value
		case lin.Delete:
			if op.Out.Deleted == 0 {
				continue
			}
			w.dels = []int{op.In.Key}
		case lin.TxnMod, lin.TxnValue:
			if !op.Out.Succeeded {
				continue
			}
			w.puts[op.In.Key] = op.In.Value
		case lin.TxnMulti:
			if !op.Out.Succeeded {
				continue
			}
			w.puts[op.In.Key] = op.In.Value
			w.puts[op.In.Key2] = op.In.Value2
			w.dels = []int{op.In.Del}
		}
		wants = append(wants, w)
		revs[op.Out.Rev] = true
	}
	checked = len(wants)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, m := range r.active {
		wg.Add(1)
		go func() {
			defer wg.Done()
			at := map[int64]map[string]*lin.KV{}
			for rev := range revs {
				ctx, cancel := context.WithTimeout(context.Background(), poll.Deadline)
				resp, err := m.cli.Get(ctx, lin.Prefix, clientv3.WithPrefix(), clientv3.WithRev(rev), clientv3.WithSerializable())
				cancel()
				if err != nil {
					mu.Lock()
					missing = append(missing, fmt.Sprintf("%s: read at revision %d: %v", m.name(), rev, err))
					mu.Unlock()
					continue
				}
				kvs := map[string]*lin.KV{}
				for _, kv := range resp.Kvs {
					kvs[string(kv.Key)] = &lin.KV{Value: string(kv.Value), Mod: kv.ModRevision}
				}
				at[rev] = kvs
			}
			for _, w := range wants {
				kvs, ok := at[w.op.Out.Rev]
				if !ok {
					continue
				}
				var bad []string
				for k, v := range w.puts {
					if got := kvs[lin.KeyName(k)]; got == nil || got.Value != v || got.Mod != w.op.Out.Rev {
						bad = append(bad, fmt.Sprintf("%s=%v", lin.KeyName(k), got))
					}
				}
				for _, k := range w.dels {
					if got := kvs[lin.KeyName(k)]; got != nil {
						bad = append(bad, fmt.Sprintf("%s=%v (deleted)", lin.KeyName(k), got))
					}
				}
				if len(bad) > 0 {
					mu.Lock()
					missing = append(missing, fmt.Sprintf("%s: %s acknowledged at revision %d by %s; at that revision %s", m.name(),
						lin.DescribeInput(w.op.In), w.op.Out.Rev, w.op.Member, strings.Join(bad, ", ")))
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	slices.Sort(missing)
	return acked, checked, missing
}

// scaleStatus is m's Status.
func scaleStatus(m *scaleMember) (*clientv3.StatusResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return m.cli.Status(ctx, m.s.ClientURL)
}

// scaleLeader waits until the members agree on a leader among them and
// returns it.
func scaleLeader(ms []*scaleMember) (*scaleMember, error) {
	var lead *scaleMember
	err := linWaitUntil("the members to agree on a leader", func() bool {
		lead = nil
		var id uint64
		for _, m := range ms {
			st, err := scaleStatus(m)
			if err != nil || st.Leader == 0 || (id != 0 && st.Leader != id) {
				return false
			}
			id = st.Leader
		}
		for _, m := range ms {
			if m.id == id {
				lead = m
			}
		}
		return lead != nil
	})
	return lead, err
}

func scaleOutDir(t *testing.T, cfg scaleConfig) string {
	var dir string
	var err error
	if cfg.outDir != "" {
		dir = filepath.Join(cfg.outDir, fmt.Sprintf("scale-%d", cfg.seed))
		err = os.MkdirAll(dir, 0o755)
	} else {
		dir, err = os.MkdirTemp("", "strata-scale-")
	}
	if err != nil {
		t.Fatal(err)
	}
	return dir
}
