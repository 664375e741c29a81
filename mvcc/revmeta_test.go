package mvcc

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/strata-db/strata/pagestore"
)

// bucketDump returns every key and value of bucket, one line each.
func bucketDump(t *testing.T, ts *testStore, bucket []byte) string {
	t.Helper()
	var b strings.Builder
	err := ts.db.View(func(tx *pagestore.Tx) error {
		bk, err := tx.Bucket(bucket)
		if err != nil {
			return err
		}
		return bk.ForEach(func(k, v []byte) error {
			if bytes.Equal(bucket, RevMetaBucket) && bytes.Equal(k, revMetaComplete) {
				// The marker's token is random, new with each build.
				if len(v) != 16 {
					return fmt.Errorf("the metadata's marker holds %x, not a 16-byte token", v)
				}
				v = []byte("token")
			}
			fmt.Fprintf(&b, "%x %x\n", k, v)
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// dropRevMeta makes path's store look like one written without the
// revision metadata: no bucket (remove) or a bucket without its marker.
func dropRevMeta(t *testing.T, path string, remove bool) {
	t.Helper()
	db, err := pagestore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *pagestore.Tx) error {
		if remove {
			return tx.DeleteBucket(RevMetaBucket)
		}
		mb, err := tx.Bucket(RevMetaBucket)
		if err != nil {
			return err
		}
		return mb.Delete(revMetaComplete)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// storeState is what a reopened store must agree on: its revisions, its
// leased keys, what a read sees at each revision it still serves, and
// HashKV.
func storeState(t *testing.T, ts *testStore) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "rev %d compact %d keys %d\n", ts.s.Rev(), ts.s.CompactRev(), ts.s.KeyCount())
	leased := keyLeases(ts)
	for _, k := range slices.Sorted(maps.Keys(leased)) {
		fmt.Fprintf(&b, "lease %q %d\n", k, leased[k])
	}
	for rev := max(ts.s.CompactRev(), 1); rev <= ts.s.Rev(); rev += 37 {
		r, err := ts.s.Range(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Revision: rev})
		if err != nil {
			t.Fatalf("range at %d: %v", rev, err)
		}
		for _, kv := range r.Kvs {
			fmt.Fprintf(&b, "@%d %s\n", rev, kv.String())
		}
	}
	h, _, err := ts.s.HashKV(0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&b, "hash %+v\n", h)
	return b.String()
}

// TestRevMetaBuild writes a workload (puts with and without leases,
// range deletes, txns, compactions) and checks that a store without its
// revision metadata (none, or without the marker: an older Strata's, a
// conversion from etcd's format, a build cut short) rebuilds it on open
// byte for byte as the writes and compactions maintained it, and opens
// to the same state.
func TestRevMetaBuild(t *testing.T) {
	saved := revMetaBuildBatch
	revMetaBuildBatch = 97 // many commits
	defer func() { revMetaBuildBatch = saved }()
	for _, remove := range []bool{true, false} {
		t.Run(fmt.Sprintf("remove-bucket=%v", remove), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "db")
			leases := fakeLeases{}
			for id := int64(1); id < 7; id++ {
				leases[id] = map[string]bool{}
			}
			cfg := StoreConfig{Leases: leases}
			ts := openTestStore(t, path, cfg)
			for i := uint64(1); i <= 3000; i++ {
				r := requestAt(i)
				if r.Put != nil && i%5 == 0 {
					r.Put.Lease = int64(i % 7)
				}
				applyRequest(ts.s, i, r)
			}
			for i := uint64(3001); i <= 3020; i++ { // keys that keep their leases
				applyRequest(ts.s, i, &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: fmt.Appendf(nil, "leased-%d", i), Value: []byte("v"), Lease: int64(1 + i%6)}})
			}
			if len(keyLeases(ts)) == 0 {
				t.Fatal("no key has a lease: the workload does not exercise them")
			}
			<-ts.s.compactor.idle()
			wantMeta := bucketDump(t, ts, RevMetaBucket)
			wantState := storeState(t, ts)
			ts.close()
			if n := strings.Count(wantMeta, "\n"); n < 1000 {
				t.Fatalf("only %d metadata entries: the workload wrote too little", n)
			}

			dropRevMeta(t, path, remove)
			ts = openTestStore(t, path, cfg)
			defer ts.close()
			if got := bucketDump(t, ts, RevMetaBucket); got != wantMeta {
				t.Fatalf("rebuilt metadata differs from the maintained one:\n%s", lineDiff(got, wantMeta))
			}
			checkRevMeta(t, ts)
			if got := storeState(t, ts); got != wantState {
				t.Fatalf("the reopened store differs:\n%s", lineDiff(got, wantState))
			}
		})
	}
}

// TestCrashDuringRevMetaBuild kills children building the revision
// metadata after a random number of the build's commits and checks that
// the next open finishes the build, with the same metadata and state as
// an uninterrupted one.
func TestCrashDuringRevMetaBuild(t *testing.T) {
	if os.Getenv(crashChildEnv) != "" {
		t.Skip("child mode")
	}
	seed := testSeed(t)
	rng := rand.New(rand.NewSource(seed))
	path := filepath.Join(t.TempDir(), "db")
	ts := openTestStore(t, path, StoreConfig{})
	applyUpTo(ts.s, crashTotal)
	<-ts.s.compactor.idle()
	wantMeta := bucketDump(t, ts, RevMetaBucket)
	wantState := storeState(t, ts)
	ts.close()
	records := strings.Count(wantMeta, "\n") - 1 // less the marker
	for k := 0; k < 6; k++ {
		dropRevMeta(t, path, k%2 == 0)
		stopAt := 50 * (1 + rng.Intn(records/50-1))
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$")
		cmd.Env = append(os.Environ(), crashChildEnv+"=revmeta:"+path, fmt.Sprintf("%s_STOP=%d", crashChildEnv, stopAt))
		out, _ := cmd.StdoutPipe()
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		for sc.Scan() && sc.Text() != fmt.Sprintf("built %d", stopAt) {
		}
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		if n := revMetaEntries(t, path); n != stopAt || revMetaMarked(t, path) {
			t.Fatalf("kill %d: the killed build left %d entries (marker: %v), want %d unmarked", k, n, revMetaMarked(t, path), stopAt)
		}
	}
	ts = openTestStore(t, path, StoreConfig{})
	defer ts.close()
	if got := bucketDump(t, ts, RevMetaBucket); got != wantMeta {
		t.Fatalf("metadata after interrupted builds differs:\n%s", lineDiff(got, wantMeta))
	}
	if got := storeState(t, ts); got != wantState {
		t.Fatalf("the store after interrupted builds differs:\n%s", lineDiff(got, wantState))
	}
	t.Logf("6 builds of %d records killed part-way; the next open completed the metadata", records)
}

// revMetaEntries counts path's metadata entries, revMetaMarked reports
// its marker.
func revMetaEntries(t *testing.T, path string) (n int) {
	t.Helper()
	viewRevMeta(t, path, func(mb *pagestore.Bucket) error {
		return mb.ForEach(func(k, v []byte) error { n++; return nil })
	})
	return n
}

func revMetaMarked(t *testing.T, path string) (marked bool) {
	t.Helper()
	viewRevMeta(t, path, func(mb *pagestore.Bucket) error {
		v, err := mb.Get(revMetaComplete)
		marked = v != nil
		return err
	})
	return marked
}

func viewRevMeta(t *testing.T, path string, fn func(*pagestore.Bucket) error) {
	t.Helper()
	db, err := pagestore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.View(func(tx *pagestore.Tx) error {
		mb, err := tx.Bucket(RevMetaBucket)
		if err != nil {
			return nil // none yet
		}
		return fn(mb)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// checkRevMeta fails t unless ts's metadata matches its records.
func checkRevMeta(t *testing.T, ts *testStore) {
	t.Helper()
	if err := ts.be.ForceCommit(); err != nil {
		t.Fatal(err)
	}
	if err := ts.db.View(CheckRevMeta); err != nil {
		t.Fatal(err)
	}
}

// TestCheckRevMeta: CheckRevMeta passes maintained metadata and names
// the revision of a missing, extra or different entry.
func TestCheckRevMeta(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	ts := openTestStore(t, path, StoreConfig{})
	applyUpTo(ts.s, 500)
	<-ts.s.compactor.idle()
	checkRevMeta(t, ts)
	ts.close()
	first := revKey(Revision{Main: 2}, false)
	for _, c := range []struct {
		name string
		edit func(mb *pagestore.Bucket) error
		want string
	}{
		{"missing", func(mb *pagestore.Bucket) error {
			k, _ := mb.Cursor().First()
			first = bytes.Clone(k)
			return mb.Delete(k)
		}, "no metadata for the record"},
		{"different", func(mb *pagestore.Bucket) error {
			k, v := mb.Cursor().First()
			first = bytes.Clone(k)
			v = bytes.Clone(v)
			v[0] ^= 1
			return mb.Put(bytes.Clone(k), v)
		}, "does not match its record"},
		{"extra", func(mb *pagestore.Bucket) error {
			first = revKey(Revision{Main: 1 << 40}, false)
			return mb.Put(first, []byte{0, 0, 0, 0, 0, 0, 0, 0})
		}, "which has no record"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cp := filepath.Join(t.TempDir(), "db")
			copyFile(t, path, cp)
			db, err := pagestore.Open(cp, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if err := db.Update(func(tx *pagestore.Tx) error {
				mb, err := tx.Bucket(RevMetaBucket)
				if err != nil {
					return err
				}
				return c.edit(mb)
			}); err != nil {
				t.Fatal(err)
			}
			err = db.View(CheckRevMeta)
			r, _, _ := parseRevKey(first)
			if err == nil || !errors.Is(err, pagestore.ErrCorrupt) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), r.String()) {
				t.Fatalf("CheckRevMeta: %v; want ErrCorrupt naming revision %v: %q", err, r, c.want)
			}
		})
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// keyLeases is the store's leased keys.
func keyLeases(ts *testStore) map[string]int64 {
	m := map[string]int64{}
	ts.s.index().LeasedKeys(func(k []byte, l int64) bool {
		m[string(k)] = l
		return true
	})
	return m
}

// checkIndexRecords checks that every revision the store's index holds
// has its record in the page store: an index opened on a base (with the
// finished compaction redone) holds no revision a compaction deleted.
// It waits for compactions to finish: one interrupted by a crash may
// have deleted records of the base's that it drops when it resumes
// (reads below its revision are refused meanwhile).
func checkIndexRecords(t *testing.T, ts *testStore) {
	t.Helper()
	<-ts.s.compactor.idle()
	if err := ts.be.ForceCommit(); err != nil {
		t.Fatal(err)
	}
	recs := map[Revision]bool{}
	rd, err := ts.be.BeginRead()
	if err != nil {
		t.Fatal(err)
	}
	err = rd.ScanRevisions(0, 1<<62, func(r Revision, _ bool, _ []byte) bool {
		recs[r] = true
		return true
	})
	rd.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range ts.s.index().RangeSince([]byte{0}, []byte{0}, 0) {
		if !recs[r] {
			t.Fatalf("the index holds revision %v, which has no record", r)
		}
	}
}
