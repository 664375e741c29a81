package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/internal/poll"
	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/schema"
	"github.com/strata-db/strata/server/config"
)

// TestCorruptAlarmStopsWrites: once a client raises
// CORRUPT, every request that changes the keyspace or the leases is
// refused with etcd's "corrupt cluster" (DataLoss), reads keep working,
// /health and /readyz report it, the alarm survives a restart, and
// deactivating it (what `etcdctl alarm disarm` sends) ends it.
func TestCorruptAlarmStopsWrites(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	m := startMember(t, dir)
	ctx := context.Background()
	lc := pb.NewLeaseClient(m.conn)
	if _, err := m.kv.Put(ctx, &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	if _, err := lc.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: 7, TTL: 60}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.maint.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: m.s.id, Alarm: pb.AlarmType_CORRUPT}); err != nil {
		t.Fatal(err)
	}

	refused := func(m *testMember) {
		t.Helper()
		put := &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("t"), Value: []byte("v")}}}
		lc := pb.NewLeaseClient(m.conn)
		for name, call := range map[string]func() error{
			"Put": func() error {
				_, err := m.kv.Put(ctx, &pb.PutRequest{Key: []byte("k2"), Value: []byte("v")})
				return err
			},
			"DeleteRange": func() error { _, err := m.kv.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte("k")}); return err },
			"Txn":         func() error { _, err := m.kv.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{put}}); return err },
			"Compact":     func() error { _, err := m.kv.Compact(ctx, &pb.CompactionRequest{Revision: 1}); return err },
			"LeaseGrant":  func() error { _, err := lc.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: 8, TTL: 60}); return err },
			"LeaseRevoke": func() error { _, err := lc.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: 7}); return err },
		} {
			err := call()
			if err == nil {
				t.Fatalf("%s acknowledged under the CORRUPT alarm", name)
			}
			wantErr(t, err, rpctypes.ErrGRPCCorrupt)
		}
		r, err := m.kv.Range(ctx, &pb.RangeRequest{Key: []byte("k")})
		if err != nil || len(r.Kvs) != 1 || r.Header.Revision != 2 {
			t.Fatalf("Range under CORRUPT: %v, %v; want k at revision 2", r, err)
		}
		if _, err := m.kv.Range(ctx, &pb.RangeRequest{Key: []byte("k"), Serializable: true}); err != nil {
			t.Fatalf("serializable Range under CORRUPT: %v", err)
		}
		if _, err := lc.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: 7}); err != nil {
			t.Fatalf("LeaseTimeToLive under CORRUPT: %v", err)
		}
		st, err := m.maint.Status(ctx, &pb.StatusRequest{})
		if err != nil || len(st.Errors) != 1 || !strings.Contains(st.Errors[0], "CORRUPT") {
			t.Fatalf("Status under CORRUPT: %v, %v", st, err)
		}
		code, body := httpGet(t, m.client+"/health")
		if code != http.StatusServiceUnavailable || body != `{"health":"false","reason":"ALARM CORRUPT"}`+"\n" {
			t.Fatalf("/health under CORRUPT: %d %q", code, body)
		}
		code, body = httpGet(t, m.client+"/readyz/data_corruption")
		if code != http.StatusServiceUnavailable || body != "[-]data_corruption failed: alarm activated: CORRUPT\n\n" {
			t.Fatalf("/readyz/data_corruption under CORRUPT: %d %q", code, body)
		}
	}
	refused(m)
	m.stop(t)

	m = startWithArgs(t, m.args, m.client) // the alarm is in the page store
	defer m.stop(t)
	refused(m)
	if _, err := m.maint.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_DEACTIVATE, MemberID: m.s.id, Alarm: pb.AlarmType_CORRUPT}); err != nil {
		t.Fatal(err)
	}
	if r, err := m.kv.Put(ctx, &pb.PutRequest{Key: []byte("k2"), Value: []byte("v")}); err != nil || r.Header.Revision != 3 {
		t.Fatalf("Put after the alarm is disarmed: %v, %v; want revision 3", r, err)
	}
	if _, err := pb.NewLeaseClient(m.conn).LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: 7}); err != nil {
		t.Fatalf("LeaseRevoke after the alarm is disarmed: %v", err)
	}
	if code, body := httpGet(t, m.client+"/health"); code != http.StatusOK {
		t.Fatalf("/health after disarm: %d %q", code, body)
	}
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	cl := &http.Client{Timeout: 10 * time.Second}
	resp, err := cl.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// corruptValueOffline rewrites, in a stopped member's page store, the
// value of every stored revision of key (same revisions, other bytes): a
// member whose state silently differs from the others'. It drops the
// revision metadata, which is derived from the records, as an offline
// edit of the key bucket must: the member rebuilds it from the changed
// records on start, so its whole state, record sums included, is the
// corrupt one.
func corruptValueOffline(t *testing.T, dbPath, key string) {
	t.Helper()
	db, err := pagestore.Open(dbPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	changed := 0
	err = db.Update(func(tx *pagestore.Tx) error {
		b, err := tx.Bucket(schema.Key)
		if err != nil {
			return err
		}
		type rec struct{ k, v []byte }
		var recs []rec
		if err := b.ForEach(func(k, v []byte) error {
			var kv mvccpb.KeyValue
			if proto.Unmarshal(v, &kv) == nil && string(kv.Key) == key && len(kv.Value) > 0 {
				kv.Value = []byte("corrupted")
				nv, err := proto.Marshal(&kv)
				if err != nil {
					return err
				}
				recs = append(recs, rec{append([]byte(nil), k...), nv})
			}
			return nil
		}); err != nil {
			return err
		}
		for _, r := range recs {
			if err := b.Put(r.k, r.v); err != nil {
				return err
			}
			changed++
		}
		return tx.DeleteBucket(schema.RevMeta)
	})
	if err != nil || changed == 0 {
		t.Fatalf("corrupting %s in %s: %d records changed, %v", key, dbPath, changed, err)
	}
}

// TestCorruptionChecks: a follower
// whose page store was changed offline is refused at start by the initial
// corruption check ("found data inconsistency with peers"); started
// without it, the leader's periodic check finds it and raises the CORRUPT
// alarm for that member, writes stop cluster-wide with etcd's "corrupt
// cluster", and the other members keep the right value.
func TestCorruptionChecks(t *testing.T) {
	c := newTestCluster(t, 3, "--experimental-corrupt-check-time=100ms")
	lead := c.leader()
	last := mustPut(t, lead, "k", "v")
	for _, m := range c.members {
		poll.Until(t, m.name+" to apply the put", func() bool { return m.s.kv.Rev() >= last.Header.Revision })
	}
	victim := c.followers()[0]
	c.stop(victim)
	corruptValueOffline(t, filepath.Join(victim.dir, "member", "snap", "db"), "k")

	// With the initial check on, the member refuses to serve.
	args := append(append([]string(nil), victim.args...), "--feature-gates=InitialCorruptCheck=true")
	cfg, err := config.Parse(args, nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	s, err := newServer(cfg, nil, storageHooks{})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Serve()
	_ = s.Stop()
	if err == nil || !strings.Contains(err.Error(), "found data inconsistency with peers") {
		t.Fatalf("the initial corruption check let a corrupt member start: %v", err)
	}

	// Without it, the leader's periodic check raises CORRUPT for it.
	c.restart(victim)
	lead = c.leader()
	poll.Until(t, "the CORRUPT alarm for the corrupt member", func() bool {
		for _, a := range alarmList(t, &testMember{s: lead.s, maint: lead.maint}) {
			if a.Alarm == pb.AlarmType_CORRUPT && a.MemberID == victim.s.id {
				return true
			}
		}
		return false
	})
	_, err = lead.kv.Put(ctxT(t), &pb.PutRequest{Key: []byte("k"), Value: []byte("after")})
	wantErr(t, err, rpctypes.ErrGRPCCorrupt)
	for _, m := range c.members {
		if m == victim {
			continue
		}
		if v := getValue(t, m, "k", true); v != "v" {
			t.Fatalf("%s has k=%q: the corruption spread", m.name, v)
		}
	}
}

// An emptied page store (a zero-length file opens as a new database, as in
// bbolt) under a WAL that has moved past a snapshot is refused at start,
// naming the index the state machine needs: the WAL cannot rebuild what
// the snapshot held. (With no snapshot yet, the WAL replays everything.)
func TestEmptiedPageStoreRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	args, client := memberArgs(t, dir, "--disk-probe=false", "--snapshot-count=10")
	m := startWithArgs(t, args, client)
	for i := 0; i < 50; i++ {
		if _, err := m.kv.Put(context.Background(), &pb.PutRequest{Key: []byte(fmt.Sprint(i)), Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	m.stop(t)
	if err := os.Truncate(filepath.Join(dir, "member", "snap", "db"), 0); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(args, nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	s, err := newServer(cfg, nil, storageHooks{})
	if err == nil {
		s.Stop()
		t.Fatal("a member started on an emptied page store behind its WAL's snapshot")
	}
	if !strings.Contains(err.Error(), "the state machine is at index 0, behind the WAL's snapshot") {
		t.Fatalf("start on an emptied page store: %v", err)
	}
}

// TestCompactionHashCheck is the compaction hash check (feature gate
// CompactHashCheck): after a compaction that every member
// finished from the same compact revision, the leader finds the hashes
// equal on the whole cluster and raises nothing; after a follower's page
// store was changed offline (same revisions, other value) the next
// compaction's hash differs on it alone, and the leader raises CORRUPT
// for that member, which stops writes; the others keep the right value.
func TestCompactionHashCheck(t *testing.T) {
	c := newTestCluster(t, 3, "--feature-gates=CompactHashCheck=true", "--compact-hash-check-time=100ms")
	lead := c.leader()
	put := func(n int) int64 {
		var rev int64
		for i := 0; i < n; i++ {
			rev = mustPut(t, lead, fmt.Sprintf("k%d", i%5), fmt.Sprint(i)).Header.Revision
		}
		rev = mustPut(t, lead, "k", "v").Header.Revision
		for _, m := range c.members {
			poll.Until(t, m.name+" to apply the puts", func() bool { return m.s.kv.Rev() >= rev })
		}
		return rev
	}
	compact := func(rev int64) {
		if _, err := lead.kv.Compact(ctxT(t), &pb.CompactionRequest{Revision: rev, Physical: true}); err != nil {
			t.Fatal(err)
		}
	}
	checked := func(rev int64) bool {
		for _, m := range c.members {
			for _, line := range strings.Split(m.logText(), "\n") {
				if strings.Contains(line, "successfully checked hash on whole cluster") && strings.Contains(line, fmt.Sprintf(" revision=%d ", rev)) {
					return true
				}
			}
		}
		return false
	}

	rev := put(20)
	compact(rev - 3)
	poll.Until(t, "the compaction hash check to pass on every member", func() bool { return checked(rev - 3) })
	if as := alarmList(t, &testMember{s: lead.s, maint: lead.maint}); len(as) != 0 {
		t.Fatalf("alarms after a clean compaction hash check: %v", as)
	}

	victim := c.followers()[0]
	c.stop(victim)
	corruptValueOffline(t, filepath.Join(victim.dir, "member", "snap", "db"), "k")
	c.restart(victim)
	lead = c.leader()
	rev = put(10)
	compact(rev)
	poll.Until(t, "the CORRUPT alarm for the corrupt member", func() bool {
		for _, a := range alarmList(t, &testMember{s: lead.s, maint: lead.maint}) {
			if a.Alarm == pb.AlarmType_CORRUPT && a.MemberID == victim.s.id {
				return true
			}
		}
		return false
	})
	_, err := lead.kv.Put(ctxT(t), &pb.PutRequest{Key: []byte("k"), Value: []byte("after")})
	wantErr(t, err, rpctypes.ErrGRPCCorrupt)
	for _, m := range c.members {
		if m != victim {
			if v := getValue(t, m, "k", true); v != "v" {
				t.Fatalf("%s has k=%q: the corruption spread", m.name, v)
			}
		}
	}
}

// TestInitialCorruptCheckSkipsNewMember: as etcd, the initial check runs
// only on a member that was initialized (its data dir held a WAL): a new
// member has nothing to compare, and starts without it; restarted, it
// checks.
func TestInitialCorruptCheckSkipsNewMember(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	var out syncBuffer
	cp, pp := freePort(t), freePort(t)
	client, peer := fmt.Sprintf("http://127.0.0.1:%d", cp), fmt.Sprintf("http://127.0.0.1:%d", pp)
	args := []string{"--name", "m1", "--data-dir", dir, "--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "m1=" + peer,
		"--feature-gates=InitialCorruptCheck=true"}
	m := startHooked(t, args, client, slog.New(slog.NewJSONHandler(&out, nil)), storageHooks{})
	m.stop(t)
	if strings.Contains(out.String(), "starting initial corruption check") {
		t.Fatal("a new member ran the initial corruption check")
	}
	m = startHooked(t, args, client, slog.New(slog.NewJSONHandler(&out, nil)), storageHooks{})
	m.stop(t)
	if !strings.Contains(out.String(), "starting initial corruption check") {
		t.Fatal("a restarted member did not run the initial corruption check")
	}
}

// syncBuffer is a bytes.Buffer a logger writes to from many goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
