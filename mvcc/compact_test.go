package mvcc

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// TestCompactionDeletesGarbage applies a workload of puts, range
// deletes, txns and compactions, with reopens between, and checks each
// compaction against what etcd's compaction does, computed before it
// from the records themselves: afterwards the key bucket holds exactly
// the records above the revision, those at or below it that the index
// keeps (Keep) and a tombstone at exactly the revision, and the compaction's stored hash is HashKV at its
// revision, read from the records just before it.
func TestCompactionDeletesGarbage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	cfg := StoreConfig{CompactBatch: 11, CompactPause: 1}
	ts := openTestStore(t, path, cfg)
	defer func() { ts.close() }()
	total := uint64(crashTotal)
	if testing.Short() {
		total /= 2
	}
	compactions, deleted, hashed := 0, 0, 0
	for i := uint64(1); i <= total; i++ {
		r := requestAt(i)
		if r.Compaction == nil {
			applyRequest(ts.s, i, r)
			continue
		}
		rev := r.Compaction.Revision
		if rev <= ts.s.CompactRev() || rev > ts.s.Rev() {
			applyRequest(ts.s, i, r)
			continue
		}
		<-ts.s.compactor.idle()
		keep := ts.s.index().Keep(rev)
		var want strings.Builder
		records := recordKeys(t, ts)
		n := strings.Count(records, "\n")
		for _, line := range strings.SplitAfter(records, "\n") {
			var main, sub int64
			var tomb bool
			if _, err := fmt.Sscanf(line, "%d.%d %t", &main, &sub, &tomb); err != nil {
				continue
			}
			// A tombstone at exactly the revision stays (etcd since
			// 3.5.16), though the hash leaves it out (Keep).
			if _, ok := keep[Revision{Main: main, Sub: sub}]; ok || main > rev || main == rev && tomb {
				want.WriteString(line)
			}
		}
		before, _, err := ts.s.HashKV(rev)
		if err != nil {
			t.Fatal(err)
		}
		stored := len(ts.s.Hashes())
		_, done, err := ts.s.Compact(i, 1, &pb.CompactionRequest{Revision: rev})
		if err != nil {
			t.Fatal(err)
		}
		<-done
		compactions++
		got := recordKeys(t, ts)
		if got != want.String() {
			t.Fatalf("index %d: compaction at %d left %d records; etcd's compaction keeps %d:\n%s",
				i, rev, strings.Count(got, "\n"), strings.Count(want.String(), "\n"), lineDiff(got, want.String()))
		}
		deleted += n - strings.Count(got, "\n")
		if hs := ts.s.Hashes(); len(hs) > stored || len(hs) == compactHashesKept {
			if h := hs[len(hs)-1]; h.Revision == rev {
				hashed++
				if h != before {
					t.Fatalf("index %d: compaction at %d stored hash %+v; HashKV before it gave %+v", i, rev, h, before)
				}
			}
		}
		if compactions%25 == 0 {
			ts.close()
			ts = openTestStore(t, path, cfg)
		}
	}
	if deleted == 0 || hashed < compactions/2 {
		t.Fatalf("%d compactions deleted %d records and stored %d hashes: the workload does not exercise compaction", compactions, deleted, hashed)
	}
	t.Logf("%d compactions deleted %d records and stored %d hashes, each as etcd's compaction would", compactions, deleted, hashed)
}

// lineDiff lists the lines only one of a and b has.
func lineDiff(a, b string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	ma, mb := in(a), in(b)
	var d strings.Builder
	for l := range ma {
		if !mb[l] {
			fmt.Fprintf(&d, "+ %s\n", l)
		}
	}
	for l := range mb {
		if !ma[l] {
			fmt.Fprintf(&d, "- %s\n", l)
		}
	}
	return d.String()
}

// TestCompactionCommitsInParts: a compaction commits its deletes at most
// compactCommitRecords at a time, however many records a batch
// (--compaction-batch-limit) holds, and leaves only what it keeps: the
// last of a key's 8 × compactCommitRecords + 1 puts, in both buckets.
func TestCompactionCommitsInParts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	ts := openTestStore(t, path, StoreConfig{CompactBatch: 4 * compactCommitRecords, CompactPause: 1})
	defer func() { ts.close() }()
	const garbage = 8 * compactCommitRecords
	ci := uint64(0)
	for i := 0; i <= garbage; i++ {
		ci++
		if _, err := ts.s.Put(ci, 1, &pb.PutRequest{Key: []byte("k"), Value: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	before := ts.db.Stats().Commits
	ci++
	_, done, err := ts.s.Compact(ci, 1, &pb.CompactionRequest{Revision: ts.s.Rev()})
	if err != nil {
		t.Fatal(err)
	}
	<-done
	// The commit before the deletes and the one of the finished
	// revision may each be one more; the deletes alone take eight.
	if commits := ts.db.Stats().Commits - before; commits < garbage/compactCommitRecords {
		t.Errorf("%d garbage records deleted in %d commits, want at least %d (at most %d a commit)", garbage, commits, garbage/compactCommitRecords, compactCommitRecords)
	}
	for _, b := range [][]byte{KeyBucket, RevMetaBucket} {
		n := strings.Count(bucketDump(t, ts, b), "\n")
		if bytes.Equal(b, RevMetaBucket) {
			n-- // its completeness marker
		}
		if n != 1 {
			t.Errorf("bucket %s holds %d records after the compaction, want 1 (the last put)", b, n)
		}
	}
	resp, err := ts.s.Range(&pb.RangeRequest{Key: []byte("k")})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != fmt.Sprint(garbage) || resp.Kvs[0].Version != garbage+1 {
		t.Errorf("after the compaction k reads %v, want its last put (value %d, version %d)", resp.Kvs, garbage, garbage+1)
	}
}
