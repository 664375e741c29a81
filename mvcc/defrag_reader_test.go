package mvcc

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/strata-db/strata/pagestore"
)

// TestBackendDefragWithReaderHeld runs Backend.Defrag while a read view
// taken before the deletes stays open throughout, as a leader's snapshot
// image for a follower does (raft keeps it for 30 s). The pages that view
// holds cannot be reused, so the file cannot shrink below them: defrag
// must return without growing the file (it used to move the same pages
// to the file's end step after step until the view went), and a defrag
// once the view is closed compacts the file.
func TestBackendDefragWithReaderHeld(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	ts := openTestStore(t, path, StoreConfig{})
	defer ts.close()
	s := ts.s
	val := make([]byte, 1000)
	const n = 150
	ci := uint64(0)
	for i := 0; i < n; i++ {
		ci++
		if _, err := s.Put(ci, 1, &pb.PutRequest{Key: []byte(fmt.Sprintf("dash/%d", i)), Value: val}); err != nil {
			t.Fatal(err)
		}
		if err := ts.be.ForceCommit(); err != nil {
			t.Fatal(err)
		}
	}
	if err := ts.be.ForceCommit(); err != nil {
		t.Fatal(err)
	}
	rt, err := ts.be.BeginRead()
	if err != nil {
		t.Fatal(err)
	}
	// The store's close waits for readers: end this one first, on
	// failures too.
	open := true
	defer func() {
		if open {
			rt.Close()
		}
	}()
	ci++
	if _, err := s.DeleteRange(ci, 1, &pb.DeleteRangeRequest{Key: []byte("dash/"), RangeEnd: []byte("dash0")}); err != nil {
		t.Fatal(err)
	}
	ci++
	_, done, err := s.Compact(ci, 1, &pb.CompactionRequest{Revision: s.Rev()})
	if err != nil {
		t.Fatal(err)
	}
	<-done
	if err := ts.be.ForceCommit(); err != nil {
		t.Fatal(err)
	}
	before := ts.db.Stats()
	// The old steps made the file grow by their moved pages every few
	// steps, without end: stop at the first growth instead of waiting.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	steps, moved, grew := 0, 0, int64(0)
	err = ts.be.Defrag(ctx, func(p pagestore.DefragProgress) {
		steps, moved = p.Steps, p.MovedPages
		if p.FileSize > before.FileSize && grew == 0 {
			grew = p.FileSize
			cancel()
		}
	})
	if grew > 0 {
		t.Fatalf("defrag with a reader held: the file grew from %d to %d bytes in %d steps (%d pages moved)", before.FileSize, grew, steps, moved)
	}
	if err != nil {
		t.Fatalf("defrag with a reader held: %v after %d steps (%d pages moved)", err, steps, moved)
	}
	held := ts.db.Stats()
	open = false
	rt.Close()
	if err := ts.be.Defrag(context.Background(), nil); err != nil {
		t.Fatalf("defrag after the reader closed: %v", err)
	}
	after := ts.db.Stats()
	t.Logf("file %d bytes, %d after defrag with a reader held (%d steps, %d pages moved), %d after the reader closed; %d in use",
		before.FileSize, held.FileSize, steps, moved, after.FileSize, after.InUseBytes)
	if after.FileSize > after.InUseBytes+20*4096 {
		t.Fatalf("after the reader closed: file %d bytes, %d in use", after.FileSize, after.InUseBytes)
	}
}
