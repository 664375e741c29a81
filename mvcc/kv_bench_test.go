package mvcc

import (
	"fmt"
	"path/filepath"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// Benchmarks of the store's request paths on a real page store, with the
// default batching (commits in the background, as in the server).

func benchStore(b *testing.B) *testStore {
	ts := openTestStore(b, filepath.Join(b.TempDir(), "db"), StoreConfig{})
	b.Cleanup(ts.close)
	return ts
}

func BenchmarkStorePut(b *testing.B) {
	ts := benchStore(b)
	val := make([]byte, 256)
	keys := make([][]byte, 10000)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("/registry/pods/default/pod-%05d", i))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := ts.s.Put(uint64(i+1), 1, &pb.PutRequest{Key: keys[i%len(keys)], Value: val}); err != nil {
			b.Fatal(err)
		}
	}
}

// fill writes 10000 keys, each twice, so old revisions exist.
func fill(b *testing.B, ts *testStore) int64 {
	val := make([]byte, 256)
	ci := uint64(0)
	for round := 0; round < 2; round++ {
		for i := 0; i < 10000; i++ {
			ci++
			ts.s.Put(ci, 1, &pb.PutRequest{Key: []byte(fmt.Sprintf("/registry/pods/default/pod-%05d", i)), Value: val})
		}
	}
	ts.be.ForceCommit()
	return ts.s.Rev()
}

func benchRange(b *testing.B, old bool) {
	ts := benchStore(b)
	rev := fill(b, ts)
	at := int64(0)
	if old {
		at = rev - 12000 // inside the first round of writes
	}
	req := &pb.RangeRequest{Key: []byte("/registry/pods/default/pod-01"), RangeEnd: []byte("/registry/pods/default/pod-02"), Revision: at}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		resp, err := ts.s.Range(req)
		if err != nil || len(resp.Kvs) != 1000 {
			b.Fatalf("range: %d kvs, %v", len(resp.GetKvs()), err)
		}
	}
	b.ReportMetric(float64(b.N*1000)/b.Elapsed().Seconds(), "keys/s")
}

func BenchmarkStoreRangeLatest(b *testing.B) { benchRange(b, false) }

func BenchmarkStoreRangeOldRevision(b *testing.B) { benchRange(b, true) }

func BenchmarkStoreTxn(b *testing.B) {
	ts := benchStore(b)
	fill(b, ts)
	val := make([]byte, 256)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		key := []byte(fmt.Sprintf("/registry/pods/default/pod-%05d", i%10000))
		r, err := ts.s.Range(&pb.RangeRequest{Key: key})
		if err != nil {
			b.Fatal(err)
		}
		mod := r.Kvs[0].ModRevision
		// The Kubernetes update: put if mod_revision is unchanged.
		resp, err := ts.s.Txn(uint64(100000+i), 1, &pb.TxnRequest{
			Compare: []*pb.Compare{{Key: key, Target: pb.Compare_MOD, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_ModRevision{ModRevision: mod}}},
			Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: key, Value: val}}}},
		})
		if err != nil || !resp.Succeeded {
			b.Fatalf("txn: %v %v", resp, err)
		}
	}
}
