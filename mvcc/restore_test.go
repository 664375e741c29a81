package mvcc

import (
	"os"
	"path/filepath"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/strata-db/strata/pagestore"
)

// writeImage writes an image of ts's committed state to a file and opens
// it as a page store, as a follower receives a leader's image.
func writeImage(t *testing.T, ts *watchTestStore) *pagestore.DB {
	t.Helper()
	if err := ts.be.ForceCommit(); err != nil {
		t.Fatal(err)
	}
	img, err := ts.be.Image()
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	path := filepath.Join(t.TempDir(), "image.db")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := img.WriteTo(f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := pagestore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// restoreFrom replaces follower's page store by an image of leader's, as
// a follower installing a leader's snapshot does.
func restoreFrom(t *testing.T, follower, leader *watchTestStore) {
	t.Helper()
	img := writeImage(t, leader)
	old, err := follower.be.SwapDB(img)
	if err != nil {
		t.Fatal(err)
	}
	follower.db = img // closed by the test store's cleanup
	t.Cleanup(func() { old.Close() })
	if err := follower.Restore(); err != nil {
		t.Fatal(err)
	}
	follower.ci = follower.be.ConsistentIndex()
}

// leaderAhead is a store that went on from the follower's revision 2:
// revisions 3..6, compacted at compactAt.
func leaderAhead(t *testing.T, compactAt int64) *watchTestStore {
	leader := openWatchStore(t, WatchConfig{})
	leader.put("a", "1") // rev 2, as the follower has it
	leader.put("a", "2") // 3
	leader.put("b", "x") // 4
	leader.put("c", "y") // 5
	leader.put("a", "3") // 6
	leader.compact(compactAt)
	return leader
}

// A follower's store replaced by a leader's image in place: reads see the
// image, and a watcher that was synced gets every event the image holds
// after what it had seen, then the writes that follow.
func TestWatchableStoreRestore(t *testing.T) {
	follower := openWatchStore(t, WatchConfig{})
	follower.put("a", "1") // rev 2
	ws := follower.NewWatchStream()
	defer ws.Close()
	w := mustWatch(t, ws, WatchRequest{ID: AutoWatchID, Key: []byte("a")})
	leader := leaderAhead(t, 3)
	restoreFrom(t, follower, leader)
	if got := follower.Rev(); got != 6 {
		t.Fatalf("revision after restore %d, want 6", got)
	}
	if got := follower.ConsistentIndex(); got != leader.be.ConsistentIndex() {
		t.Fatalf("consistent index after restore %d, want the image's %d", got, leader.be.ConsistentIndex())
	}
	r, err := follower.Range(&pb.RangeRequest{Key: []byte("b")})
	if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "x" {
		t.Fatalf("range b after restore: %v, %v", r, err)
	}
	checkEvents(t, recvEvents(t, ws, w, 2), "PUT a@3=2", "PUT a@6=3")
	follower.put("a", "4")
	checkEvents(t, recvEvents(t, ws, w, 1), "PUT a@7=4")
}

// A watcher whose next revision the image has compacted away is
// canceled with the compaction revision, as etcd does, not left silent.
func TestWatchableStoreRestoreCompacted(t *testing.T) {
	follower := openWatchStore(t, WatchConfig{})
	follower.put("a", "1") // rev 2
	ws := follower.NewWatchStream()
	defer ws.Close()
	w := mustWatch(t, ws, WatchRequest{ID: AutoWatchID, Key: []byte("a")})
	restoreFrom(t, follower, leaderAhead(t, 5))
	resp := recv(t, ws)
	if resp.WatchID != w || !resp.Canceled || resp.CompactRevision != 5 {
		t.Fatalf("watcher after a restore past a compaction: %s", fmtResp(resp))
	}
}
