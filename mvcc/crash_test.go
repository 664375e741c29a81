package mvcc

import (
	"bufio"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

const (
	crashChildEnv = "STRATA_MVCC_CRASH_CHILD"
	crashTotal    = 6000 // raft indexes the workload runs to
)

// requestAt is the deterministic request of raft index i, so a replay
// after a crash applies exactly what the crashed process would have.
func requestAt(i uint64) *pb.InternalRaftRequest {
	rng := rand.New(rand.NewSource(int64(i) * 7919))
	key := func() []byte { return []byte(fmt.Sprintf("key-%03d", rng.Intn(300))) }
	switch p := rng.Intn(100); {
	case p < 60:
		return &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: key(), Value: []byte(fmt.Sprintf("value-%d-%s", i, strings.Repeat("x", rng.Intn(200))))}}
	case p < 75:
		a, b := key(), key()
		if string(a) > string(b) {
			a, b = b, a
		}
		return &pb.InternalRaftRequest{DeleteRange: &pb.DeleteRangeRequest{Key: a, RangeEnd: append(b, 0)}}
	case p < 95:
		k := key()
		return &pb.InternalRaftRequest{Txn: &pb.TxnRequest{
			Compare: []*pb.Compare{{Key: k, Target: pb.Compare_VERSION, Result: pb.Compare_GREATER, TargetUnion: &pb.Compare_Version{Version: 1}}},
			Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: k, Value: []byte("txn-ok")}}}},
			Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: key(), Value: []byte("txn-fail")}}}},
		}}
	default:
		// Compact to a revision derived from the index; early or stale
		// ones fail the same way on every replay.
		return &pb.InternalRaftRequest{Compaction: &pb.CompactionRequest{Revision: int64(i) / 2}}
	}
}

// applyRequest applies one request as the server's apply loop will.
func applyRequest(s *Store, i uint64, r *pb.InternalRaftRequest) {
	switch {
	case r.Put != nil:
		_, _ = s.Put(i, 1, r.Put)
	case r.DeleteRange != nil:
		_, _ = s.DeleteRange(i, 1, r.DeleteRange)
	case r.Txn != nil:
		_, _ = s.Txn(i, 1, r.Txn)
	case r.Compaction != nil:
		_, _, _ = s.Compact(i, 1, r.Compaction)
	}
}

// applyUpTo applies indexes after the store's consistent index up to n:
// the raft layer's replay.
func applyUpTo(s *Store, n uint64) {
	for i := s.ConsistentIndex() + 1; i <= n; i++ {
		applyRequest(s, i, requestAt(i))
	}
}

// TestCrashDuringApply SIGKILLs a child applying the workload at random
// moments (mid-batch: the backend commits every few milliseconds), replays
// from the recovered consistent index each time, and finally compares
// HashKV with a store that never crashed.
func TestCrashDuringApply(t *testing.T) {
	if os.Getenv(crashChildEnv) != "" {
		t.Skip("child mode")
	}
	seed := testSeed(t)
	rng := rand.New(rand.NewSource(seed))
	dir := t.TempDir()
	path := filepath.Join(dir, "db")
	kills := 30
	if testing.Short() {
		kills = 10
	}
	onBase := 0
	for k := 0; k < kills; k++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$")
		cmd.Env = append(os.Environ(), crashChildEnv+"=apply:"+path)
		out, _ := cmd.StdoutPipe()
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Kill after the child has applied a random number of entries,
		// at a random moment inside the next few milliseconds: usually in
		// the middle of a backend batch.
		sc := bufio.NewScanner(out)
		threshold := uint64(0)
		for sc.Scan() {
			line := sc.Text()
			if v, ok := strings.CutPrefix(line, "started "); ok {
				start, _ := strconv.ParseUint(v, 10, 64)
				threshold = start + 20 + uint64(rng.Intn(180))
				continue
			}
			if v, ok := strings.CutPrefix(line, "applied "); ok {
				if n, _ := strconv.ParseUint(v, 10, 64); n >= threshold {
					time.Sleep(time.Duration(rng.Int63n(int64(3 * time.Millisecond))))
					break
				}
			}
		}
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		check := openTestStore(t, path, crashStoreConfig(path))
		checkRevMeta(t, check)
		checkIndexRecords(t, check)
		if check.s.index().Base() != nil {
			onBase++
		}
		ci := check.s.ConsistentIndex()
		check.close()
		if ci >= crashTotal {
			t.Fatalf("kill %d: the child finished before it was killed", k)
		}
	}
	if onBase*2 < kills {
		t.Fatalf("only %d of %d reopens after a kill used the index base", onBase, kills)
	}
	ts := openTestStore(t, path, crashStoreConfig(path))
	checkRevMeta(t, ts) // as the kills left it
	recovered := ts.s.ConsistentIndex()
	applyUpTo(ts.s, crashTotal)
	<-ts.s.compactor.idle()
	got, gotRev, err := ts.s.HashKV(0)
	if err != nil {
		t.Fatal(err)
	}
	ts.close()

	ref := openTestStore(t, filepath.Join(dir, "ref"), StoreConfig{})
	applyUpTo(ref.s, crashTotal)
	<-ref.s.compactor.idle()
	want, wantRev, err := ref.s.HashKV(0)
	if err != nil {
		t.Fatal(err)
	}
	ref.close()
	if got != want || gotRev != wantRev {
		t.Fatalf("after %d kills: HashKV %+v rev %d, uncrashed store %+v rev %d", kills, got, gotRev, want, wantRev)
	}
	t.Logf("%d kills (%d reopens on an index base); last recovered consistent index %d; HashKV %08x at revision %d matches", kills, onBase, recovered, got.Hash, gotRev)
}

// TestCrashMidCompaction kills a child while a compaction with tiny
// batches deletes records, reopens (which resumes it), and checks the end
// state equals an uninterrupted compaction: same HashKV, same records.
func TestCrashMidCompaction(t *testing.T) {
	if os.Getenv(crashChildEnv) != "" {
		t.Skip("child mode")
	}
	seed := testSeed(t)
	rng := rand.New(rand.NewSource(seed))
	dir := t.TempDir()
	build := func(path string) {
		ts := openTestStore(t, path, crashStoreConfig(path))
		for i := uint64(1); i <= 3000; i++ {
			r := requestAt(i)
			if r.Compaction != nil {
				r = &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("c"), Value: []byte("v")}}
			}
			applyRequest(ts.s, i, r)
		}
		ts.close()
	}
	path, ref := filepath.Join(dir, "db"), filepath.Join(dir, "ref")
	build(path)
	build(ref)

	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$")
	cmd.Env = append(os.Environ(), crashChildEnv+"=compact:"+path)
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	sc.Scan() // "started"
	time.Sleep(time.Duration(20+rng.Int63n(60)) * time.Millisecond)
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()

	ts := openTestStore(t, path, crashStoreConfig(path))
	if ts.s.index().Base() == nil {
		t.Fatal("the store did not reopen on its index base")
	}
	<-ts.s.compactor.idle() // the resumed compaction
	checkIndexRecords(t, ts)
	got, _, err := ts.s.HashKV(0)
	if err != nil {
		t.Fatal(err)
	}
	// Its hash missed what was deleted before the kill: not stored.
	if hs := ts.s.Hashes(); len(hs) != 0 {
		t.Fatalf("a resumed compaction stored a hash: %+v", hs)
	}
	gotRecs := recordKeys(t, ts)
	ts.close()

	rs := openTestStore(t, ref, StoreConfig{CompactBatch: 7})
	_, done, err := rs.s.Compact(3001, 1, &pb.CompactionRequest{Revision: compactTarget})
	if err != nil {
		t.Fatal(err)
	}
	<-done
	want, _, _ := rs.s.HashKV(0)
	wantRecs := recordKeys(t, rs)
	rs.close()
	if got != want {
		t.Fatalf("HashKV after resumed compaction %+v, uninterrupted %+v", got, want)
	}
	if gotRecs != wantRecs {
		t.Fatalf("record sets differ: %d vs %d records", strings.Count(gotRecs, "\n"), strings.Count(wantRecs, "\n"))
	}
	t.Logf("compaction at %d resumed after kill; %d records remain, hash %08x", compactTarget, strings.Count(gotRecs, "\n"), got.Hash)
}

const compactTarget = 1500

// crashStoreConfig keeps an index base, written every 50 records, so
// kills land in the middle of writing one too, and reopens open on one.
func crashStoreConfig(path string) StoreConfig { return baseConfig(path, 50) }

func recordKeys(t *testing.T, ts *testStore) string {
	rd, err := ts.be.BeginRead()
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var b strings.Builder
	rd.ScanRevisions(0, 1<<62, func(r Revision, tomb bool, v []byte) bool {
		fmt.Fprintf(&b, "%v %v\n", r, tomb)
		return true
	})
	return b.String()
}

// TestCrashChild is the child process of the crash tests.
func TestCrashChild(t *testing.T) {
	mode, path, ok := strings.Cut(os.Getenv(crashChildEnv), ":")
	if !ok {
		t.Skip("only runs as a crash test's child")
	}
	switch mode {
	case "apply":
		ts := openTestStore(t, path, crashStoreConfig(path))
		start := ts.s.ConsistentIndex()
		fmt.Printf("started %d\n", start)
		for i := start + 1; i <= crashTotal; i++ {
			applyRequest(ts.s, i, requestAt(i))
			if i%20 == 0 {
				fmt.Printf("applied %d\n", i)
			}
		}
		ts.close()
	case "revmeta":
		// Stop for the kill after the commit the parent asked for.
		stopAt, _ := strconv.Atoi(os.Getenv(crashChildEnv + "_STOP"))
		revMetaBuildBatch = 50
		revMetaBuildHook = func(records int, done bool) {
			fmt.Printf("built %d\n", records)
			if records >= stopAt && !done {
				select {}
			}
		}
		ts := openTestStore(t, path, StoreConfig{})
		ts.close()
	case "compact":
		cfg := crashStoreConfig(path)
		cfg.CompactBatch = 7
		ts := openTestStore(t, path, cfg)
		_, done, err := ts.s.Compact(3001, 1, &pb.CompactionRequest{Revision: compactTarget})
		if err == nil {
			// The scheduled compaction must be durable before the parent
			// may kill: until then a kill undoes the request itself (raft
			// would apply it again), not the compaction this test is about.
			// On a loaded machine the kill came first.
			err = ts.s.Backend().ForceCommit()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		fmt.Println("started")
		<-done
		fmt.Println("finished " + strconv.Itoa(compactTarget))
		ts.close()
	}
}
