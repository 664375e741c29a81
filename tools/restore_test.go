package tools

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/auth"
	"github.com/strata-db/strata/lease"
	"github.com/strata-db/strata/membership"
	"github.com/strata-db/strata/mvcc"
	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/raft"
	"github.com/strata-db/strata/schema"
	"github.com/strata-db/strata/version"
	"github.com/strata-db/strata/wal"
)

// member is an opened page store with the stores a server opens on it.
type member struct {
	t    *testing.T
	db   *pagestore.DB
	be   *mvcc.Backend
	le   *lease.Lessor
	kv   *mvcc.Store
	auth *auth.Store
	ci   uint64
}

func openMember(t *testing.T, path string) *member {
	t.Helper()
	db, err := pagestore.Open(path, &pagestore.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	m := &member{t: t, db: db}
	if m.be, err = mvcc.NewBackend(db, mvcc.BackendConfig{BatchInterval: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if m.le, err = lease.Open(m.be, lease.Config{}); err != nil {
		t.Fatal(err)
	}
	if m.kv, err = mvcc.OpenStore(m.be, mvcc.StoreConfig{Leases: m.le}); err != nil {
		t.Fatal(err)
	}
	if m.auth, err = auth.New(db, auth.Config{BcryptCost: 4}); err != nil {
		t.Fatal(err)
	}
	m.ci = m.be.ConsistentIndex()
	return m
}

func (m *member) next() uint64 { m.ci++; return m.ci }

func (m *member) close() {
	m.le.Stop()
	if err := m.kv.Close(); err != nil {
		m.t.Error(err)
	}
	if err := m.be.Close(); err != nil {
		m.t.Error(err)
	}
	if err := m.db.Close(); err != nil {
		m.t.Error(err)
	}
}

// all returns every live key and the header revision.
func (m *member) all() ([]*mvccpb.KeyValue, int64) {
	m.t.Helper()
	r, err := m.kv.Range(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}})
	if err != nil {
		m.t.Fatal(err)
	}
	return r.Kvs, r.Header.Revision
}

func (m *member) auth1(req proto.Message) {
	m.t.Helper()
	w := m.be.BeginWrite()
	var err error
	switch r := req.(type) {
	case *pb.AuthUserAddRequest:
		_, err = m.auth.UserAdd(w, r)
	case *pb.AuthRoleAddRequest:
		_, err = m.auth.RoleAdd(w, r)
	case *pb.AuthUserGrantRoleRequest:
		_, err = m.auth.UserGrantRole(w, r)
	}
	w.End(m.next(), 1)
	if err != nil {
		m.t.Fatal(err)
	}
}

const testLease = 0x1234

// sourceDataDir writes a member's page store with keys of several
// revisions, deletes, a compaction, a lease with two keys, a user with a
// role, an alarm and an old membership, and returns its path and the
// keys live at the end.
func sourceDataDir(t *testing.T) (string, []*mvccpb.KeyValue, int64) {
	path := filepath.Join(t.TempDir(), "db")
	m := openMember(t, path)
	for rev := 0; rev < 3; rev++ {
		for i := 0; i < 20; i++ {
			if _, err := m.kv.Put(m.next(), 1, &pb.PutRequest{Key: []byte(fmt.Sprintf("k%02d", i)), Value: []byte(fmt.Sprintf("v%d.%d", i, rev))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := m.kv.DeleteRange(m.next(), 1, &pb.DeleteRangeRequest{Key: []byte("k05")}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.kv.DeleteRange(m.next(), 1, &pb.DeleteRangeRequest{Key: []byte("k10"), RangeEnd: []byte("k13")}); err != nil {
		t.Fatal(err)
	}
	_, done, err := m.kv.Compact(m.next(), 1, &pb.CompactionRequest{Revision: 30})
	if err != nil {
		t.Fatal(err)
	}
	<-done
	if _, err := m.le.Grant(m.next(), 1, testLease, 600); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"lk1", "lk2"} {
		if _, err := m.kv.Put(m.next(), 1, &pb.PutRequest{Key: []byte(k), Value: []byte("leased"), Lease: testLease}); err != nil {
			t.Fatal(err)
		}
	}
	m.auth1(&pb.AuthUserAddRequest{Name: "u1", Password: "pw"})
	m.auth1(&pb.AuthRoleAddRequest{Name: "r1"})
	m.auth1(&pb.AuthUserGrantRoleRequest{User: "u1", Role: "r1"})
	w := m.be.BeginWrite()
	w.Put([]byte("members"), []byte(fmt.Sprintf("%016x", 42)), []byte(`{"id":42,"name":"old","peerURLs":["http://old:2380"]}`))
	w.Put([]byte("members_removed"), []byte(fmt.Sprintf("%016x", 43)), []byte("removed"))
	am, _ := proto.Marshal(&pb.AlarmMember{MemberID: 42, Alarm: pb.AlarmType_NOSPACE})
	w.Put([]byte("alarm"), am, []byte{})
	w.End(m.next(), 1)
	kvs, rev := m.all()
	m.close()
	return path, kvs, rev
}

// snapshotOf saves the page store at path as the Snapshot RPC streams
// it: the page-store copy, then its SHA-256.
func snapshotOf(t *testing.T, path string) string {
	t.Helper()
	db, err := pagestore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var buf bytes.Buffer
	if err := db.View(func(tx *pagestore.Tx) error { _, err := tx.WriteTo(&buf); return err }); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(buf.Bytes())
	out := filepath.Join(t.TempDir(), "snapshot.db")
	if err := os.WriteFile(out, append(buf.Bytes(), sum[:]...), 0o600); err != nil {
		t.Fatal(err)
	}
	return out
}

func restoreCfg(snap, dir string) RestoreConfig {
	return RestoreConfig{Snapshot: snap, DataDir: dir, Name: "m1",
		InitialCluster: "m1=http://127.0.0.1:12380", InitialAdvertisePeerURLs: "http://127.0.0.1:12380",
		InitialClusterToken: "tok", walOptions: &wal.Options{SegmentSize: 1 << 20, NoZeroFill: true}}
}

// checkRestored opens a restored data dir as the server would and
// compares it with what the source held.
func checkRestored(t *testing.T, dir string, sum *RestoreSummary, want []*mvccpb.KeyValue, wantRev int64) {
	t.Helper()
	m := openMember(t, filepath.Join(dir, "member", "snap", "db"))
	defer m.close()
	got, rev := m.all()
	if rev != wantRev || len(got) != len(want) {
		t.Fatalf("restored: %d keys at revision %d, want %d at %d", len(got), rev, len(want), wantRev)
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Fatalf("key %d: got %v, want %v", i, got[i], want[i])
		}
	}
	if sum.Revision != wantRev || sum.Keys != len(want) {
		t.Errorf("summary revision %d keys %d, want %d %d", sum.Revision, sum.Keys, wantRev, len(want))
	}
	if c := m.kv.CompactRev(); c != 30 {
		t.Errorf("compact revision %d, want 30", c)
	}
	if _, err := m.kv.Range(&pb.RangeRequest{Key: []byte("k00"), Revision: 29}); !errors.Is(err, mvcc.ErrCompacted) {
		t.Errorf("read below the compaction: %v", err)
	}
	m.le.Promote(0)
	info, err := m.le.TimeToLive(testLease, true)
	if err != nil || info.TTL != 600 || len(info.Keys) != 2 || string(info.Keys[0]) != "lk1" {
		t.Errorf("lease: %+v %v", info, err)
	}
	u, err := m.auth.UserGet(&pb.AuthUserGetRequest{Name: "u1"})
	if err != nil || len(u.Roles) != 1 || u.Roles[0] != "r1" {
		t.Errorf("user u1: %v %v", u, err)
	}
	if ci := m.be.ConsistentIndex(); ci != 1 || sum.RaftIndex != 1 || sum.RaftTerm != 1 {
		t.Errorf("consistent index %d, summary %d/%d; want 1", ci, sum.RaftIndex, sum.RaftTerm)
	}
	err = m.db.View(func(tx *pagestore.Tx) error {
		ms, removed, err := membership.Read(tx)
		if err != nil {
			return err
		}
		if len(ms) != 1 || fmt.Sprintf("%x", ms[0].ID) != sum.MemberID || ms[0].Name != "m1" ||
			len(ms[0].PeerURLs) != 1 || ms[0].PeerURLs[0] != "http://127.0.0.1:12380" || len(removed) != 0 {
			return fmt.Errorf("membership %+v removed %v, summary member %s", ms[0], removed, sum.MemberID)
		}
		b, err := tx.Bucket([]byte("alarm"))
		if err != nil {
			return err
		}
		n := 0
		b.ForEach(func(k, v []byte) error { n++; return nil })
		if n != 1 {
			return fmt.Errorf("%d alarms, want 1", n)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	walDir := filepath.Join(dir, "member", "wal")
	id, cluster, err := raft.ReadIDs(walDir)
	if err != nil || fmt.Sprintf("%x", id) != sum.MemberID || fmt.Sprintf("%x", cluster) != sum.ClusterID {
		t.Errorf("WAL ids %x %x (%v), summary %s %s", id, cluster, err, sum.MemberID, sum.ClusterID)
	}
	if snap, err := wal.LastSnapshot(nil, walDir); err != nil || snap.Index != 1 || snap.Term != 1 ||
		len(snap.ConfState.GetVoters()) != 1 || snap.ConfState.GetVoters()[0] != id {
		t.Errorf("WAL snapshot %+v %v", snap, err)
	}
}

// TestRestoreStrataSnapshotAndExport restores a Strata snapshot, exports
// the result as an etcd snapshot.db and restores that again: both
// restores hold the source's keys, revisions, compaction, lease, user and
// alarm under the new membership.
func TestRestoreStrataSnapshotAndExport(t *testing.T) {
	src, want, wantRev := sourceDataDir(t)
	snap := snapshotOf(t, src)
	dir := filepath.Join(t.TempDir(), "m1.strata")
	sum, err := Restore(restoreCfg(snap, dir))
	if err != nil {
		t.Fatal(err)
	}
	if sum.Format != "strata" || !sum.HashChecked || sum.Leases != 1 || sum.Users != 1 || sum.Roles != 1 || sum.Alarms != 1 || sum.Members != 1 {
		t.Errorf("summary %+v", sum)
	}
	checkRestored(t, dir, sum, want, wantRev)

	out := filepath.Join(t.TempDir(), "etcd.db")
	esum, err := ExportEtcd(ExportConfig{DataDir: dir, Out: out})
	if err != nil {
		t.Fatal(err)
	}
	if esum.Revision != wantRev || esum.Keys != len(want) || len(esum.Skipped) != 0 {
		t.Errorf("export summary %+v", esum)
	}
	st, err := Status(out)
	if err != nil {
		t.Fatal(err)
	}
	if st.Format != "etcd" || !st.HashChecked || st.Revision != wantRev || st.TotalKey != len(want) {
		t.Errorf("status of the export %+v", st)
	}
	checkEtcdSchema(t, out, sum.MemberID)
	if _, err := ExportEtcd(ExportConfig{DataDir: dir, Out: out}); err == nil || !strings.Contains(err.Error(), out) {
		t.Errorf("export over an existing file: %v", err)
	}

	dir2 := filepath.Join(t.TempDir(), "m1.strata")
	sum2, err := Restore(restoreCfg(out, dir2))
	if err != nil {
		t.Fatal(err)
	}
	if sum2.Format != "etcd" || len(sum2.Dropped) != 0 {
		t.Errorf("summary of the etcd restore %+v", sum2)
	}
	checkRestored(t, dir2, sum2, want, wantRev)
}

// checkEtcdSchema looks at the exported file as etcd would.
func checkEtcdSchema(t *testing.T, path, member string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(t.TempDir(), "db")
	os.WriteFile(db, data[:len(data)-sha256.Size], 0o600)
	bdb, err := bolt.Open(db, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer bdb.Close()
	bdb.View(func(tx *bolt.Tx) error {
		for _, name := range schema.EtcdBuckets {
			if tx.Bucket(name) == nil {
				t.Errorf("bucket %s missing", name)
			}
		}
		meta := tx.Bucket([]byte("meta"))
		if v := meta.Get([]byte("consistent_index")); len(v) != 8 || binary.BigEndian.Uint64(v) == 0 {
			t.Errorf("consistent_index %x", v)
		}
		if v := string(meta.Get([]byte("storageVersion"))); v != version.Cluster {
			t.Errorf("storageVersion %q", v)
		}
		if v := tx.Bucket([]byte("members")).Get([]byte(strings.TrimLeft(member, "0"))); !bytes.Contains(v, []byte(`"name":"m1"`)) {
			t.Errorf("member record %s", v)
		}
		return nil
	})
}

func TestRestoreRefusals(t *testing.T) {
	src, _, _ := sourceDataDir(t)
	snap := snapshotOf(t, src)

	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "x"), nil, 0o600)
	if _, err := Restore(restoreCfg(snap, dir)); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("non-empty data dir: %v", err)
	}
	cfg := restoreCfg(snap, filepath.Join(t.TempDir(), "d"))
	cfg.InitialAdvertisePeerURLs = "http://127.0.0.1:9999"
	if _, err := Restore(cfg); err == nil || !strings.Contains(err.Error(), "initial-advertise-peer-urls") {
		t.Errorf("mismatched peer URLs: %v", err)
	}
	cfg = restoreCfg(snap, filepath.Join(t.TempDir(), "d"))
	cfg.Name = "nobody"
	if _, err := Restore(cfg); err == nil || !strings.Contains(err.Error(), "nobody") {
		t.Errorf("name not in the cluster: %v", err)
	}
	if _, err := os.Stat(cfg.DataDir); !os.IsNotExist(err) {
		t.Errorf("a refused restore left %s behind", cfg.DataDir)
	}
	// export-etcd refuses while the page store is open.
	out := filepath.Join(t.TempDir(), "d")
	if _, err := Restore(restoreCfg(snap, out)); err != nil {
		t.Fatal(err)
	}
	db, err := pagestore.Open(filepath.Join(out, "member", "snap", "db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, err = ExportEtcd(ExportConfig{DataDir: out, Out: filepath.Join(t.TempDir(), "e.db")})
	if !errors.Is(err, pagestore.ErrDatabaseLocked) || !strings.Contains(err.Error(), "stop it first") {
		t.Errorf("export of a data dir in use: %v", err)
	}
}

// etcdSnapshot writes a small etcd snapshot.db (bbolt, with trailer).
func etcdSnapshot(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "snapshot.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range schema.EtcdBuckets {
			if _, err := tx.CreateBucket(name); err != nil {
				return err
			}
		}
		kb := tx.Bucket([]byte("key"))
		for rev := 2; rev < 400; rev++ {
			k := binary.BigEndian.AppendUint64(nil, uint64(rev))
			k = append(k, '_')
			k = binary.BigEndian.AppendUint64(k, 0)
			v, _ := proto.Marshal(&mvccpb.KeyValue{Key: []byte(fmt.Sprintf("key%d", rev%50)), Value: bytes.Repeat([]byte("x"), 100),
				CreateRevision: int64(rev), ModRevision: int64(rev), Version: 1})
			if err := kb.Put(k, v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	data, _ := os.ReadFile(path)
	sum := sha256.Sum256(data)
	os.WriteFile(path, append(data, sum[:]...), 0o600)
	return path
}

// TestRestoreCorruptInput: damaged snapshots fail with an error naming
// the file, leave no data dir behind, and never panic.
func TestRestoreCorruptInput(t *testing.T) {
	src, _, _ := sourceDataDir(t)
	strata := snapshotOf(t, src)
	etcd := etcdSnapshot(t)
	if _, err := Restore(restoreCfg(etcd, filepath.Join(t.TempDir(), "ok"))); err != nil {
		t.Fatalf("the intact etcd snapshot: %v", err)
	}
	write := func(name string, data []byte) string {
		p := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, in := range []struct{ name, path string }{{"strata", strata}, {"etcd", etcd}} {
		data, err := os.ReadFile(in.path)
		if err != nil {
			t.Fatal(err)
		}
		body := data[:len(data)-sha256.Size]
		flipped := append([]byte(nil), data...)
		flipped[len(body)/2] ^= 0x40
		cases := []struct {
			name string
			data []byte
			skip bool
			want string
		}{
			{"truncated", data[:len(data)/2+100], false, "no SHA-256 trailer"},
			{"truncated-skip", data[:len(data)/2+100], true, "truncated"},
			{"truncated-at-page", body[:len(body)/2/4096*4096], true, "truncated"},
			{"truncated-to-trailer-size", append(body[:len(body)-4096:len(body)-4096], data[len(body):]...), false, "does not match"},
			{"bad-hash", flipped, false, "does not match"},
			{"garbage", bytes.Repeat([]byte{0x5a}, 8192+32), false, "does not match"},
			{"garbage-skip", bytes.Repeat([]byte{0x5a}, 8192), true, "neither a Strata snapshot nor an etcd snapshot.db"},
			{"tiny", []byte("hello"), true, "too small"},
		}
		for _, c := range cases {
			t.Run(in.name+"/"+c.name, func(t *testing.T) {
				p := write(c.name+".db", c.data)
				cfg := restoreCfg(p, filepath.Join(t.TempDir(), "out"))
				cfg.SkipHashCheck = c.skip
				_, err := Restore(cfg)
				if err == nil {
					t.Fatalf("restore of a %s file succeeded", c.name)
				}
				if !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("error %q should name %s and say %q", err, p, c.want)
				}
				if _, serr := os.Stat(cfg.DataDir); !os.IsNotExist(serr) {
					t.Errorf("failed restore left %s", cfg.DataDir)
				}
				t.Log(err)
			})
		}
		// Damaged pages (hash check skipped, as for a copied db file):
		// any outcome but a panic is acceptable (damage in a value may go
		// unnoticed); errors must name the file.
		failed := 0
		for off := 4096; off < len(body); off += len(body)/40 + 1 {
			bad := append([]byte(nil), body...)
			for i := 0; i < 64 && off+i < len(bad); i++ {
				bad[off+i] ^= 0xa5
			}
			p := write(fmt.Sprintf("damaged-%d.db", off), bad)
			cfg := restoreCfg(p, filepath.Join(t.TempDir(), "out"))
			cfg.SkipHashCheck = true
			if _, err := Restore(cfg); err != nil {
				failed++
				if !strings.Contains(err.Error(), p) {
					t.Errorf("%s damaged at %d: error %q does not name the file", in.name, off, err)
				}
				t.Logf("%s damaged at %d: %v", in.name, off, err)
			}
		}
		t.Logf("%s: %d of the damaged files were refused", in.name, failed)
	}
}
