package mvcc

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/strata-db/strata/internal/poll"
	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/vfs"
)

var testBucket = []byte("t")

func putAt(b *Backend, key string, ci uint64) {
	w := b.BeginWrite()
	w.Put(testBucket, []byte(key), []byte("v-"+key))
	w.End(ci, 1)
}

// readCommitted returns the page store's consistent index and whether key
// is in it.
func readCommitted(t *testing.T, db *pagestore.DB, key string) (ci uint64, has bool) {
	t.Helper()
	err := db.View(func(tx *pagestore.Tx) error {
		meta, err := tx.Bucket(MetaBucket)
		if err != nil {
			return err
		}
		v, err := meta.Get(metaConsistentIndex)
		if err != nil {
			return err
		}
		if len(v) == 8 {
			ci = uint64(v[0])<<56 | uint64(v[1])<<48 | uint64(v[2])<<40 | uint64(v[3])<<32 |
				uint64(v[4])<<24 | uint64(v[5])<<16 | uint64(v[6])<<8 | uint64(v[7])
		}
		bk, err := tx.Bucket(testBucket)
		if err != nil {
			return nil
		}
		got, err := bk.Get([]byte(key))
		has = err == nil && got != nil
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ci, has
}

// TestBackendCommitsOnlyWhatTheWALHolds: a batch whose consistent index
// is past the WAL's durable index (SetDurableIndex) stays in memory, on a
// periodic commit, on ForceCommit and on Close; nothing durable runs ahead
// of the WAL.
func TestBackendCommitsOnlyWhatTheWALHolds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	db, err := pagestore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	be, err := NewBackend(db, BackendConfig{BatchInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	be.SetDurableIndex(4)
	putAt(be, "a", 5)
	if err := be.ForceCommit(); err != nil {
		t.Fatal(err)
	}
	if ci, has := readCommitted(t, db, "a"); ci != 0 || has || be.ConsistentIndex() != 0 {
		t.Fatalf("with the WAL at 4 the page store holds index %d (a present: %v), want nothing of index 5", ci, has)
	}
	be.SetDurableIndex(5)
	putAt(be, "b", 6)
	if err := be.ForceCommit(); err != nil {
		t.Fatal(err)
	}
	if ci, has := readCommitted(t, db, "a"); ci != 5 || !has {
		t.Fatalf("with the WAL at 5 the page store is at %d (a present: %v), want 5 with a", ci, has)
	}
	if _, has := readCommitted(t, db, "b"); has {
		t.Fatal("b (index 6) committed with the WAL at 5")
	}
	be.SetDurableIndex(6)
	putAt(be, "c", 7)
	if err := be.Close(); err != nil { // commits what the WAL holds, no more
		t.Fatal(err)
	}
	if ci, has := readCommitted(t, db, "b"); ci != 6 || !has {
		t.Fatalf("after Close the page store is at %d (b present: %v), want 6 with b", ci, has)
	}
	if _, has := readCommitted(t, db, "c"); has {
		t.Fatal("c (index 7) committed by Close with the WAL at 6")
	}
	db.Close()
}

// syncBuffer is a log sink safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) count(msg string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Count(s.b.String(), msg)
}

// TestBackendCommitFailureVisible: commits failing with ENOSPC are
// reported once to the owner and in the log (not once per retry), the
// writes stay readable, and the first commit that succeeds again reports
// the recovery and persists everything.
func TestBackendCommitFailureVisible(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	ffs := vfs.NewFaultFS(vfs.Default, nil)
	db, err := pagestore.Open(path, &pagestore.Options{FS: ffs})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var mu sync.Mutex
	var changes []error
	logs := &syncBuffer{}
	be, err := NewBackend(db, BackendConfig{BatchInterval: 5 * time.Millisecond, BatchLimit: 1,
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
		OnCommitHealth: func(err error) {
			mu.Lock()
			changes = append(changes, err)
			mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	be.SetDurableIndex(1 << 40)
	// Every page write fails, but for the two meta pages: a commit fails
	// at its pages and retrying can succeed. (Were the meta writes to fail
	// too, a failed restore of the meta slot would fail the page store for
	// good, pagestore.ErrFailed, which no retry ends.)
	metaEnd := 2 * int64(os.Getpagesize())
	ffs.SetHook(func(ev vfs.Event) *vfs.Fault {
		if ev.Path != path {
			return nil
		}
		if ev.Op == vfs.OpTruncate || ev.Op == vfs.OpPreallocate || ev.Op == vfs.OpWrite && ev.Off >= metaEnd {
			return &vfs.Fault{Err: vfs.ENOSPC}
		}
		return nil
	})
	for i := uint64(1); i <= 50; i++ {
		putAt(be, string(rune('a'+i%26))+string(rune('a'+i/26)), i) // each End kicks (BatchLimit 1)
	}
	poll.Until(t, "failing commits", func() bool { return be.CommitFailures() >= 3 })
	if !be.CommitFailing() {
		t.Fatal("CommitFailing is false while every commit fails")
	}
	if err := be.LastCommitError(); !errors.Is(err, syscall.ENOSPC) || !errors.Is(err, ErrCommitFailed) {
		t.Fatalf("LastCommitError %v, want ErrCommitFailed wrapping ENOSPC", err)
	}
	if be.PendingBytes() == 0 {
		t.Fatal("no backlog while commits fail")
	}
	if n := logs.count(`msg="backend commit failed;`); n != 1 {
		t.Fatalf("failure logged %d times over %d failed commits, want once", n, be.CommitFailures())
	}
	ffs.SetHook(nil)
	// The backend clears CommitFailing and then tells its owner: wait for
	// the owner's second report, not for the flag.
	var got []error
	poll.Until(t, "the recovery reported", func() bool {
		mu.Lock()
		defer mu.Unlock()
		got = append(got[:0], changes...)
		return len(got) >= 2
	})
	if be.CommitFailing() {
		t.Fatal("CommitFailing is still true after the recovery was reported")
	}
	if len(got) != 2 || !errors.Is(got[0], syscall.ENOSPC) || got[1] != nil {
		t.Fatalf("health changes %v, want [ENOSPC, nil]", got)
	}
	if be.ConsistentIndex() != 50 || be.PendingBytes() != 0 {
		t.Fatalf("after recovery: consistent index %d, backlog %d bytes; want 50 and 0", be.ConsistentIndex(), be.PendingBytes())
	}
	if n := logs.count(`msg="backend commits succeed again`); n != 1 {
		t.Fatalf("recovery logged %d times, want once", n)
	}
	t.Logf("%d failed commits before space returned", be.CommitFailures())
}
