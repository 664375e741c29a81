package tools

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/membershippb"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/mvcc"
	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/schema"
	"github.com/strata-db/strata/wal"
)

// TestRestoreBumpRevision restores Strata and etcd snapshots with
// --bump-revision and --mark-compacted: the member opened on the result
// is at the snapshot's latest revision plus the bump, everything below
// it is compacted (reads and compactions refused, the compaction the
// server resumes at open done), the keys are the snapshot's, the next
// write gets the next revision, and the offline HashKV agrees with the
// store's.
func TestRestoreBumpRevision(t *testing.T) {
	src, want, wantRev := sourceDataDir(t)
	const bump = 1000
	for _, tc := range []struct {
		name   string
		snap   string
		latest int64
	}{
		{"strata", snapshotOf(t, src), wantRev},
		{"etcd", etcdSnapshot(t), 399},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "m1")
			cfg := restoreCfg(tc.snap, dir)
			for _, c := range []struct {
				bump uint64
				mark bool
			}{{bump, false}, {0, true}} {
				cfg.RevisionBump, cfg.MarkCompacted = c.bump, c.mark
				if _, err := Restore(cfg); !errors.Is(err, ErrMarkCompacted) || err.Error() != "--mark-compacted required if --revision-bump > 0" {
					t.Fatalf("bump %d mark %v: %v", c.bump, c.mark, err)
				}
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("a refused restore left %s: %v", dir, err)
			}
			cfg.RevisionBump, cfg.MarkCompacted = bump, true
			sum, err := Restore(cfg)
			if err != nil {
				t.Fatal(err)
			}
			bumped := tc.latest + bump
			if sum.Revision != bumped || sum.CompactRevision != bumped || sum.RevisionBump != bump {
				t.Fatalf("summary: revision %d, compacted %d, bump %d; want %d", sum.Revision, sum.CompactRevision, sum.RevisionBump, bumped)
			}
			db := filepath.Join(dir, "member", "snap", "db")
			wantHash, _, _ := storeHashes(t, db)
			m := openMember(t, db)
			if m.kv.Rev() != bumped || m.kv.CompactRev() != bumped {
				t.Fatalf("store at %d compacted at %d, want both %d", m.kv.Rev(), m.kv.CompactRev(), bumped)
			}
			kvs, rev := m.all()
			if rev != bumped {
				t.Fatalf("range header revision %d, want %d", rev, bumped)
			}
			if tc.name == "strata" && len(kvs) != len(want) {
				t.Fatalf("%d keys, the snapshot has %d", len(kvs), len(want))
			}
			if _, err := m.kv.Range(&pb.RangeRequest{Key: kvs[0].Key, Revision: tc.latest}); !errors.Is(err, mvcc.ErrCompacted) {
				t.Fatalf("read at the snapshot's revision: %v", err)
			}
			if _, _, err := m.kv.Compact(m.next(), 1, &pb.CompactionRequest{Revision: tc.latest}); !errors.Is(err, mvcc.ErrCompacted) {
				t.Fatalf("compaction below the bumped revision: %v", err)
			}
			put, err := m.kv.Put(m.next(), 1, &pb.PutRequest{Key: []byte("after"), Value: []byte("x")})
			if err != nil || put.Header.Revision != bumped+1 {
				t.Fatalf("put after the restore: %v %v, want revision %d", put, err, bumped+1)
			}
			m.close()
			if w := wantHash[0]; w.err != nil || w.h.CompactRevision != bumped || w.h.Revision != bumped {
				t.Fatalf("store's HashKV: %+v", w)
			}
		})
	}
}

// TestHashKVInterruptedCompaction: a file whose scheduled compaction is
// past its finished one (a restore with --mark-compacted, or a server
// stopped mid-compaction) hashes as the server that resumes it answers.
func TestHashKVInterruptedCompaction(t *testing.T) {
	src, _, rev := sourceDataDir(t)
	dir := filepath.Join(t.TempDir(), "m1")
	cfg := restoreCfg(snapshotOf(t, src), dir)
	cfg.RevisionBump, cfg.MarkCompacted = 7, true
	if _, err := Restore(cfg); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "member", "snap", "db")
	got := map[int64]*HashKVResult{}
	var errs = map[int64]error{}
	revs := []int64{0}
	for r := rev - 1; r <= rev+8; r++ {
		revs = append(revs, r)
	}
	for _, r := range revs {
		got[r], errs[r] = HashKV(db, r, time.Second)
	}
	want, _, _ := storeHashes(t, db)
	for _, r := range revs {
		if r == rev+7 {
			// The store may answer the hash its resumed compaction
			// stored (etcd's too): compared through revision 0 below.
			continue
		}
		w, ok := want[r]
		if !ok { // below what storeHashes asked: compacted
			if !errors.Is(errs[r], mvcc.ErrCompacted) {
				t.Fatalf("at %d: %v, want compacted", r, errs[r])
			}
			continue
		}
		if w.err != nil || errs[r] != nil {
			if errs[r] == nil || w.err == nil || errs[r].Error() != w.err.Error() {
				t.Fatalf("at %d: %v, the store says %v", r, errs[r], w.err)
			}
			continue
		}
		if got[r].Hash != w.h.Hash || got[r].CompactRevision != w.h.CompactRevision || got[r].HashRevision != w.h.Revision {
			t.Fatalf("at %d: %+v, the store says %+v", r, got[r], w.h)
		}
	}
	if errs[rev+7] != nil || *got[rev+7] != *got[0] || got[rev+7].CompactRevision != rev+7 || !errors.Is(errs[rev+6], mvcc.ErrCompacted) || !errors.Is(errs[rev+8], mvcc.ErrFutureRev) {
		t.Fatalf("around the bumped revision %d: %v %v %v", rev+7, errs[rev+6], errs[rev+7], errs[rev+8])
	}
}

// TestRestoreDropsBumpMarkers: the record without a value that etcdutl's
// --bump-revision leaves in an etcd database is no key: a Strata restore
// leaves it out and the store opens.
func TestRestoreDropsBumpMarkers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "snapshot.db")
	src := etcdSnapshot(t)
	data, _ := os.ReadFile(src)
	os.WriteFile(path, data[:len(data)-sha256.Size], 0o600)
	bdb, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	marker := binary.BigEndian.AppendUint64(nil, 5000)
	marker = append(marker, '_')
	marker = binary.BigEndian.AppendUint64(marker, 0)
	sched := append([]byte(nil), marker...)
	err = bdb.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(schema.Key).Put(marker, []byte{}); err != nil {
			return err
		}
		return tx.Bucket(schema.Meta).Put(schema.MetaScheduledCompactRev, sched)
	})
	bdb.Close()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "m1")
	cfg := restoreCfg(path, dir)
	cfg.SkipHashCheck = true
	sum, err := Restore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if sum.BumpMarkers != 1 || sum.Revision != 5000 {
		t.Fatalf("summary: %d markers, revision %d", sum.BumpMarkers, sum.Revision)
	}
	m := openMember(t, filepath.Join(dir, "member", "snap", "db"))
	defer m.close()
	if m.kv.Rev() != 5000 || m.kv.CompactRev() != 5000 {
		t.Fatalf("store at %d compacted at %d, want 5000", m.kv.Rev(), m.kv.CompactRev())
	}
}

// migrateDir restores a data dir (storage version none, term 1) and
// returns it.
func migrateDir(t *testing.T) string {
	t.Helper()
	src, _, _ := sourceDataDir(t)
	dir := filepath.Join(t.TempDir(), "m1")
	if _, err := Restore(restoreCfg(snapshotOf(t, src), dir)); err != nil {
		t.Fatal(err)
	}
	return dir
}

func storageVersionOf(t *testing.T, dir string) string {
	t.Helper()
	db, err := pagestore.Open(filepath.Join(dir, "member", "snap", "db"), &pagestore.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v []byte
	db.View(func(tx *pagestore.Tx) error {
		m, err := tx.Bucket(schema.Meta)
		if err != nil {
			return err
		}
		v, err = m.Get(schema.MetaStorageVersion)
		v = bytes.Clone(v)
		return err
	})
	return string(v)
}

// walWith writes a WAL whose entries after its snapshot hold reqs.
func walWith(t *testing.T, reqs ...*pb.InternalRaftRequest) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "wal")
	w, err := wal.Create(dir, nil, &wal.Options{SegmentSize: 1 << 20, NoZeroFill: true})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range reqs {
		data, _ := proto.Marshal(r)
		idx := uint64(i + 10)
		e := &raftpb.Entry{Index: proto.Uint64(idx), Term: proto.Uint64(2), Type: raftpb.EntryNormal.Enum(), Data: data}
		if err := w.Save(&raftpb.HardState{Term: proto.Uint64(2), Commit: proto.Uint64(idx)}, []*raftpb.Entry{e}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestMigrateStorageVersion: etcdutl migrate's checks, messages and
// steps on a Strata data dir.
func TestMigrateStorageVersion(t *testing.T) {
	dir := migrateDir(t)
	var log bytes.Buffer
	mig := func(target string, force bool, walDir string) (*MigrateResult, error) {
		log.Reset()
		return Migrate(MigrateConfig{DataDir: dir, TargetVersion: target, Force: force, WALDir: walDir, LockTimeout: time.Second, Log: &log})
	}
	for target, msg := range map[string]string{
		"3":     `wrong target version format, expected "X.Y", got "3"`,
		"3.6.0": `wrong target version format, expected "X.Y", got "3.6.0"`,
		"3.4":   `target version "3.4" not supported. Minimal "3.5"`,
		"3.x":   `failed to parse target version: strconv.ParseInt: parsing "x": invalid syntax`,
	} {
		if _, err := mig(target, false, ""); !errors.Is(err, ErrBadTargetVersion) || err.Error() != msg {
			t.Errorf("--target-version %s: %v, want %q", target, err, msg)
		}
	}
	// No stored version, a term: 3.5, as etcd detects it.
	if v := storageVersionOf(t, dir); v != "" {
		t.Fatalf("restored dir has storage version %q", v)
	}
	res, err := mig("3.7", false, "")
	if err != nil || res.From != "3.5.0" || res.To != "3.7.0" || storageVersionOf(t, dir) != "3.7.0" ||
		!strings.Contains(log.String(), "updated storage version new-storage-version=3.6.0") || !strings.Contains(log.String(), "new-storage-version=3.7.0") {
		t.Fatalf("3.5 -> 3.7: %+v %v\n%s", res, err, log.String())
	}
	if res, err := mig("3.7", false, ""); err != nil || !res.UpToDate || !strings.Contains(log.String(), "storage version up-to-date storage-version=3.7") {
		t.Fatalf("3.7 again: %+v %v\n%s", res, err, log.String())
	}
	if _, err := mig("3.8", false, ""); err == nil || err.Error() != `cannot create migration plan: version "3.8.0" is not supported` || storageVersionOf(t, dir) != "3.7.0" {
		t.Fatalf("3.8: %v", err)
	}
	if _, err := mig("4.0", false, ""); err == nil || err.Error() != "cannot create migration plan: changing major storage version is not supported" {
		t.Fatalf("4.0: %v", err)
	}
	// A WAL whose entries after the snapshot need 3.7 refuses 3.6,
	// unless forced.
	newer := walWith(t, &pb.InternalRaftRequest{ClusterVersionSet: &membershippb.ClusterVersionSetRequest{Ver: "3.7.0"}},
		&pb.InternalRaftRequest{DowngradeVersionTest: &pb.DowngradeVersionTestRequest{Ver: "3.7.0"}})
	_, err = mig("3.6", false, newer)
	want := "cannot downgrade storage, WAL contains newer entries, as the target version (3.6.0) is lower than the version (3.7.0) detected from WAL logs"
	if err == nil || err.Error() != want || storageVersionOf(t, dir) != "3.7.0" {
		t.Fatalf("3.6 with a 3.7 WAL: %v", err)
	}
	res, err = mig("3.6", true, newer)
	if err != nil || !res.Forced || res.To != "3.6.0" || storageVersionOf(t, dir) != "3.6.0" || !strings.Contains(log.String(), "forcefully set storage version storage-version=3.6") {
		t.Fatalf("forced 3.6: %+v %v\n%s", res, err, log.String())
	}
	// Entries of 3.5 (a cluster version set) allow it; 3.5 clears it.
	if _, err := mig("3.7", false, ""); err != nil {
		t.Fatal(err)
	}
	older := walWith(t, &pb.InternalRaftRequest{ClusterVersionSet: &membershippb.ClusterVersionSetRequest{Ver: "3.7.0"}},
		&pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}})
	if res, err := mig("3.6", false, older); err != nil || res.To != "3.6.0" || storageVersionOf(t, dir) != "3.6.0" {
		t.Fatalf("3.6 with a 3.5 WAL: %+v %v", res, err)
	}
	if res, err := mig("3.5", false, older); err != nil || res.To != "" || storageVersionOf(t, dir) != "" {
		t.Fatalf("3.5: %+v %v", res, err)
	}
	// The member's WAL (a restored one: a snapshot and nothing after).
	if res, err := mig("3.6", false, ""); err != nil || res.From != "3.5.0" || res.To != "3.6.0" {
		t.Fatalf("3.5 -> 3.6 with the member's WAL: %+v %v", res, err)
	}

	// A running server's db: refused after the timeout, unchanged.
	held, err := pagestore.Open(filepath.Join(dir, "member", "snap", "db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Migrate(MigrateConfig{DataDir: dir, TargetVersion: "3.7", LockTimeout: 10 * time.Millisecond})
	held.Close()
	if !errors.Is(err, ErrLockTimeout) {
		t.Fatalf("held db: %v", err)
	}
	if v := storageVersionOf(t, dir); v != "3.6.0" {
		t.Fatalf("storage version %q after a refused migration", v)
	}
}

// TestEtcdDataDirRefused: an etcd data dir given where a Strata data dir
// is needed is refused with an error naming the Strata command to use.
func TestEtcdDataDirRefused(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "member", "snap"), 0o700)
	data, _ := os.ReadFile(etcdSnapshot(t))
	os.WriteFile(filepath.Join(dir, "member", "snap", "db"), data[:len(data)-sha256.Size], 0o600)
	_, err := DataDirDB(dir)
	if err == nil || !strings.Contains(err.Error(), "is an etcd (bbolt) database") || !strings.Contains(err.Error(), "stratautl snapshot restore") {
		t.Fatalf("DataDirDB: %v", err)
	}
	if _, err := Migrate(MigrateConfig{DataDir: dir, TargetVersion: "3.6"}); err == nil || err.Error() != EtcdDataDirError(dir).Error() {
		t.Fatalf("migrate: %v", err)
	}
	// hashkv reads it: an etcd db is a file etcdutl hashes too.
	if _, err := HashKV(dir, 0, time.Second); err != nil {
		t.Fatalf("hashkv of an etcd data dir: %v", err)
	}
}
