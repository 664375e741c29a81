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

// TestHashKVDuringCompaction: HashKV at one revision, taken over and over
// while compactions apply and delete, gives one hash per compact
// revision. A HashKV that read the compact revision before a compaction
// applied but opened its view after the deletion began would hash fewer
// records under the old compact revision: a second hash for it, which a
// peer's corruption check would take for corruption.
func TestHashKVDuringCompaction(t *testing.T) {
	ts := openTestStore(t, filepath.Join(t.TempDir(), "db"), StoreConfig{CompactBatch: 3, CompactPause: 1})
	defer ts.close()
	i := uint64(0)
	for k := 0; k < 3000; k++ {
		i++
		applyRequest(ts.s, i, &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte{'k', byte(k % 7)}, Value: []byte("v")}})
	}
	at := ts.s.Rev()
	stop := make(chan struct{})
	seen := map[int64]map[uint32]int{}
	var hashErr error
	hashed := make(chan struct{})
	go func() {
		defer close(hashed)
		for {
			select {
			case <-stop:
				return
			default:
			}
			h, _, err := ts.s.HashKV(at)
			if err != nil {
				hashErr = err
				return
			}
			if seen[h.CompactRevision] == nil {
				seen[h.CompactRevision] = map[uint32]int{}
			}
			seen[h.CompactRevision][h.Hash]++
		}
	}()
	for c := int64(100); c < at-100; c += 97 {
		i++
		_, done, err := ts.s.Compact(i, 1, &pb.CompactionRequest{Revision: c})
		if err != nil {
			t.Fatal(err)
		}
		<-done
	}
	close(stop)
	<-hashed
	if hashErr != nil {
		t.Fatal(hashErr)
	}
	n := 0
	for c, hs := range seen {
		if len(hs) != 1 {
			t.Errorf("compact revision %d: %d different hashes of revision %d: %v", c, len(hs), at, hs)
		}
		for _, k := range hs {
			n += k
		}
	}
	t.Logf("%d hashes of revision %d over %d compact revisions, one hash each", n, at, len(seen))
}
