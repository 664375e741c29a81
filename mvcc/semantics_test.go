package mvcc

import (
	"errors"
	"path/filepath"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

type fakeLeases map[int64]map[string]bool

func (f fakeLeases) Exists(id int64) bool { _, ok := f[id]; return ok }
func (f fakeLeases) Attach(id int64, key []byte) {
	if f[id] != nil {
		f[id][string(key)] = true
	}
}
func (f fakeLeases) Detach(id int64, key []byte) { delete(f[id], string(key)) }

func TestEtcdSemantics(t *testing.T) {
	leases := fakeLeases{7: {}}
	var events []Event
	var eventRevs []int64
	ts := openTestStore(t, filepath.Join(t.TempDir(), "db"), StoreConfig{Leases: leases,
		OnEvents: func(rev int64, evs []Event) {
			eventRevs = append(eventRevs, rev)
			events = append(events, evs...)
		}})
	defer ts.close()
	s := ts.s
	ci := uint64(0)
	put := func(k, v string, lease int64) *pb.PutResponse {
		ci++
		r, err := s.Put(ci, 2, &pb.PutRequest{Key: []byte(k), Value: []byte(v), Lease: lease})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	get := func(k string) *mvccpb.KeyValue {
		r, err := s.Range(&pb.RangeRequest{Key: []byte(k)})
		if err != nil || len(r.Kvs) != 1 {
			t.Fatalf("get %q: %v %v", k, r, err)
		}
		return r.Kvs[0]
	}
	put("a", "1", 0) // rev 2
	put("a", "2", 7) // rev 3
	if kv := get("a"); kv.Version != 2 || kv.CreateRevision != 2 || kv.ModRevision != 3 || kv.Lease != 7 {
		t.Fatalf("after two puts: %v", kv)
	}
	if !leases[7]["a"] {
		t.Fatal("lease not attached")
	}
	// Keys-only reads come from the index, as etcd 3.7's do: no value and
	// no lease, for a single key and a range, in a read and in a txn;
	// sorted by value they read the values, and keep the lease.
	for _, r := range []*pb.RangeRequest{
		{Key: []byte("a"), KeysOnly: true},
		{Key: []byte("a"), RangeEnd: []byte("b"), KeysOnly: true},
		{Key: []byte("a"), RangeEnd: []byte("b"), KeysOnly: true, Limit: 1, SortTarget: pb.RangeRequest_MOD, SortOrder: pb.RangeRequest_DESCEND},
	} {
		resp, err := s.Range(r)
		if err != nil || len(resp.Kvs) != 1 || resp.Count != 1 {
			t.Fatalf("keys-only %v: %v %v", r, resp, err)
		}
		if kv := resp.Kvs[0]; string(kv.Key) != "a" || kv.Value != nil || kv.Lease != 0 || kv.Version != 2 || kv.CreateRevision != 2 || kv.ModRevision != 3 {
			t.Fatalf("keys-only %v: %v", r, kv)
		}
		txn, err := s.ReadTxn(&pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: r}}}})
		if err != nil {
			t.Fatal(err)
		}
		if kv := txn.Responses[0].GetResponseRange().Kvs[0]; kv.Lease != 0 || kv.Value != nil || kv.ModRevision != 3 {
			t.Fatalf("keys-only in a txn %v: %v", r, kv)
		}
	}
	if resp, err := s.Range(&pb.RangeRequest{Key: []byte("a"), KeysOnly: true, SortTarget: pb.RangeRequest_VALUE}); err != nil || resp.Kvs[0].Lease != 7 || resp.Kvs[0].Value != nil {
		t.Fatalf("keys-only sorted by value: %v %v", resp, err)
	}
	ci++
	if d, _ := s.DeleteRange(ci, 2, &pb.DeleteRangeRequest{Key: []byte("zzz")}); d.Deleted != 0 || d.Header.Revision != 3 {
		t.Fatalf("delete of nothing moved the revision: %v", d)
	}
	ci++
	if d, _ := s.DeleteRange(ci, 2, &pb.DeleteRangeRequest{Key: []byte("a")}); d.Deleted != 1 || d.Header.Revision != 4 {
		t.Fatalf("delete: %v", d)
	}
	if leases[7]["a"] {
		t.Fatal("lease still attached after delete")
	}
	put("a", "3", 0) // rev 5: new generation
	if kv := get("a"); kv.Version != 1 || kv.CreateRevision != 5 {
		t.Fatalf("re-created key: %v", kv)
	}
	// Historical reads: inside the tombstone gap nothing, before it v2.
	if r, _ := s.Range(&pb.RangeRequest{Key: []byte("a"), Revision: 4}); len(r.Kvs) != 0 || r.Header.Revision != 5 {
		t.Fatalf("read at tombstone: %v", r)
	}
	if r, _ := s.Range(&pb.RangeRequest{Key: []byte("a"), Revision: 3}); string(r.Kvs[0].Value) != "2" {
		t.Fatalf("read at 3: %v", r)
	}
	// ignore_value on a missing key, and an unknown lease, fail without
	// moving the revision but still advance the consistent index.
	ci++
	if _, err := s.Put(ci, 2, &pb.PutRequest{Key: []byte("nope"), IgnoreValue: true}); !errors.Is(err, ErrKeyNotFound) {
		t.Fatalf("ignore_value on missing key: %v", err)
	}
	ci++
	if _, err := s.Put(ci, 2, &pb.PutRequest{Key: []byte("b"), Value: []byte("x"), Lease: 99}); !errors.Is(err, ErrLeaseNotFound) {
		t.Fatalf("unknown lease: %v", err)
	}
	if s.Rev() != 5 {
		t.Fatalf("failed requests moved the revision to %d", s.Rev())
	}
	// A read-only txn and a failed txn that only reads do not move it.
	ci++
	tr, err := s.Txn(ci, 2, &pb.TxnRequest{
		Compare: []*pb.Compare{{Key: []byte("a"), Target: pb.Compare_VALUE, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Value{Value: []byte("nomatch")}}},
		Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("x"), Value: []byte("y")}}}},
		Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("a")}}}},
	})
	if err != nil || tr.Succeeded || tr.Header.Revision != 5 || s.Rev() != 5 {
		t.Fatalf("failed read-only branch: %v %v rev %d", tr, err, s.Rev())
	}
	// Compaction errors.
	ci++
	if _, _, err := s.Compact(ci, 2, &pb.CompactionRequest{Revision: 6}); !errors.Is(err, ErrFutureRev) {
		t.Fatalf("compact future: %v", err)
	}
	ci++
	_, done, err := s.Compact(ci, 2, &pb.CompactionRequest{Revision: 4})
	if err != nil {
		t.Fatal(err)
	}
	<-done
	ci++
	if _, _, err := s.Compact(ci, 2, &pb.CompactionRequest{Revision: 4}); !errors.Is(err, ErrCompacted) {
		t.Fatalf("compact again: %v", err)
	}
	if _, err := s.Range(&pb.RangeRequest{Key: []byte("a"), Revision: 3}); !errors.Is(err, ErrCompacted) {
		t.Fatalf("read below compaction: %v", err)
	}
	if r, err := s.Range(&pb.RangeRequest{Key: []byte("a"), Revision: 4}); err != nil || len(r.Kvs) != 0 {
		t.Fatalf("read at compaction revision: %v %v", r, err)
	}
	// Events: one per change, in revision order, deletes with their
	// revision as mod_revision.
	wantTypes := []mvccpb.Event_EventType{mvccpb.Event_PUT, mvccpb.Event_PUT, mvccpb.Event_DELETE, mvccpb.Event_PUT}
	if len(events) != len(wantTypes) {
		t.Fatalf("%d events, want %d", len(events), len(wantTypes))
	}
	for i, ev := range events {
		if ev.Type != wantTypes[i] || ev.KV.ModRevision != eventRevs[i] {
			t.Fatalf("event %d: %v rev %d", i, ev, eventRevs[i])
		}
	}
	if s.ConsistentIndex() > ci {
		t.Fatal("consistent index ahead of applied")
	}
	if err := s.Backend().ForceCommit(); err != nil {
		t.Fatal(err)
	}
	if s.ConsistentIndex() != ci {
		t.Fatalf("consistent index %d after commit, want %d", s.ConsistentIndex(), ci)
	}
}

// TestCompactToZeroSurvivesReopen: compacting to revision 0 is allowed on
// a store that never compacted (as in etcd), and after a reopen a second
// compaction to 0 is ErrCompacted. The reopen used to read the stored 0
// back as "never compacted".
func TestCompactToZeroSurvivesReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	ts := openTestStore(t, path, StoreConfig{})
	if _, err := ts.s.Put(1, 1, &pb.PutRequest{Key: []byte("a"), Value: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	_, done, err := ts.s.Compact(2, 1, &pb.CompactionRequest{Revision: 0})
	if err != nil {
		t.Fatalf("first compaction to 0: %v", err)
	}
	<-done
	ts.close()
	ts = openTestStore(t, path, StoreConfig{})
	defer ts.close()
	if got := ts.s.CompactRev(); got != 0 {
		t.Fatalf("compacted revision after reopen: %d, want 0", got)
	}
	if _, _, err := ts.s.Compact(3, 1, &pb.CompactionRequest{Revision: 0}); !errors.Is(err, ErrCompacted) {
		t.Fatalf("second compaction to 0: %v, want ErrCompacted", err)
	}
}
