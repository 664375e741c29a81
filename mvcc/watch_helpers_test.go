package mvcc

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/strata-db/strata/pagestore"
)

// watchTestStore is a WatchableStore on a real page-store file. Its write
// methods must be called from one goroutine at a time, as apply does.
type watchTestStore struct {
	*WatchableStore
	t  testing.TB
	db *pagestore.DB
	be *Backend
	ci uint64
}

func openWatchStore(t testing.TB, wcfg WatchConfig) *watchTestStore {
	t.Helper()
	return openWatchStoreCfg(t, StoreConfig{}, wcfg)
}

func openWatchStoreCfg(t testing.TB, scfg StoreConfig, wcfg WatchConfig) *watchTestStore {
	t.Helper()
	db, err := pagestore.Open(filepath.Join(t.TempDir(), "db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	// A short batch interval, so that catch-up reads see both committed
	// pages and the published uncommitted batch.
	be, err := NewBackend(db, BackendConfig{BatchInterval: 5 * time.Millisecond, BatchLimit: 100})
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewWatchableStore(be, scfg, wcfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := &watchTestStore{WatchableStore: s, t: t, db: db, be: be}
	t.Cleanup(ts.close)
	return ts
}

func (ts *watchTestStore) close() {
	if err := ts.WatchableStore.Close(); err != nil {
		ts.t.Error(err)
	}
	if err := ts.be.Close(); err != nil {
		ts.t.Error(err)
	}
	if err := ts.db.Close(); err != nil {
		ts.t.Error(err)
	}
}

func (ts *watchTestStore) put(k, v string) int64 {
	ts.ci++
	r, err := ts.Put(ts.ci, 1, &pb.PutRequest{Key: []byte(k), Value: []byte(v)})
	if err != nil {
		ts.t.Fatal(err)
	}
	return r.Header.Revision
}

func (ts *watchTestStore) del(k, end string) int64 {
	ts.ci++
	var e []byte
	if end != "" {
		e = []byte(end)
	}
	r, err := ts.DeleteRange(ts.ci, 1, &pb.DeleteRangeRequest{Key: []byte(k), RangeEnd: e})
	if err != nil {
		ts.t.Fatal(err)
	}
	return r.Header.Revision
}

func (ts *watchTestStore) compact(rev int64) {
	ts.ci++
	_, done, err := ts.Compact(ts.ci, 1, &pb.CompactionRequest{Revision: rev})
	if err != nil {
		ts.t.Fatal(err)
	}
	<-done
}

// recv returns the next response, failing the test after 10 s.
func recv(t testing.TB, ws *WatchStream) WatchResponse {
	t.Helper()
	select {
	case r, ok := <-ws.Chan():
		if !ok {
			t.Fatal("watch stream closed")
		}
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for a watch response")
	}
	return WatchResponse{}
}

// expectNone fails if a response arrives within d.
func expectNone(t testing.TB, ws *WatchStream, d time.Duration) {
	t.Helper()
	select {
	case r := <-ws.Chan():
		t.Fatalf("unexpected response %s", fmtResp(r))
	case <-time.After(d):
	}
}

// recvEvents collects n events of watch id, skipping other responses
// only if they are progress responses.
func recvEvents(t testing.TB, ws *WatchStream, id WatchID, n int) []*mvccpb.Event {
	t.Helper()
	var evs []*mvccpb.Event
	for len(evs) < n {
		r := recv(t, ws)
		if r.WatchID != id || len(r.Events) == 0 {
			t.Fatalf("want events of watch %d, got %s", id, fmtResp(r))
		}
		evs = append(evs, r.Events...)
	}
	if len(evs) != n {
		t.Fatalf("want %d events, got %d: %s", n, len(evs), fmtEvents(evs))
	}
	return evs
}

func mustWatch(t testing.TB, ws *WatchStream, r WatchRequest) WatchID {
	t.Helper()
	id, err := ws.Watch(r)
	if err != nil {
		t.Fatal(err)
	}
	c := recv(t, ws)
	if !c.Created || c.Canceled || c.WatchID != id {
		t.Fatalf("want created response for %d, got %s", id, fmtResp(c))
	}
	return id
}

func fmtEvents(evs []*mvccpb.Event) string {
	s := ""
	for _, e := range evs {
		s += fmtEvent(e) + " "
	}
	return s
}

func fmtEvent(e *mvccpb.Event) string {
	s := fmt.Sprintf("%s %s@%d", e.Type, e.Kv.Key, e.Kv.ModRevision)
	if e.Type == mvccpb.Event_PUT {
		s += "=" + string(e.Kv.Value)
	}
	if e.PrevKv != nil {
		s += fmt.Sprintf("(prev %s@%d)", e.PrevKv.Value, e.PrevKv.ModRevision)
	}
	return s
}

func fmtResp(r WatchResponse) string {
	return fmt.Sprintf("{id %d rev %d compact %d created %v canceled %v reason %q events [%s]}",
		r.WatchID, r.Revision, r.CompactRevision, r.Created, r.Canceled, r.CancelReason, fmtEvents(r.Events))
}

// checkEvents compares events with want, written as fmtEvent prints them.
func checkEvents(t testing.TB, got []*mvccpb.Event, want ...string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d events [%s], want %d %v", len(got), fmtEvents(got), len(want), want)
	}
	for i := range got {
		if s := fmtEvent(got[i]); s != want[i] {
			t.Fatalf("event %d: got %q, want %q (all: %s)", i, s, want[i], fmtEvents(got))
		}
	}
}
