package mvcc

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/strata-db/strata/internal/poll"
	"github.com/strata-db/strata/internal/testseed"
)

// histEvent is one change as the apply hook saw it.
type histEvent struct {
	rev  int64
	text string // fmtEvent of the change
	key  []byte
}

// TestWatchConcurrent runs writes (puts, deletes, multi-key txns) against
// watchers created and canceled concurrently on several streams, from old
// and current revisions, and checks that every watcher got exactly the
// matching history from its start, in order, with no gap or duplicate;
// canceled ones a prefix of it. Run it with -race.
func TestWatchConcurrent(t *testing.T) {
	seed := testseed.Seed(t)
	var histMu sync.Mutex
	var hist []histEvent
	ts := openWatchStoreCfg(t, StoreConfig{OnEvents: func(rev int64, evs []Event) {
		histMu.Lock()
		defer histMu.Unlock()
		for _, e := range evs {
			pe := &mvccpb.Event{Type: e.Type, Kv: e.KV}
			hist = append(hist, histEvent{rev: rev, text: fmtEvent(pe), key: e.KV.Key})
		}
	}}, WatchConfig{SyncBatchRevs: 100, ChanSize: 16})

	const ops = 3000
	key := func(r *rand.Rand) string { return fmt.Sprintf("c/%02d", r.IntN(16)) }
	writerDone := make(chan struct{})
	go func() { // the apply goroutine
		defer close(writerDone)
		r := rand.New(rand.NewPCG(seed, 2))
		for i := 0; i < ops; i++ {
			switch n := r.IntN(10); {
			case n < 7:
				ts.put(key(r), fmt.Sprint(i))
			case n < 8:
				ts.del(key(r), "")
			case n < 9:
				ts.del("c/03", "c/07")
			default:
				ts.ci++
				_, err := ts.Txn(ts.ci, 1, &pb.TxnRequest{Success: []*pb.RequestOp{
					{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(key(r)), Value: []byte("t1")}}},
					{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(key(r)), Value: []byte("t2")}}},
				}})
				if err != nil {
					t.Error(err)
					return
				}
			}
			if i%100 == 0 {
				time.Sleep(time.Millisecond)
			}
			if i%1000 == 999 {
				// Compaction races catch-up reads: a watcher below it must
				// get a compacted response, after a correct prefix.
				ts.ci++
				if _, _, err := ts.Compact(ts.ci, 1, &pb.CompactionRequest{Revision: ts.Rev() - 800}); err != nil {
					t.Error(err)
					return
				}
			}
		}
	}()

	type record struct {
		req       WatchRequest
		from      int64
		events    []string
		canceled  bool
		compacted int64
	}
	type streamState struct {
		mu   sync.Mutex
		recs map[WatchID]*record
	}
	const nStreams = 4
	states := make([]*streamState, nStreams)
	var wg, consumers sync.WaitGroup
	streams := make([]*WatchStream, nStreams)
	for si := range streams {
		ws := ts.NewWatchStream()
		streams[si] = ws
		st := &streamState{recs: map[WatchID]*record{}}
		states[si] = st
		get := func(id WatchID) *record {
			rec := st.recs[id]
			if rec == nil {
				rec = &record{}
				st.recs[id] = rec
			}
			return rec
		}
		consumers.Add(1)
		go func() {
			defer consumers.Done()
			for r := range ws.Chan() {
				st.mu.Lock()
				rec := get(r.WatchID)
				switch {
				case r.Created:
					if rec.req.StartRev == 0 {
						rec.from = r.Revision + 1
					}
				case r.CompactRevision != 0:
					rec.compacted = r.CompactRevision
				case r.Canceled:
					rec.canceled = true
				}
				for _, e := range r.Events {
					rec.events = append(rec.events, fmtEvent(e))
				}
				st.mu.Unlock()
				if rand.IntN(50) == 0 {
					time.Sleep(time.Millisecond) // now and then a slow reader
				}
			}
		}()
		wg.Add(1)
		go func() { // a client creating and canceling watchers
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(10+si)))
			var ids []WatchID
			for {
				select {
				case <-writerDone:
					return
				default:
				}
				req := WatchRequest{}
				switch r.IntN(3) {
				case 0:
					req.Key = []byte(key(r))
				case 1:
					req.Key, req.End = []byte("c/"), []byte("c0")
				default:
					req.Key, req.End = []byte("c/04"), []byte("c/11")
				}
				if r.IntN(2) == 0 {
					req.StartRev = max(1, ts.Rev()-r.Int64N(500))
				}
				// Hold the lock across Watch so that the created response
				// finds the request.
				st.mu.Lock()
				id, err := ws.Watch(req)
				if err != nil {
					st.mu.Unlock()
					t.Error(err)
					return
				}
				rec := get(id)
				rec.req = req
				if req.StartRev != 0 {
					rec.from = req.StartRev
				}
				st.mu.Unlock()
				ids = append(ids, id)
				if r.IntN(4) == 0 {
					if err := ws.Cancel(ids[0]); err != nil {
						t.Error(err)
					}
					ids = ids[1:]
				}
				time.Sleep(time.Duration(r.IntN(3)) * time.Millisecond)
			}
		}()
	}
	<-writerDone
	wg.Wait()
	histMu.Lock()
	final := append([]histEvent(nil), hist...)
	histMu.Unlock()
	expect := func(rec *record) []string {
		w := &watcher{key: rec.req.Key, end: rec.req.End}
		if len(w.end) == 1 && w.end[0] == 0 {
			w.end = []byte{}
		} else if len(w.end) == 0 {
			w.end = nil
		}
		var out []string
		for _, h := range final {
			if h.rev >= rec.from && w.contains(h.key) {
				out = append(out, h.text)
			}
		}
		return out
	}
	// Wait for every live watcher to have its whole history.
	poll.UntilNil(t, "every live watcher to have its whole history", func() error {
		behind := ""
		for si, st := range states {
			st.mu.Lock()
			for id, rec := range st.recs {
				if !rec.canceled && rec.compacted == 0 && len(rec.events) < len(expect(rec)) {
					behind = fmt.Sprintf("stream %d watch %d has %d of %d events", si, id, len(rec.events), len(expect(rec)))
				}
			}
			st.mu.Unlock()
		}
		if behind != "" {
			return errors.New(behind)
		}
		return nil
	})
	for _, ws := range streams {
		ws.Close()
	}
	consumers.Wait()
	n, compacted := 0, 0
	for si, st := range states {
		for id, rec := range st.recs {
			want := expect(rec)
			if (rec.canceled || rec.compacted != 0) && len(rec.events) <= len(want) {
				want = want[:len(rec.events)]
			}
			if rec.compacted != 0 {
				compacted++
				// It was behind the compaction when told so.
				next := rec.from
				if len(want) > 0 {
					next = revOf(want[len(want)-1]) + 1
				}
				if next >= rec.compacted {
					t.Fatalf("stream %d watch %d: compacted at %d although it needed only revisions from %d", si, id, rec.compacted, next)
				}
			}
			if len(rec.events) != len(want) {
				t.Fatalf("stream %d watch %d (%+v from %d, canceled %v): %d events, want %d", si, id, rec.req, rec.from, rec.canceled, len(rec.events), len(want))
			}
			for i := range want {
				if rec.events[i] != want[i] {
					t.Fatalf("stream %d watch %d (%+v from %d): event %d is %q, want %q", si, id, rec.req, rec.from, i, rec.events[i], want[i])
				}
			}
			n++
		}
	}
	t.Logf("%d watchers checked over %d revisions, %d of them compacted", n, ts.Rev(), compacted)
}

// revOf parses the revision out of a fmtEvent string.
func revOf(s string) int64 {
	var rev int64
	at := strings.LastIndexByte(s, '@')
	fmt.Sscanf(s[at+1:], "%d", &rev)
	return rev
}
