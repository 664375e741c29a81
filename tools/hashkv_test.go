package tools

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/strata-db/strata/mvcc"
	"github.com/strata-db/strata/pagestore"
)

// randomHistory writes a seeded random history into a member's page
// store at dir/member/snap/db: puts (new keys and overwrites), deletes of
// single keys and ranges, and compactions, some at a tombstone. It
// returns the db path.
func randomHistory(t *testing.T, seed uint64, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "member", "snap", "db")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(seed, seed^0x5eed))
	m := openMember(t, path)
	for i := 0; i < 300; i++ {
		key := []byte(fmt.Sprintf("k%02d", r.IntN(40)))
		switch n := r.IntN(20); {
		case n < 13:
			if _, err := m.kv.Put(m.next(), 1, &pb.PutRequest{Key: key, Value: []byte(fmt.Sprintf("v%d", i))}); err != nil {
				t.Fatal(err)
			}
		case n < 17:
			if _, err := m.kv.DeleteRange(m.next(), 1, &pb.DeleteRangeRequest{Key: key}); err != nil {
				t.Fatal(err)
			}
		case n < 19:
			end := []byte(fmt.Sprintf("k%02d", r.IntN(40)))
			if _, err := m.kv.DeleteRange(m.next(), 1, &pb.DeleteRangeRequest{Key: key, RangeEnd: end}); err != nil {
				t.Fatal(err)
			}
		default:
			rev := m.kv.Rev() - int64(r.IntN(20))
			if rev <= m.kv.CompactRev() {
				continue
			}
			_, done, err := m.kv.Compact(m.next(), 1, &pb.CompactionRequest{Revision: rev})
			if err != nil {
				t.Fatal(err)
			}
			<-done
		}
	}
	m.close()
	return path
}

// storeHashes opens the page store as a server does and returns its
// HashKV answers at each revision from one below the compaction to one
// past the current revision (0 included), with the errors.
type hashAnswer struct {
	h   mvcc.KeyValueHash
	err error
}

func storeHashes(t *testing.T, path string) (map[int64]hashAnswer, int64, int64) {
	t.Helper()
	m := openMember(t, path)
	defer m.close()
	cur, compact := m.kv.Rev(), m.kv.CompactRev()
	out := map[int64]hashAnswer{}
	h, _, err := m.kv.HashKV(0)
	out[0] = hashAnswer{h, err}
	for rev := max(compact-1, 1); rev <= cur+1; rev++ {
		h, _, err := m.kv.HashKV(rev)
		out[rev] = hashAnswer{h, err}
	}
	return out, cur, compact
}

// TestHashKVMatchesStore: the offline HashKV of a page store, and of the
// etcd snapshot.db export-etcd writes of it, equals what the store
// itself answers (etcd's HashKV, see mvcc's tests) at every revision,
// errors included, for seeded random histories.
func TestHashKVMatchesStore(t *testing.T) {
	for i := 0; i < 4; i++ {
		seed := uint64(time.Now().UnixNano()) + uint64(i)
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Logf("seed %d", seed)
			dir := t.TempDir()
			path := randomHistory(t, seed, dir)
			want, cur, compact := storeHashes(t, path)
			etcdFile := filepath.Join(t.TempDir(), "snapshot.db")
			if _, err := ExportEtcd(ExportConfig{DataDir: dir, Out: etcdFile}); err != nil {
				t.Fatal(err)
			}
			for _, target := range []string{path, dir, etcdFile} {
				for rev, w := range want {
					got, err := HashKV(target, rev, time.Second)
					if w.err != nil {
						if !errors.Is(err, w.err) || err.Error() != w.err.Error() {
							t.Fatalf("%s at %d (current %d, compacted %d): error %v, want %v", target, rev, cur, compact, err, w.err)
						}
						continue
					}
					if err != nil {
						t.Fatalf("%s at %d: %v", target, rev, err)
					}
					if got.Hash != w.h.Hash || got.HashRevision != w.h.Revision || got.CompactRevision != w.h.CompactRevision {
						t.Fatalf("%s at %d (current %d, compacted %d): %+v, the store says %+v", target, rev, cur, compact, got, w.h)
					}
				}
			}
		})
	}
}

// TestHashKVBadInput: a missing file is etcdutl's stat error, garbage
// names the file and the offsets the format check read, and nothing
// panics.
func TestHashKVBadInput(t *testing.T) {
	dir := t.TempDir()
	if _, err := HashKV(filepath.Join(dir, "nope"), 0, time.Second); err == nil || err.Error() != "stat "+filepath.Join(dir, "nope")+": no such file or directory" {
		t.Errorf("missing file: %v", err)
	}
	garbage := filepath.Join(dir, "garbage")
	b := make([]byte, 64<<10)
	for i := range b {
		b[i] = byte(i*7 + 3)
	}
	os.WriteFile(garbage, b, 0o600)
	_, err := HashKV(garbage, 0, time.Second)
	if err == nil || !strings.Contains(err.Error(), garbage) || !strings.Contains(err.Error(), "offset 16") || !strings.Contains(err.Error(), "offset 32") {
		t.Errorf("garbage: %v", err)
	}
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte("hello"), 0o600)
	if _, err := HashKV(short, 0, time.Second); err == nil || !strings.Contains(err.Error(), "too short") {
		t.Errorf("short file: %v", err)
	}
	if _, err := StatusTimeout(garbage, time.Second); err == nil || !strings.Contains(err.Error(), "offset 16") {
		t.Errorf("status of garbage: %v", err)
	}
	// A page store whose pages are damaged past its header.
	path := randomHistory(t, 1, t.TempDir())
	data, _ := os.ReadFile(path)
	for i := 8192; i < len(data); i += 97 {
		data[i] ^= 0x5a
	}
	os.WriteFile(path, data, 0o600)
	if _, err := HashKV(path, 0, time.Second); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("damaged page store: %v", err)
	}
}

// TestLockTimeout: a db file a server holds is waited for up to the
// timeout, then refused naming the file; with 0 the tool waits until
// the lock is released and then works.
func TestLockTimeout(t *testing.T) {
	dir := t.TempDir()
	path := randomHistory(t, 2, dir)
	held, err := pagestore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := HashKV(path, 0, 20*time.Millisecond); !errors.Is(err, ErrLockTimeout) || !errors.Is(err, pagestore.ErrDatabaseLocked) || !strings.Contains(err.Error(), path) {
		t.Fatalf("held file with a timeout: %v", err)
	}
	if _, err := StatusTimeout(path, 20*time.Millisecond); !errors.Is(err, ErrLockTimeout) {
		t.Fatalf("status of a held file: %v", err)
	}
	waiting := make(chan struct{}, 1)
	onLockWait = func(string) {
		select {
		case waiting <- struct{}{}:
		default:
		}
	}
	defer func() { onLockWait = nil }()
	done := make(chan error, 1)
	go func() {
		_, err := HashKV(path, 0, 0)
		done <- err
	}()
	<-waiting // it found the file held and waits
	if err := held.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("after the lock was released: %v", err)
	}

	// bbolt's own wait, for an etcd file a process holds.
	etcd := etcdSnapshot(t)
	bdb, err := bolt.Open(etcd, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := StatusTimeout(etcd, 20*time.Millisecond); !errors.Is(err, ErrLockTimeout) || !strings.Contains(err.Error(), etcd) {
		t.Fatalf("status of a held etcd file: %v", err)
	}
	go func() {
		_, err := StatusTimeout(etcd, 0)
		done <- err
	}()
	<-waiting
	bdb.Close()
	if err := <-done; err != nil {
		t.Fatalf("etcd file after the lock was released: %v", err)
	}
}
