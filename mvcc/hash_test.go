package mvcc

import (
	"path/filepath"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// TestCompactionHash checks the hash a compaction computes as it deletes
// (etcd's compaction hash): it must equal HashKV at the compaction's
// revision taken just before the compaction was applied (so members that
// compacted at the same revision agree, whatever their batch sizes), be
// stored, and be what HashKV returns for that revision afterwards, as
// etcd's HashByRev does. Two compactions in a row are checked, the second
// one hashing against the first one's revision, with batches small
// enough that each spans many commits.
func TestCompactionHash(t *testing.T) {
	ts := openTestStore(t, filepath.Join(t.TempDir(), "db"), StoreConfig{CompactBatch: 5, CompactPause: 1})
	defer ts.close()
	i := uint64(0)
	apply := func(n int) {
		for k := 0; k < n; k++ {
			i++
			r := requestAt(i)
			if r.Compaction != nil {
				r = &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("c"), Value: []byte("v")}}
			}
			applyRequest(ts.s, i, r)
		}
	}
	var want []KeyValueHash
	for round := 0; round < 3; round++ {
		apply(300)
		rev := ts.s.Rev() - 50
		before, _, err := ts.s.HashKV(rev)
		if err != nil {
			t.Fatal(err)
		}
		i++
		_, done, err := ts.s.Compact(i, 1, &pb.CompactionRequest{Revision: rev})
		if err != nil {
			t.Fatal(err)
		}
		apply(20) // writes while the compaction runs are not in its hash
		<-done
		want = append(want, before)
		got := ts.s.Hashes()
		if len(got) != len(want) {
			t.Fatalf("round %d: %d stored hashes, want %d: %+v", round, len(got), len(want), got)
		}
		for j := range want {
			if got[j] != want[j] {
				t.Fatalf("round %d: stored hash %d is %+v; HashKV before the compaction gave %+v", round, j, got[j], want[j])
			}
		}
		after, _, err := ts.s.HashKV(rev)
		if err != nil {
			t.Fatal(err)
		}
		if after != before {
			t.Fatalf("round %d: HashKV(%d) after the compaction %+v, the stored hash is %+v", round, rev, after, before)
		}
		if round > 0 && before.CompactRevision != want[round-1].Revision {
			t.Fatalf("round %d: the hash's compact revision is %d, the previous compaction was at %d", round, before.CompactRevision, want[round-1].Revision)
		}
	}
}
