package mvcc

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/internal/poll"
)

func TestWatchLive(t *testing.T) {
	ts := openWatchStore(t, WatchConfig{})
	ts.put("a", "0") // rev 2
	ws := ts.NewWatchStream()
	defer ws.Close()
	id, err := ws.Watch(WatchRequest{Key: []byte("a")})
	if err != nil || id != 0 {
		t.Fatalf("first auto id: %d %v", id, err)
	}
	if c := recv(t, ws); !c.Created || c.WatchID != 0 || c.Revision != 2 {
		t.Fatalf("created: %s", fmtResp(c))
	}
	ts.put("b", "x")
	ts.put("a", "1") // rev 4
	ts.del("a", "")  // rev 5
	r := recv(t, ws)
	if r.Revision != 4 {
		t.Fatalf("header revision: %s", fmtResp(r))
	}
	checkEvents(t, r.Events, "PUT a@4=1")
	checkEvents(t, recvEvents(t, ws, id, 1), "DELETE a@5")
	if ts.WatcherTotal() != 1 || ts.SlowWatcherTotal() != 0 {
		t.Fatalf("gauges: %d %d", ts.WatcherTotal(), ts.SlowWatcherTotal())
	}
}

// TestWatchHistorical catches up from an old revision through several
// sync rounds (SyncBatchRevs is small) over records that are partly
// committed to the page store and partly still in the pending batch, then
// goes on with live events without a gap or a duplicate.
func TestWatchHistorical(t *testing.T) {
	ts := openWatchStore(t, WatchConfig{SyncBatchRevs: 3})
	var want []string
	for i := 0; i < 20; i++ {
		k := fmt.Sprintf("p/%d", i%4)
		rev := ts.put(k, fmt.Sprint(i))
		if rev >= 5 {
			want = append(want, fmt.Sprintf("PUT %s@%d=%d", k, rev, i))
		}
		ts.put("q/other", "x")
		if i == 10 {
			if err := ts.be.ForceCommit(); err != nil {
				t.Fatal(err)
			}
		}
	}
	rev := ts.del("p/", "p0") // deletes the four p/ keys in one revision
	for i := 0; i < 4; i++ {
		want = append(want, fmt.Sprintf("DELETE p/%d@%d", i, rev))
	}
	ws := ts.NewWatchStream()
	defer ws.Close()
	id := mustWatch(t, ws, WatchRequest{Key: []byte("p/"), End: []byte("p0"), StartRev: 5})
	checkEvents(t, recvEvents(t, ws, id, len(want)), want...)
	rev = ts.put("p/9", "live")
	checkEvents(t, recvEvents(t, ws, id, 1), fmt.Sprintf("PUT p/9@%d=live", rev))
	if ts.SlowWatcherTotal() != 0 {
		t.Fatalf("slow watchers after catching up: %d", ts.SlowWatcherTotal())
	}
}

func TestWatchPrevKV(t *testing.T) {
	ts := openWatchStore(t, WatchConfig{})
	ts.put("k", "1") // 2
	ts.put("k", "2") // 3
	ts.del("k", "")  // 4
	ws := ts.NewWatchStream()
	defer ws.Close()
	hist := mustWatch(t, ws, WatchRequest{Key: []byte("k"), StartRev: 2, PrevKV: true})
	checkEvents(t, recvEvents(t, ws, hist, 3), "PUT k@2=1", "PUT k@3=2(prev 1@2)", "DELETE k@4(prev 2@3)")
	live := mustWatch(t, ws, WatchRequest{Key: []byte("k"), PrevKV: true})
	plain := mustWatch(t, ws, WatchRequest{Key: []byte("k")})
	ts.put("k", "3") // 5: a new generation, no previous key
	ts.put("k", "4") // 6
	got := map[WatchID][]*mvccpb.Event{}
	for n := 0; n < 6; n++ {
		r := recv(t, ws)
		got[r.WatchID] = append(got[r.WatchID], r.Events...)
	}
	checkEvents(t, got[hist], "PUT k@5=3", "PUT k@6=4(prev 3@5)")
	checkEvents(t, got[live], "PUT k@5=3", "PUT k@6=4(prev 3@5)")
	checkEvents(t, got[plain], "PUT k@5=3", "PUT k@6=4") // shared events untouched
}

// TestWatchSharedEventEncoding: a revision's only event is encoded once
// for every watcher that gets it as the store shared it, and the bytes
// are proto.Marshal's; a watcher whose event differs (PrevKv) and a
// revision of several events get no shared encoding.
func TestWatchSharedEventEncoding(t *testing.T) {
	ts := openWatchStore(t, WatchConfig{})
	ts.put("k", "1")  // 2
	ts.put("k1", "1") // 3
	ws1, ws2 := ts.NewWatchStream(), ts.NewWatchStream()
	defer ws1.Close()
	defer ws2.Close()
	mustWatch(t, ws1, WatchRequest{Key: []byte("k")})
	mustWatch(t, ws1, WatchRequest{Key: []byte("k"), End: []byte("l")})
	mustWatch(t, ws2, WatchRequest{Key: []byte("k")})
	withPrev := mustWatch(t, ws2, WatchRequest{Key: []byte("k"), PrevKV: true})
	ts.put("k", "2") // 4
	var shared []byte
	for i, ws := range []*WatchStream{ws1, ws2} {
		for n := 0; n < 2; n++ {
			r := recv(t, ws)
			enc := r.EncodedEvents()
			if i == 1 && r.WatchID == withPrev {
				checkEvents(t, r.Events, "PUT k@4=2(prev 1@2)")
				if enc != nil {
					t.Fatalf("the PrevKV watcher's response has the shared encoding %x", enc)
				}
				continue
			}
			checkEvents(t, r.Events, "PUT k@4=2")
			want, err := proto.Marshal(&pb.WatchResponse{Events: r.Events})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(enc, want) {
				t.Fatalf("stream %d watch %d: shared encoding %x, proto.Marshal %x", i, r.WatchID, enc, want)
			}
			if shared == nil {
				shared = enc
			} else if &shared[0] != &enc[0] {
				t.Fatalf("stream %d watch %d: the event was encoded again", i, r.WatchID)
			}
		}
	}
	ts.del("k", "l") // 5: two events; the range watcher gets both, the others one each
	for i, ws := range []*WatchStream{ws1, ws2} {
		for n := 0; n < 2; n++ {
			if r := recv(t, ws); r.EncodedEvents() != nil {
				t.Fatalf("stream %d watch %d: a revision of several events has a shared encoding", i, r.WatchID)
			}
		}
	}
}

func TestWatchFilters(t *testing.T) {
	ts := openWatchStore(t, WatchConfig{})
	ws := ts.NewWatchStream()
	defer ws.Close()
	noPut := mustWatch(t, ws, WatchRequest{Key: []byte("f"), Filters: []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NOPUT}})
	noDel := mustWatch(t, ws, WatchRequest{Key: []byte("f"), Filters: []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NODELETE}})
	ts.put("f", "1") // 2
	ts.del("f", "")  // 3
	ts.put("f", "2") // 4
	got := map[WatchID][]*mvccpb.Event{}
	for n := 0; n < 3; n++ {
		r := recv(t, ws)
		got[r.WatchID] = append(got[r.WatchID], r.Events...)
	}
	checkEvents(t, got[noPut], "DELETE f@3")
	checkEvents(t, got[noDel], "PUT f@2=1", "PUT f@4=2")
	// The same filters on a catch-up read.
	h := mustWatch(t, ws, WatchRequest{Key: []byte("f"), StartRev: 1, Filters: []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NOPUT}})
	checkEvents(t, recvEvents(t, ws, h, 1), "DELETE f@3")
	expectNone(t, ws, 50*time.Millisecond)
}

func TestWatchRanges(t *testing.T) {
	ts := openWatchStore(t, WatchConfig{})
	ws := ts.NewWatchStream()
	defer ws.Close()
	fromKey := mustWatch(t, ws, WatchRequest{Key: []byte("m"), End: []byte{0}})
	all := mustWatch(t, ws, WatchRequest{End: []byte{0}}) // empty key: "\x00", so every key
	rng := mustWatch(t, ws, WatchRequest{Key: []byte("b"), End: []byte("d")})
	if _, err := ws.Watch(WatchRequest{Key: []byte("z"), End: []byte("a")}); !errors.Is(err, ErrEmptyWatcherRange) {
		t.Fatalf("empty range: %v", err)
	}
	if r := recv(t, ws); !r.Created || !r.Canceled || r.WatchID != InvalidWatchID || r.CancelReason != ErrEmptyWatcherRange.Error() {
		t.Fatalf("empty range response: %s", fmtResp(r))
	}
	for _, k := range []string{"a", "b", "c", "d", "m", "zz"} {
		ts.put(k, "v")
	}
	got := map[WatchID]string{}
	for n := 0; n < 2+6+2; n++ {
		r := recv(t, ws)
		for _, e := range r.Events {
			got[r.WatchID] += string(e.Kv.Key)
		}
	}
	if got[fromKey] != "mzz" || got[all] != "abcdmzz" || got[rng] != "bc" {
		t.Fatalf("range matches: %v", got)
	}
}

func TestWatchCompacted(t *testing.T) {
	ts := openWatchStore(t, WatchConfig{})
	for i := 0; i < 10; i++ {
		ts.put("c", fmt.Sprint(i)) // revs 2..11
	}
	ts.compact(6)
	ws := ts.NewWatchStream()
	defer ws.Close()
	id := mustWatch(t, ws, WatchRequest{ID: 7, Key: []byte("c"), StartRev: 3})
	r := recv(t, ws)
	if r.WatchID != id || r.CompactRevision != 6 || !r.Canceled || len(r.Events) != 0 || r.Revision != 0 {
		t.Fatalf("compacted watch: %s", fmtResp(r))
	}
	poll.Until(t, "no watchers after compaction", func() bool { return ts.WatcherTotal() == 0 })
	// As in etcd, the ID stays taken until the client cancels it.
	if _, err := ws.Watch(WatchRequest{ID: id, Key: []byte("c")}); !errors.Is(err, ErrWatcherDuplicateID) {
		t.Fatalf("reuse of a compacted watch's ID: %v", err)
	}
	recv(t, ws)
	if err := ws.Cancel(id); err != nil {
		t.Fatalf("cancel of compacted watch: %v", err)
	}
	if r := recv(t, ws); r.WatchID != id || !r.Canceled || r.CompactRevision != 0 {
		t.Fatalf("cancel response: %s", fmtResp(r))
	}
	// At the compacted revision itself is fine.
	ok := mustWatch(t, ws, WatchRequest{Key: []byte("c"), StartRev: 6})
	checkEvents(t, recvEvents(t, ws, ok, 6), "PUT c@6=4", "PUT c@7=5", "PUT c@8=6", "PUT c@9=7", "PUT c@10=8", "PUT c@11=9")
	// A negative start revision: created and canceled, with etcd's text.
	if _, err := ws.Watch(WatchRequest{Key: []byte("c"), StartRev: -1}); !errors.Is(err, ErrCompacted) {
		t.Fatalf("negative start: %v", err)
	}
	r = recv(t, ws)
	if !r.Created || !r.Canceled || r.WatchID != InvalidWatchID || r.CancelReason != "etcdserver: mvcc: required revision has been compacted" {
		t.Fatalf("negative start response: %s", fmtResp(r))
	}
	if ts.WatcherTotal() != 1 {
		t.Fatalf("watchers: %d", ts.WatcherTotal())
	}
}

func TestWatchCancelAndIDs(t *testing.T) {
	ts := openWatchStore(t, WatchConfig{})
	ws := ts.NewWatchStream()
	defer ws.Close()
	a := mustWatch(t, ws, WatchRequest{ID: 1, Key: []byte("x")})
	if _, err := ws.Watch(WatchRequest{ID: 1, Key: []byte("y")}); !errors.Is(err, ErrWatcherDuplicateID) {
		t.Fatalf("duplicate id: %v", err)
	}
	if r := recv(t, ws); !r.Created || !r.Canceled || r.CancelReason != "mvcc: duplicate watch ID provided on the WatchStream" {
		t.Fatalf("duplicate id response: %s", fmtResp(r))
	}
	auto0 := mustWatch(t, ws, WatchRequest{Key: []byte("x")})
	auto1 := mustWatch(t, ws, WatchRequest{Key: []byte("x")})
	if a != 1 || auto0 != 0 || auto1 != 2 {
		t.Fatalf("ids: %d %d %d", a, auto0, auto1)
	}
	ts.put("x", "1")
	for n := 0; n < 3; n++ {
		recv(t, ws)
	}
	if err := ws.Cancel(a); err != nil {
		t.Fatal(err)
	}
	if r := recv(t, ws); r.WatchID != a || !r.Canceled || r.Created {
		t.Fatalf("cancel response: %s", fmtResp(r))
	}
	if err := ws.Cancel(a); !errors.Is(err, ErrWatcherNotExist) {
		t.Fatalf("second cancel: %v", err)
	}
	rev := ts.put("x", "2")
	got := map[WatchID]bool{}
	for n := 0; n < 2; n++ {
		r := recv(t, ws)
		checkEvents(t, r.Events, fmt.Sprintf("PUT x@%d=2", rev))
		got[r.WatchID] = true
	}
	if !got[auto0] || !got[auto1] {
		t.Fatalf("events went to %v", got)
	}
	expectNone(t, ws, 50*time.Millisecond)
	// The canceled ID can be chosen again.
	mustWatch(t, ws, WatchRequest{ID: 1, Key: []byte("x")})
	if ts.WatcherTotal() != 3 {
		t.Fatalf("watchers: %d", ts.WatcherTotal())
	}
	ws.Close()
	if _, ok := <-ws.Chan(); ok {
		t.Fatal("channel open after Close")
	}
	if ts.WatcherTotal() != 0 {
		t.Fatalf("watchers after close: %d", ts.WatcherTotal())
	}
	if _, err := ws.Watch(WatchRequest{Key: []byte("x")}); !errors.Is(err, ErrWatchStreamClosed) {
		t.Fatalf("watch on closed stream: %v", err)
	}
}

// TestWatchRequestProgress checks etcd's rule: a RequestProgress is
// answered (watch ID -1, the current revision) only when every watcher of
// the stream is synced.
func TestWatchRequestProgress(t *testing.T) {
	ts := openWatchStore(t, WatchConfig{ChanSize: 4})
	ts.put("a", "1") // 2
	ws := ts.NewWatchStream()
	defer ws.Close()
	if !ws.RequestProgress() {
		t.Fatal("no watchers: nothing is unsynced")
	}
	expectNone(t, ws, 20*time.Millisecond) // and, as etcd, nothing is sent

	id := mustWatch(t, ws, WatchRequest{Key: []byte("a")})
	if !ws.RequestProgress() {
		t.Fatal("synced watcher: progress refused")
	}
	if r := recv(t, ws); r.WatchID != InvalidWatchID || r.Revision != 2 || !r.IsProgressNotify() {
		t.Fatalf("progress: %s", fmtResp(r))
	}

	// A watcher waiting for a future revision is not there yet.
	fut := mustWatch(t, ws, WatchRequest{Key: []byte("a"), StartRev: 100})
	if ws.RequestProgress() {
		t.Fatal("progress granted with a watcher at a future revision")
	}
	if err := ws.Cancel(fut); err != nil {
		t.Fatal(err)
	}
	recv(t, ws)

	// Nobody reads: the stream's buffers fill and the watcher becomes a
	// victim, which is not synced.
	for i := 0; i < 40; i++ {
		ts.put("a", fmt.Sprint(i))
	}
	if ts.SlowWatcherTotal() != 1 {
		t.Fatalf("slow watchers: %d", ts.SlowWatcherTotal())
	}
	if ws.RequestProgress() {
		t.Fatal("progress granted with a victim on the stream")
	}
	evs := recvEvents(t, ws, id, 40)
	for i, e := range evs {
		if e.Kv.ModRevision != int64(3+i) {
			t.Fatalf("event %d: %s", i, fmtEvent(e))
		}
	}
	poll.Until(t, "the stream synced again", ws.RequestProgress)
	if r := recv(t, ws); r.WatchID != InvalidWatchID || r.Revision != 42 {
		t.Fatalf("progress after catching up: %s", fmtResp(r))
	}
}

func TestWatchProgressNotify(t *testing.T) {
	ts := openWatchStore(t, WatchConfig{ProgressNotifyInterval: 30 * time.Millisecond})
	ts.put("a", "1")
	ws := ts.NewWatchStream()
	defer ws.Close()
	pn := mustWatch(t, ws, WatchRequest{Key: []byte("a"), ProgressNotify: true})
	mustWatch(t, ws, WatchRequest{Key: []byte("b")}) // never gets progress
	for i := 0; i < 3; i++ {
		r := recv(t, ws)
		if r.WatchID != pn || !r.IsProgressNotify() || r.Revision != 2 {
			t.Fatalf("progress notify: %s", fmtResp(r))
		}
	}
	rev := ts.put("a", "2")
	for {
		r := recv(t, ws)
		if len(r.Events) > 0 {
			checkEvents(t, r.Events, fmt.Sprintf("PUT a@%d=2", rev))
			break
		}
	}
	if r := recv(t, ws); r.WatchID != pn || !r.IsProgressNotify() || r.Revision != rev {
		t.Fatalf("progress notify after an event: %s", fmtResp(r))
	}
}

func TestWatchFragment(t *testing.T) {
	evs := make([]*mvccpb.Event, 10)
	for i := range evs {
		evs[i] = &mvccpb.Event{Kv: &mvccpb.KeyValue{Key: []byte(fmt.Sprint(i)), Value: make([]byte, 100)}}
	}
	r := WatchResponse{WatchID: 3, Events: evs, Revision: 9, Fragment: true}
	parts := r.Proto(&pb.ResponseHeader{ClusterId: 1}, 350)
	if len(parts) < 4 {
		t.Fatalf("%d parts", len(parts))
	}
	n := 0
	for i, p := range parts {
		if p.Fragment != (i < len(parts)-1) || p.WatchId != 3 || p.Header.Revision != 9 || p.Header.ClusterId != 1 || len(p.Events) == 0 {
			t.Fatalf("part %d: %v", i, p)
		}
		n += len(p.Events)
	}
	if n != 10 {
		t.Fatalf("%d events in parts", n)
	}
	r.Fragment = false
	if parts := r.Proto(&pb.ResponseHeader{}, 350); len(parts) != 1 {
		t.Fatalf("unfragmented watch split in %d", len(parts))
	}
}

// TestWatchSlowReceiver: a stream nobody reads does not block apply and
// does not delay another stream; once read, it gets every event in order.
func TestWatchSlowReceiver(t *testing.T) {
	ts := openWatchStore(t, WatchConfig{ChanSize: 8})
	slow, fast := ts.NewWatchStream(), ts.NewWatchStream()
	defer slow.Close()
	defer fast.Close()
	const n = 2000
	sid := mustWatch(t, slow, WatchRequest{Key: []byte("s/"), End: []byte("s0")})
	for i := 0; i < 3; i++ { // more watchers on the slow stream, so it fills faster
		mustWatch(t, slow, WatchRequest{Key: []byte(fmt.Sprintf("s/%d", i))})
	}
	fid := mustWatch(t, fast, WatchRequest{Key: []byte("s/"), End: []byte("s0")})
	fastEvents := make(chan []*mvccpb.Event, 1)
	go func() {
		var evs []*mvccpb.Event
		for len(evs) < n {
			r, ok := <-fast.Chan()
			if !ok || r.WatchID != fid {
				break
			}
			evs = append(evs, r.Events...)
		}
		fastEvents <- evs
	}()
	var maxPut time.Duration
	for i := 0; i < n; i++ {
		t0 := time.Now()
		ts.put(fmt.Sprintf("s/%d", i%5), fmt.Sprint(i))
		maxPut = max(maxPut, time.Since(t0))
	}
	// The fast stream has everything while the slow one has not been read.
	var evs []*mvccpb.Event
	select {
	case evs = <-fastEvents:
	case <-time.After(10 * time.Second):
		t.Fatal("the fast stream is held up by the slow one")
	}
	checkOrder(t, evs, 2, n)
	if ts.SlowWatcherTotal() == 0 {
		ts.mu.Lock()
		for _, w := range slow.watchers {
			t.Logf("watcher %d state %d minRev %d notified %d victims %d", w.id, w.state, w.minRev, ts.notified, len(ts.victims))
		}
		ts.mu.Unlock()
		t.Logf("in %d out %d", len(slow.in), len(slow.out))
		t.Fatal("no slow watchers while a stream is not read")
	}
	t.Logf("longest put with a stuck stream: %v; slow watchers: %d", maxPut, ts.SlowWatcherTotal())
	var got []*mvccpb.Event
	for len(got) < n {
		r := recv(t, slow)
		if r.WatchID == sid {
			got = append(got, r.Events...)
		}
	}
	checkOrder(t, got, 2, n)
	poll.Until(t, "no slow watchers", func() bool { return ts.SlowWatcherTotal() == 0 })
}

// checkOrder checks that evs are n events at consecutive revisions from
// first.
func checkOrder(t *testing.T, evs []*mvccpb.Event, first int64, n int) {
	t.Helper()
	if len(evs) != n {
		t.Fatalf("got %d events, want %d", len(evs), n)
	}
	for i, e := range evs {
		if e.Kv.ModRevision != first+int64(i) {
			t.Fatalf("event %d at revision %d, want %d", i, e.Kv.ModRevision, first+int64(i))
		}
	}
}

// TestWatchManyUnsynced serves more unsynced watchers than one round takes,
// single keys and ranges alike, each from its own start revision.
func TestWatchManyUnsynced(t *testing.T) {
	ts := openWatchStore(t, WatchConfig{SyncBatchWatchers: 3, SyncBatchRevs: 7})
	for i := 0; i < 60; i++ {
		ts.put(fmt.Sprintf("u/%d", i%3), fmt.Sprint(i)) // revs 2..61
	}
	ws := ts.NewWatchStream()
	defer ws.Close()
	want := map[WatchID]int{}
	for i := 0; i < 20; i++ {
		start := int64(2 + 3*i)
		req := WatchRequest{Key: []byte("u/0"), StartRev: start}
		n := 0
		for rev := start; rev <= 61; rev++ {
			if i%2 == 1 || (rev-2)%3 == 0 {
				n++
			}
		}
		if i%2 == 1 {
			req.End = []byte("u0")
		}
		id, err := ws.Watch(req)
		if err != nil {
			t.Fatal(err)
		}
		want[id] = n
	}
	got := map[WatchID][]*mvccpb.Event{}
	total := 0
	for _, n := range want {
		total += n
	}
	for seen := 0; seen < total; {
		r := recv(t, ws)
		if r.Created {
			if len(got[r.WatchID]) > 0 {
				t.Fatalf("watch %d: created after its events", r.WatchID)
			}
			continue
		}
		got[r.WatchID] = append(got[r.WatchID], r.Events...)
		seen += len(r.Events)
	}
	for id, n := range want {
		evs := got[id]
		if len(evs) != n {
			t.Fatalf("watch %d: %d events, want %d", id, len(evs), n)
		}
		for i := 1; i < len(evs); i++ {
			if evs[i].Kv.ModRevision <= evs[i-1].Kv.ModRevision {
				t.Fatalf("watch %d out of order: %s", id, fmtEvents(evs))
			}
		}
	}
	poll.Until(t, "every watcher synced", func() bool { return ts.SlowWatcherTotal() == 0 })
}

// TestFragmentSizes checks the parts against the limit by measuring them.
func TestFragmentSizes(t *testing.T) {
	var evs []*mvccpb.Event
	for i := 0; i < 200; i++ {
		evs = append(evs, &mvccpb.Event{Type: mvccpb.Event_PUT, Kv: &mvccpb.KeyValue{
			Key: []byte(fmt.Sprintf("key-%d", i)), Value: make([]byte, i*7%300), ModRevision: int64(i + 2)}})
	}
	wr := &pb.WatchResponse{Header: &pb.ResponseHeader{Revision: 300, ClusterId: 9}, WatchId: 4, Events: evs}
	const limit = 1000
	parts := FragmentResponse(wr, limit)
	n := 0
	for i, p := range parts {
		sz := proto.Size(p)
		if len(p.Events) > 1 && sz >= limit {
			t.Fatalf("part %d: %d bytes with %d events", i, sz, len(p.Events))
		}
		// Adding the next event would have crossed the limit.
		if i < len(parts)-1 {
			next := &pb.WatchResponse{Header: p.Header, WatchId: p.WatchId, Fragment: true, Events: append(slices.Clone(p.Events), parts[i+1].Events[0])}
			if proto.Size(next) < limit {
				t.Fatalf("part %d stopped early at %d bytes", i, sz)
			}
		}
		n += len(p.Events)
	}
	if n != len(evs) {
		t.Fatalf("%d of %d events", n, len(evs))
	}
}
