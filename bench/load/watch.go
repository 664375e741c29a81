package load

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// eventStall is how long the watch workloads wait for events that stopped
// arriving before they count the rest as missing.
const eventStall = 10 * time.Second

// stamp is an event (or a put) by revision and time.
type stamp struct {
	rev int64
	at  time.Time
}

// watchStream is one gRPC watch stream with watches created on it.
type watchStream struct {
	s       pb.Watch_WatchClient
	watches int // created successfully
	keys    map[string]int
	events  []stamp
	last    time.Time
	err     error
}

// openStream opens a watch stream and creates one watch per key, one at a
// time, recording each creation's round trip (request to "created"
// response) in sh when it is not nil.
func openStream(ctx context.Context, c *conn, keys [][]byte, prevKV bool, sh *Shard) *watchStream {
	ws := &watchStream{keys: map[string]int{}}
	fail := func(err error, left int) *watchStream {
		ws.err = err
		for range left {
			if sh != nil {
				sh.Observe(0, err)
			}
		}
		return ws
	}
	s, err := c.watch.Watch(ctx)
	if err != nil {
		return fail(err, len(keys))
	}
	ws.s = s
	for i, k := range keys {
		st := time.Now()
		req := &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{Key: k, PrevKv: prevKV}}}
		if err := s.Send(req); err != nil {
			return fail(err, len(keys)-i)
		}
		for {
			resp, err := s.Recv()
			if err != nil {
				return fail(err, len(keys)-i)
			}
			if resp.Canceled {
				err = errors.New("watch canceled: " + resp.CancelReason)
				if sh != nil {
					sh.Observe(0, err)
				}
				break
			}
			if resp.Created {
				if sh != nil {
					sh.Observe(time.Since(st), nil)
				}
				ws.watches++
				ws.keys[string(k)]++
				break
			}
		}
	}
	return ws
}

// receive records every event on the stream until it ends, adding the
// event count to got.
func (ws *watchStream) receive(got *atomic.Int64, done *atomic.Int64) {
	if ws.s == nil {
		return
	}
	for {
		resp, err := ws.s.Recv()
		if err != nil {
			return
		}
		now := time.Now()
		for _, ev := range resp.Events {
			ws.events = append(ws.events, stamp{ev.Kv.ModRevision, now})
		}
		if n := len(resp.Events); n > 0 {
			ws.last = now
			got.Add(int64(n))
			done.Add(int64(n))
		}
	}
}

// awaitEvents waits until got reaches want, or no event arrived for
// eventStall, or ctx ends.
func awaitEvents(ctx context.Context, got *atomic.Int64, want int64) {
	last, lastAt := got.Load(), time.Now()
	for ctx.Err() == nil {
		n := got.Load()
		if n >= want {
			return
		}
		if n != last {
			last, lastAt = n, time.Now()
		} else if time.Since(lastAt) > eventStall {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// eventSummary turns received events into latencies from the end of the
// put that made them (zero when the event came first). Events are
// measured from start to the last event received.
func eventSummary(name string, streams []*watchStream, puts map[int64]time.Time, want int64, start time.Time) *Summary {
	var lats []time.Duration
	errs := map[string]int{}
	end := start
	var got int64
	for _, ws := range streams {
		if ws.last.After(end) {
			end = ws.last
		}
		for _, ev := range ws.events {
			got++
			put, ok := puts[ev.rev]
			if !ok {
				errs["event at a revision this run did not put"]++
				continue
			}
			lats = append(lats, max(0, ev.at.Sub(put)))
		}
	}
	if got < want {
		errs[fmt.Sprintf("event not received within %v of the last one", eventStall)] += int(want - got)
	}
	return Summarize(name, lats, errs, end.Sub(start))
}

// closeStreams ends the streams (through their context) and waits for the
// receivers.
func closeStreams(cancel context.CancelFunc, wg *sync.WaitGroup) {
	cancel()
	wg.Wait()
}

// watchLoad is etcd benchmark's watch workload: --streams streams of
// --watch-per-stream watches over --watched-key-total keys, then
// --put-total puts on those keys, counting the events every watcher gets.
func (e *env) watchLoad(ctx context.Context) (*Summary, error) {
	o := e.o
	watched := make([][]byte, o.WatchedKeyTotal)
	rng := newRand()
	for i := range watched {
		n := i % o.KeySpaceSize
		if !o.SeqKeys {
			n = rng.IntN(o.KeySpaceSize)
		}
		watched[i] = newKeyGen("", o.KeySize).key(n)
	}

	// Phase 1: create the watches.
	create := NewRecorder("watch-create", &e.done)
	sctx, cancelStreams := context.WithCancel(ctx)
	streams := make([]*watchStream, o.Streams)
	finish := e.phase("watch-create", int64(o.Streams*o.WatchPerStream), "watches")
	var wg sync.WaitGroup
	start := time.Now()
	for s := range streams {
		keys := make([][]byte, o.WatchPerStream)
		for j := range keys {
			keys[j] = watched[(s*o.WatchPerStream+j)%len(watched)]
		}
		c, sh := e.clients[s%len(e.clients)], create.Shard()
		wg.Go(func() { streams[s] = openStream(sctx, c, keys, false, sh) })
	}
	wg.Wait()
	create.SetInterval(start, time.Now())
	finish()
	numWatchers := map[string]int{}
	for _, ws := range streams {
		for k, n := range ws.keys {
			numWatchers[k] += n
		}
	}

	// Phase 2: put on the watched keys and receive the events.
	var want int64
	for i := 0; i < o.PutTotal; i++ {
		want += int64(numWatchers[string(watched[i%len(watched)])])
	}
	var got atomic.Int64
	var rwg sync.WaitGroup
	finish = e.phase("watch-events", want, "events")
	for _, ws := range streams {
		rwg.Go(func() { ws.receive(&got, &e.done) })
	}
	putRec := NewRecorder("watch-put", nil)
	lim := newLimiter(o.PutRate, 1)
	var pmu sync.Mutex
	puts := map[int64]time.Time{}
	start, end := e.pool(ctx, o.PutTotal, func(c *conn) func(int) {
		sh := putRec.Shard()
		return func(i int) {
			if lim.wait(ctx) != nil {
				return
			}
			key := watched[i%len(watched)]
			st := time.Now()
			resp, err := c.kv.Put(ctx, &pb.PutRequest{Key: key, Value: []byte("data")})
			now := time.Now()
			sh.Observe(now.Sub(st), err)
			if err != nil {
				atomic.AddInt64(&want, -int64(numWatchers[string(key)]))
				return
			}
			pmu.Lock()
			puts[resp.Header.Revision] = now
			pmu.Unlock()
		}
	})
	putRec.SetInterval(start, end)
	awaitEvents(ctx, &got, atomic.LoadInt64(&want))
	closeStreams(cancelStreams, &rwg)
	finish()
	events := eventSummary("watch-events", streams, puts, atomic.LoadInt64(&want), start)
	top := *events
	top.Parts = []*Summary{create.Summary(), putRec.Summary(), events}
	return &top, nil
}

// watchLatency is etcd benchmark's watch-latency workload: --streams
// streams of --watchers-per-stream watchers on one key, then --put-total
// puts of that key at --put-rate from one more connection. Each event's
// latency is from the end of its put to its arrival.
func (e *env) watchLatency(ctx context.Context) (*Summary, error) {
	o := e.o
	key, val := randBytes(o.KeySize), randBytes(o.ValSize)
	putConn, err := e.dialer.dial(ctx, e.o.Endpoints[0])
	if err != nil {
		return nil, err
	}
	defer putConn.close()

	sctx, cancelStreams := context.WithCancel(ctx)
	defer cancelStreams()
	streams := make([]*watchStream, o.Streams)
	var wg sync.WaitGroup
	for s := range streams {
		keys := make([][]byte, o.WatchPerStream)
		for j := range keys {
			keys[j] = key
		}
		c := e.clients[s%len(e.clients)]
		wg.Go(func() { streams[s] = openStream(sctx, c, keys, o.PrevKV, nil) })
	}
	wg.Wait()
	watchers := 0
	for _, ws := range streams {
		watchers += ws.watches
		if ws.err != nil {
			fmt.Fprintf(e.stderr, "stratabench watch-latency: watch stream: %v\n", errText(ws.err))
		}
	}
	if watchers == 0 {
		return nil, errors.New("no watch could be created")
	}

	var got atomic.Int64
	var rwg sync.WaitGroup
	finish := e.phase("watch-latency", int64(o.PutTotal*watchers), "events")
	for _, ws := range streams {
		rwg.Go(func() { ws.receive(&got, &e.done) })
	}
	putRec := NewRecorder("watch-latency-put", nil)
	sh := putRec.Shard()
	lim := newLimiter(o.PutRate, o.PutRate)
	puts := map[int64]time.Time{}
	start := time.Now()
	for i := 0; i < o.PutTotal && ctx.Err() == nil; i++ {
		if lim.wait(ctx) != nil {
			break
		}
		st := time.Now()
		resp, err := putConn.kv.Put(ctx, &pb.PutRequest{Key: key, Value: val})
		now := time.Now()
		sh.Observe(now.Sub(st), err)
		if err == nil {
			puts[resp.Header.Revision] = now
		}
	}
	putRec.SetInterval(start, time.Now())
	want := int64(len(puts) * watchers)
	awaitEvents(ctx, &got, want)
	closeStreams(cancelStreams, &rwg)
	finish()
	ev := eventSummary("watch-latency-watch", streams, puts, want, start)
	top := *ev
	top.Parts = []*Summary{putRec.Summary(), ev}
	return &top, nil
}
