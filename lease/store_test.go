package lease

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/strata-db/strata/mvcc"
)

func (e *env) put(key string, lease int64) error {
	e.t.Helper()
	_, err := e.store.Put(e.next(), 1, &pb.PutRequest{Key: []byte(key), Value: []byte("v"), Lease: lease})
	return err
}

func (e *env) mustPut(key string, lease int64) {
	e.t.Helper()
	if err := e.put(key, lease); err != nil {
		e.t.Fatalf("put %s lease %d: %v", key, lease, err)
	}
}

func (e *env) del(key string) {
	e.t.Helper()
	if _, err := e.store.DeleteRange(e.next(), 1, &pb.DeleteRangeRequest{Key: []byte(key)}); err != nil {
		e.t.Fatal(err)
	}
}

// keysOf returns the keys attached to lease id, as TimeToLive reports them.
func (e *env) keysOf(id int64) []string {
	e.t.Helper()
	primary := e.le.IsPrimary()
	if !primary {
		e.le.Promote(0)
		defer e.le.Demote()
	}
	info, err := e.le.TimeToLive(id, true)
	if err != nil {
		e.t.Fatalf("TimeToLive(%d): %v", id, err)
	}
	var ks []string
	for _, k := range info.Keys {
		ks = append(ks, string(k))
	}
	return ks
}

// rangeAt returns the keys live at rev ("" to end of keyspace).
func (e *env) rangeAt(rev int64) []string {
	e.t.Helper()
	resp, err := e.store.Range(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Revision: rev})
	if err != nil {
		e.t.Fatal(err)
	}
	var ks []string
	for _, kv := range resp.Kvs {
		ks = append(ks, string(kv.Key))
	}
	return ks
}

func TestKeysFollowPutsAndDeletes(t *testing.T) {
	e := newEnv(t, Config{})
	e.grant(1, 60)
	e.grant(2, 60)
	e.mustPut("a", 1)
	e.mustPut("b", 1)
	e.mustPut("c", 2)
	e.mustPut("free", 0)
	if err := e.put("x", 3); !errors.Is(err, ErrLeaseNotFound) {
		t.Fatalf("put with an unknown lease: %v, want ErrLeaseNotFound", err)
	}
	if got := e.keysOf(1); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("lease 1 keys %v, want [a b]", got)
	}
	e.mustPut("b", 2) // moves b to lease 2
	e.mustPut("c", 0) // c leaves its lease
	e.del("a")
	if got := e.keysOf(1); len(got) != 0 {
		t.Fatalf("lease 1 keys %v after moving b and deleting a, want none", got)
	}
	if got := e.keysOf(2); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("lease 2 keys %v, want [b]", got)
	}
}

func TestRevokeDeletesKeysInOneRevision(t *testing.T) {
	e := newEnv(t, Config{})
	var events [][]mvcc.Event
	e.store.Close()
	st, err := mvcc.OpenStore(e.be, mvcc.StoreConfig{Leases: e.le, OnEvents: func(_ int64, evs []mvcc.Event) {
		events = append(events, evs)
	}})
	if err != nil {
		t.Fatal(err)
	}
	e.store = st
	e.grant(1, 60)
	e.grant(2, 60)
	for _, k := range []string{"k3", "k1", "k2"} {
		e.mustPut(k, 1)
	}
	e.mustPut("other", 2)
	e.mustPut("k4", 1)
	e.mustPut("k4", 0) // detached again: must survive the revoke
	before := e.store.Rev()
	events = nil

	rev, err := e.le.RevokeAndDelete(e.next(), 1, 1, e.store)
	if err != nil {
		t.Fatal(err)
	}
	if rev != before+1 || e.store.Rev() != rev {
		t.Fatalf("revoke made revision %d (store at %d), want one revision: %d", rev, e.store.Rev(), before+1)
	}
	if got := e.rangeAt(0); !slices.Equal(got, []string{"k4", "other"}) {
		t.Fatalf("keys after revoke %v, want [k4 other]", got)
	}
	if got := e.rangeAt(before); !slices.Equal(got, []string{"k1", "k2", "k3", "k4", "other"}) {
		t.Fatalf("keys at the revision before the revoke %v", got)
	}
	if len(events) != 1 || len(events[0]) != 3 {
		t.Fatalf("revoke produced %d event batches (%v), want one batch of 3 deletes", len(events), events)
	}
	for i, ev := range events[0] {
		if want := fmt.Sprintf("k%d", i+1); ev.Type != mvccpb.Event_DELETE || string(ev.KV.Key) != want || ev.KV.ModRevision != rev {
			t.Errorf("event %d = %v %s@%d, want DELETE %s@%d", i, ev.Type, ev.KV.Key, ev.KV.ModRevision, want, rev)
		}
	}
	if e.le.Exists(1) {
		t.Fatal("lease 1 exists after revoke")
	}
	if got := e.keysOf(2); !slices.Equal(got, []string{"other"}) {
		t.Fatalf("lease 2 keys %v, want [other]", got)
	}

	// A lease with no keys revokes without a new revision; an unknown one
	// fails, and both still record their raft index.
	e.grant(3, 60)
	if rev, err := e.le.RevokeAndDelete(e.next(), 1, 3, e.store); err != nil || rev != before+1 {
		t.Fatalf("revoke of an empty lease = %d, %v; want %d", rev, err, before+1)
	}
	if _, err := e.le.RevokeAndDelete(e.next(), 1, 1, e.store); !errors.Is(err, ErrLeaseNotFound) {
		t.Fatalf("second revoke: %v, want ErrLeaseNotFound", err)
	}
	if err := e.be.ForceCommit(); err != nil {
		t.Fatal(err)
	}
	if got := e.be.ConsistentIndex(); got != e.ci {
		t.Fatalf("consistent index %d, want %d", got, e.ci)
	}

	// The revoked leases' records are gone from the page store.
	e.reopen()
	if got := e.le.Leases(); !slices.Equal(got, []int64{2}) {
		t.Fatalf("leases after reopen %v, want [2]", got)
	}
	if got := e.rangeAt(0); !slices.Equal(got, []string{"k4", "other"}) {
		t.Fatalf("keys after reopen %v", got)
	}
}

func TestPersistAcrossReopen(t *testing.T) {
	e := newEnv(t, Config{MinTTL: 2})
	e.grant(10, 100)
	e.grant(20, 1) // raised to 2
	e.grant(30, 50)
	e.mustPut("a", 10)
	e.mustPut("b", 10)
	e.mustPut("c", 30)
	if _, err := e.le.RevokeAndDelete(e.next(), 1, 30, e.store); err != nil {
		t.Fatal(err)
	}
	e.mustPut("d", 20)
	e.del("d")
	ci := e.ci

	e.cfg.MinTTL = 5 // a longer election timeout after restart raises TTLs
	e.reopen()
	if e.be.ConsistentIndex() != ci {
		t.Fatalf("consistent index %d after reopen, want %d", e.be.ConsistentIndex(), ci)
	}
	if got := e.le.Leases(); !slices.Equal(got, []int64{10, 20}) {
		t.Fatalf("leases after reopen %v, want [10 20]", got)
	}
	for id, ttl := range map[int64]int64{10: 100, 20: 5} {
		info, ok := e.le.Lookup(id)
		if !ok || info.TTL != ttl || info.Remaining != Forever {
			t.Errorf("lease %d after reopen = %+v, want TTL %d and no clock", id, info, ttl)
		}
	}
	if got := e.keysOf(10); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("lease 10 keys after reopen %v, want [a b]", got)
	}
	if got := e.keysOf(20); len(got) != 0 {
		t.Fatalf("lease 20 keys after reopen %v, want none", got)
	}
	if _, err := e.le.Grant(e.next(), 1, 10, 5); !errors.Is(err, ErrLeaseExists) {
		t.Fatalf("grant of a recovered ID: %v, want ErrLeaseExists", err)
	}
}

// A crash loses the writes after the last commit; replaying the same
// entries from the WAL must rebuild the same leases and keys, because
// every lease write shares its commit with its consistent index.
func TestReplayAfterCrash(t *testing.T) {
	e := newEnv(t, Config{})
	type op func(ci uint64)
	g := func(id, ttl int64) op {
		return func(ci uint64) { _, _ = e.le.Grant(ci, 1, id, ttl) }
	}
	p := func(k string, id int64) op {
		return func(ci uint64) { _, _ = e.store.Put(ci, 1, &pb.PutRequest{Key: []byte(k), Lease: id}) }
	}
	r := func(id int64) op {
		return func(ci uint64) { _, _ = e.le.RevokeAndDelete(ci, 1, id, e.store) }
	}
	ops := []op{g(1, 60), p("a", 1), g(2, 60), p("b", 2), p("c", 1), r(1), g(3, 60), p("d", 3), r(2), p("e", 3)}
	const committed = 4 // entries 1..4 reach the page store before the crash
	for i, o := range ops {
		o(uint64(i + 1))
		if i+1 == committed {
			if err := e.be.ForceCommit(); err != nil {
				t.Fatal(err)
			}
		}
	}
	wantLeases, wantKeys := e.le.Leases(), e.rangeAt(0)

	// Crash: close the page store without committing the batch. The
	// backend's committer is left behind, blocked on its hour-long ticker.
	e.le.Stop()
	if err := e.db.Close(); err != nil {
		t.Fatal(err)
	}
	e.db = nil
	e.open()
	if got := e.be.ConsistentIndex(); got != committed {
		t.Fatalf("consistent index after crash %d, want %d", got, committed)
	}
	if got := e.le.Leases(); !slices.Equal(got, []int64{1, 2}) {
		t.Fatalf("leases after crash %v, want the committed [1 2]", got)
	}
	for i := committed; i < len(ops); i++ {
		ops[i](uint64(i + 1))
	}
	if got := e.le.Leases(); !slices.Equal(got, wantLeases) {
		t.Fatalf("leases after replay %v, want %v", got, wantLeases)
	}
	if got := e.rangeAt(0); !slices.Equal(got, wantKeys) {
		t.Fatalf("keys after replay %v, want %v", got, wantKeys)
	}
	if got := e.keysOf(3); !slices.Equal(got, []string{"d", "e"}) {
		t.Fatalf("lease 3 keys after replay %v, want [d e]", got)
	}
}
