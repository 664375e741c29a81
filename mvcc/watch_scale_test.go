package mvcc

import (
	"bytes"
	"flag"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var watchScaleFull = flag.Bool("watch.full", false, "run TestWatchScale with 10,000 watchers over 100 streams")

// scaleConfig shapes a fan-out run: streams × perStream watchers over
// `keys` keys. Watcher j watches a single key, or (every 10th) a prefix
// of ten keys, or (every 50th) every key from the middle on; every 7th
// starts at revision 2, so it catches up over `prefill` puts while live
// writes go on. Stream 0 reads with slowDelay per response.
type scaleConfig struct {
	streams, perStream int
	keys               int
	prefill, puts      int
	putInterval        time.Duration // pacing of the live puts; 0: as fast as apply goes
	slowDelay          time.Duration
}

type scaleResult struct {
	latencies        []time.Duration // put to receipt, live watchers of fast streams
	fastDone         time.Duration   // from the first live put until every fast watcher had everything
	slowDone         time.Duration
	deliveries       int64
	maxPut           time.Duration // longest single put (apply) call
	puts             []time.Duration
	slowWatchersSeen int64 // peak SlowWatcherTotal during the puts
}

func scaleKey(i int) string { return fmt.Sprintf("key/%03d", i) }

func scaleRequest(j, keys int) WatchRequest {
	r := WatchRequest{}
	switch {
	case j%10 == 0:
		d := (j / 10) % 10
		r.Key, r.End = []byte(fmt.Sprintf("key/0%d", d)), []byte(fmt.Sprintf("key/0%c", '0'+d+1))
	case j%50 == 1:
		r.Key, r.End = []byte(scaleKey(keys/2)), []byte{0}
	default:
		r.Key = []byte(scaleKey(j % keys))
	}
	if j%7 == 3 {
		r.StartRev = 2
	}
	return r
}

func matches(r WatchRequest, key []byte) bool {
	switch {
	case len(r.End) == 0:
		return bytes.Equal(key, r.Key)
	case len(r.End) == 1 && r.End[0] == 0:
		return bytes.Compare(key, r.Key) >= 0
	}
	return bytes.Compare(key, r.Key) >= 0 && bytes.Compare(key, r.End) < 0
}

// scaleWatcher is one watcher's record, written by its stream's consumer.
type scaleWatcher struct {
	req     WatchRequest
	from    int64   // first revision it must see
	revs    []int64 // revisions of the events received
	created bool
}

func runWatchScale(t testing.TB, c scaleConfig) scaleResult {
	ts := openWatchStore(t, WatchConfig{})
	keyOf := []string{"", ""} // by revision: revision 1 has no key
	for i := 0; i < c.prefill; i++ {
		k := scaleKey(i % c.keys)
		ts.put(k, "p")
		keyOf = append(keyOf, k)
	}
	total := c.prefill + c.puts + 2
	putAt := make([]atomic.Int64, total+1)

	var res scaleResult
	var fastGot, slowGot atomic.Int64
	var latMu sync.Mutex
	streams := make([]*WatchStream, c.streams)
	watchers := make([][]*scaleWatcher, c.streams)
	var wg sync.WaitGroup
	for si := range streams {
		ws := ts.NewWatchStream()
		streams[si] = ws
		byID := map[WatchID]*scaleWatcher{}
		for k := 0; k < c.perStream; k++ {
			sw := &scaleWatcher{req: scaleRequest(si*c.perStream+k, c.keys)}
			id, err := ws.Watch(sw.req)
			if err != nil {
				t.Fatal(err)
			}
			byID[id] = sw
			watchers[si] = append(watchers[si], sw)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lats []time.Duration
			defer func() {
				latMu.Lock()
				res.latencies = append(res.latencies, lats...)
				latMu.Unlock()
			}()
			for r := range ws.Chan() {
				sw := byID[r.WatchID]
				if sw == nil {
					t.Errorf("stream %d: response for unknown watch %s", si, fmtResp(r))
					return
				}
				if r.Created {
					sw.created = true
					sw.from = sw.req.StartRev
					if sw.from == 0 {
						sw.from = r.Revision + 1
					}
					continue
				}
				if !sw.created || r.Canceled {
					t.Errorf("stream %d: out of order %s", si, fmtResp(r))
					return
				}
				now := time.Now().UnixNano()
				for _, e := range r.Events {
					sw.revs = append(sw.revs, e.Kv.ModRevision)
					if si != 0 && sw.req.StartRev == 0 {
						lats = append(lats, time.Duration(now-putAt[e.Kv.ModRevision].Load()))
					}
				}
				if si == 0 {
					slowGot.Add(int64(len(r.Events)))
				} else {
					fastGot.Add(int64(len(r.Events)))
				}
				if si == 0 && c.slowDelay > 0 {
					time.Sleep(c.slowDelay)
				}
			}
		}()
	}
	defer func() { // on failure; Close is idempotent
		for _, ws := range streams {
			ws.Close()
		}
		wg.Wait()
	}()

	// perKey[key][slow][class] counts the watchers of a key, by stream
	// kind (1: the slow stream) and start: class 0 counts them all,
	// class 1 only those from revision 2.
	perKey := map[string]*[2][2]int{}
	for k := 0; k < c.keys; k++ {
		kc := &[2][2]int{}
		for si := range watchers {
			for _, sw := range watchers[si] {
				if matches(sw.req, []byte(scaleKey(k))) {
					slow := min(si, 1) ^ 1
					kc[slow][0]++
					if sw.req.StartRev != 0 {
						kc[slow][1]++
					}
				}
			}
		}
		perKey[scaleKey(k)] = kc
	}

	start := time.Now()
	for i := 0; i < c.puts; i++ {
		if c.putInterval > 0 {
			if d := time.Until(start.Add(time.Duration(i) * c.putInterval)); d > 0 {
				time.Sleep(d)
			}
		}
		k := scaleKey((i * 7) % c.keys)
		rev := ts.Rev() + 1
		putAt[rev].Store(time.Now().UnixNano())
		t0 := time.Now()
		ts.put(k, "v")
		d := time.Since(t0)
		res.maxPut = max(res.maxPut, d)
		res.puts = append(res.puts, d)
		res.slowWatchersSeen = max(res.slowWatchersSeen, ts.SlowWatcherTotal())
		keyOf = append(keyOf, k)
	}
	last := ts.Rev()
	putsDone := time.Since(start)

	// What every watcher must get: its matching revisions from its start.
	// No write happens while watchers are created, so a watcher from
	// revision 0 starts right after the prefill.
	want := func(sw *scaleWatcher) []int64 {
		from := sw.req.StartRev
		if from == 0 {
			from = int64(c.prefill) + 2
		}
		var revs []int64
		for rev := max(from, 2); rev <= last; rev++ {
			if matches(sw.req, []byte(keyOf[rev])) {
				revs = append(revs, rev)
			}
		}
		return revs
	}
	// The totals come from per-key counts made before the puts, so that
	// no verification work competes with delivery while it is timed.
	var wantFast, wantSlow int64
	for rev := 2; rev <= int(last); rev++ {
		class := 1 // a prefill revision: only watchers from revision 2 see it
		if rev >= c.prefill+2 {
			class = 0
		}
		kc := perKey[keyOf[rev]]
		wantFast += int64(kc[0][class])
		wantSlow += int64(kc[1][class])
	}
	deadline := time.Now().Add(2 * time.Minute)
	for res.fastDone == 0 || res.slowDone == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("timed out: fast streams %d/%d events, slow stream %d/%d", fastGot.Load(), wantFast, slowGot.Load(), wantSlow)
		}
		if res.fastDone == 0 && fastGot.Load() >= wantFast {
			res.fastDone = time.Since(start)
		}
		if res.slowDone == 0 && slowGot.Load() >= wantSlow {
			res.slowDone = time.Since(start)
		}
		time.Sleep(time.Millisecond)
	}
	_ = putsDone
	for _, ws := range streams {
		ws.Close()
	}
	wg.Wait()
	for si := range watchers {
		for k, sw := range watchers[si] {
			if w := want(sw); !slices.Equal(sw.revs, w) {
				t.Fatalf("stream %d watcher %d (%q-%q from %d): got %d events %v, want %d %v",
					si, k, sw.req.Key, sw.req.End, sw.req.StartRev, len(sw.revs), head(sw.revs), len(w), head(w))
			}
		}
	}
	res.deliveries = wantFast + wantSlow
	return res
}

func head(revs []int64) []int64 {
	if len(revs) > 20 {
		return revs[:20]
	}
	return revs
}

func TestWatchScale(t *testing.T) {
	c := scaleConfig{streams: 10, perStream: 100, keys: 100, prefill: 300, puts: 700, slowDelay: 2 * time.Millisecond}
	if *watchScaleFull {
		c.streams = 100
	}
	res := runWatchScale(t, c)
	t.Logf("%d watchers over %d streams, %d live puts: %d deliveries, fast watchers done in %v, slow stream in %v, longest put %v, peak slow watchers %d",
		c.streams*c.perStream, c.streams, c.puts, res.deliveries, res.fastDone, res.slowDone, res.maxPut, res.slowWatchersSeen)
	if res.fastDone >= res.slowDone {
		t.Errorf("the slow stream finished first (%v <= %v): it is not slow enough to show anything", res.slowDone, res.fastDone)
	}
}
