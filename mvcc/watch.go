package mvcc

// The watchable store: etcd's watch semantics on top of Store.
//
// # Groups
//
// Every watcher is in exactly one place, recorded in watcher.state:
//
//	synced    it has been given every event up to `notified` (the revision
//	          of the last OnEvents call); the apply hook fans new events out
//	          to it directly.
//	unsynced  it still needs events from watcher.minRev on. The sync loop
//	          reads them from the backend (committed pages plus the
//	          published uncommitted batch) by revision range, at most
//	          SyncBatchRevs revisions for SyncBatchWatchers watchers per
//	          round, and moves a watcher to synced once it has reached
//	          `notified`.
//	victim    its stream's channel was full when events were due. The
//	          events are parked with it (etcd's "victims") and the victim
//	          loop retries every VictimRetryInterval. Once delivered, the
//	          watcher goes back to synced, or to unsynced if revisions
//	          went by meanwhile.
//	done      canceled, compacted, or its stream closed.
//
// A new watcher with start revision 0 or above `notified` starts synced;
// an older start revision starts unsynced. Because a watcher gets events
// from one source at a time and minRev only moves forward past what it was
// given, events arrive in revision order with no gap and no duplicate.
//
// # Apply never blocks
//
// OnEvents runs on the apply goroutine. It takes mu, finds the synced
// watchers of each changed key through the group's key map and sorted
// range list, and hands the events to each stream with one non-blocking
// channel send (one message for all of that stream's watchers). A full
// channel makes those watchers victims instead of making apply wait.
// mu is never held across I/O or a blocking channel operation: the sync
// loop releases it while it reads the backend and re-checks each watcher
// afterwards (it may have been canceled, and a compaction may have raced
// the read). So the longest apply can wait for mu is one bounded fan-out,
// victim retry or sync hand-off, all of which only do non-blocking sends.
//
// # Compaction and progress
//
// The sync loop answers an unsynced watcher below the compact revision
// with etcd's response (CompactRevision set, canceled, header revision
// 0) and drops it. It re-reads the compact revision after each backend
// read: the store publishes a compaction before it deletes anything, so
// a watcher still at or above it then had every record it was given.
//
// Progress responses carry `notified`, not the store's revision: the
// store publishes a revision just before its OnEvents call, and a
// progress response must never claim a revision whose events a synced
// watcher has not been handed yet.
//
// # Streams
//
// A WatchStream owns one buffered channel (`in`, ChanSize) that the store
// sends to, and one goroutine that forwards to the public channel. The
// forwarder puts the stream's own responses (created, canceled) in order
// with the store's, fills prev_kv (a read at mod_revision-1, done here and
// not on the apply goroutine), and sends periodic progress notifications.
// See watch_stream.go.
//
// # Serving a gRPC Watch stream
//
// The server's handler needs no bookkeeping of its own:
//
//	ws := store.NewWatchStream()
//	defer ws.Close()
//	// receive loop:
//	//   create   -> ws.Watch(mvcc.WatchRequestFromProto(c)) (the created
//	//               response, or the created-and-canceled one, comes on Chan)
//	//   cancel   -> ws.Cancel(mvcc.WatchID(id)) (the canceled response comes on Chan)
//	//   progress -> ws.RequestProgress()
//	// send loop:
//	for r := range ws.Chan() {
//		for _, m := range r.Proto(header, maxRequestBytes) { send(m) }
//	}
//
// Responses come in the order the client must see them: a watcher's
// created response before its events, nothing after its canceled one.
//
// # Locks
//
// Lock order: WatchStream.mu before WatchableStore.mu. The store never
// takes a stream's lock; it only sends to the stream's channel without
// blocking.

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// WatchID identifies a watcher within its stream.
type WatchID int64

const (
	// AutoWatchID asks the stream to pick the watch ID (etcd's
	// clientv3.AutoWatchID).
	AutoWatchID WatchID = 0
	// InvalidWatchID is the watch ID of a failed create and of a progress
	// response on behalf of the whole stream (etcd's
	// clientv3.InvalidWatchID).
	InvalidWatchID WatchID = -1
)

// Watch errors, with etcd's messages.
var (
	ErrWatcherNotExist    = errors.New("mvcc: watcher does not exist")
	ErrEmptyWatcherRange  = errors.New("mvcc: watcher range is empty")
	ErrWatcherDuplicateID = errors.New("mvcc: duplicate watch ID provided on the WatchStream")
	ErrWatchStreamClosed  = errors.New("mvcc: watch stream is closed")
)

// WatchConfig tunes the watchable store. Zero values take the defaults.
type WatchConfig struct {
	// ProgressNotifyInterval is how often a watcher created with
	// progress_notify gets a progress response if it is synced and got no
	// events in the interval (etcd's --watch-progress-notify-interval,
	// default 10 minutes; up to a tenth is added as jitter, as etcd does).
	ProgressNotifyInterval time.Duration
	// ChanSize is how many responses a stream buffers before its watchers
	// become victims (etcd's chanBufLen, default 128). The stream has two
	// such buffers, one on each side of its forwarder, so that a client
	// that falls briefly behind does not turn its watchers into victims.
	ChanSize int
	// SyncBatchRevs is the most revisions one catch-up round reads for
	// unsynced watchers (etcd's watchBatchMaxRevs, default 1000). It bounds
	// the memory and the read transaction of a round.
	SyncBatchRevs int64
	// SyncBatchWatchers is the most unsynced watchers one round serves
	// (etcd's maxWatchersPerSync, default 512).
	SyncBatchWatchers int
	// SyncInterval is how often the sync loop looks for unsynced watchers
	// when nothing wakes it (etcd's watchResyncPeriod, default 100 ms). A
	// new unsynced watcher wakes it at once.
	SyncInterval time.Duration
	// VictimRetryInterval is how often parked events are retried (default
	// 10 ms, as etcd).
	VictimRetryInterval time.Duration
}

func (c *WatchConfig) setDefaults() {
	if c.ProgressNotifyInterval <= 0 {
		c.ProgressNotifyInterval = 10 * time.Minute
	}
	if c.ChanSize <= 0 {
		c.ChanSize = 128
	}
	if c.SyncBatchRevs <= 0 {
		c.SyncBatchRevs = 1000
	}
	if c.SyncBatchWatchers <= 0 {
		c.SyncBatchWatchers = 512
	}
	if c.SyncInterval <= 0 {
		c.SyncInterval = 100 * time.Millisecond
	}
	if c.VictimRetryInterval <= 0 {
		c.VictimRetryInterval = 10 * time.Millisecond
	}
}

// WatchableStore is a Store whose changes can be watched.
type WatchableStore struct {
	*Store
	cfg WatchConfig
	log *slog.Logger

	// mu guards the fields below and every watcher's state and minRev.
	// See the lock notes at the top of this file.
	mu sync.Mutex
	// notified is the revision of the last OnEvents call: every event at
	// or below it has been handed to the synced watchers.
	notified int64
	synced   *watcherGroup
	unsynced *watcherGroup
	victims  map[*watcher]*victimBatch
	// matchScratch is matchOne's list of matched watchers, kept between
	// calls for its capacity (and cleared after each).
	matchScratch []*watcher

	// Published copies of the counts, for metrics without mu.
	watcherTotal     atomic.Int64
	slowWatcherTotal atomic.Int64

	syncKick   chan struct{}
	victimKick chan struct{}
	stopc      chan struct{}
	stopOnce   sync.Once
	wg         sync.WaitGroup
}

// victimBatch is what a victim is still owed: events up to rev, in order.
type victimBatch struct {
	evs []*mvccpb.Event
	rev int64
}

// NewWatchableStore opens a Store on be whose OnEvents feeds the watchers
// (after calling cfg.OnEvents, if set), and starts the sync and victim
// loops. Close stops them and closes the store.
func NewWatchableStore(be *Backend, cfg StoreConfig, wcfg WatchConfig) (*WatchableStore, error) {
	wcfg.setDefaults()
	s := &WatchableStore{
		cfg: wcfg, log: cfg.Logger,
		synced: newWatcherGroup(), unsynced: newWatcherGroup(), victims: map[*watcher]*victimBatch{},
		syncKick: make(chan struct{}, 1), victimKick: make(chan struct{}, 1), stopc: make(chan struct{}),
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	user := cfg.OnEvents
	cfg.OnEvents = func(rev int64, evs []Event) {
		if user != nil {
			user(rev, evs)
		}
		s.notify(rev, evs)
	}
	st, err := OpenStore(be, cfg)
	if err != nil {
		return nil, err
	}
	s.Store = st
	s.notified = st.Rev()
	s.wg.Add(2)
	go s.syncLoop()
	go s.victimLoop()
	return s, nil
}

// Close stops the watch loops, ends every stream's forwarder, and closes
// the store.
func (s *WatchableStore) Close() error {
	s.stopOnce.Do(func() { close(s.stopc) })
	s.wg.Wait()
	return s.Store.Close()
}

// WatcherTotal is the number of live watchers
// (etcd_debugging_mvcc_watcher_total).
func (s *WatchableStore) WatcherTotal() int64 { return s.watcherTotal.Load() }

// SlowWatcherTotal is the number of watchers that are unsynced or victims
// (etcd_debugging_mvcc_slow_watcher_total).
func (s *WatchableStore) SlowWatcherTotal() int64 { return s.slowWatcherTotal.Load() }

func (s *WatchableStore) publishCountsLocked() {
	s.slowWatcherTotal.Store(int64(s.unsynced.len() + len(s.victims)))
}

func kick(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// notify is the OnEvents hook: it runs on the apply goroutine and must not
// block, so every send is non-blocking and a full channel makes a victim.
func (s *WatchableStore) notify(rev int64, events []Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.notified = rev
	if s.synced.len() == 0 || len(events) == 0 {
		return
	}
	var batches []streamBatch
	if len(events) == 1 {
		batches = s.matchOne(rev, &events[0])
	} else {
		batches = s.matchMany(rev, events)
	}
	victims := false
	for _, b := range batches {
		st, msgs := b.st, b.msgs
		m := msgs[0]
		if len(msgs) > 1 {
			m = streamMsg{batch: msgs}
		}
		select {
		case st.in <- m:
			s.metrics.eventsQueued(m.events())
			continue
		default:
		}
		for _, m := range msgs {
			s.synced.remove(m.w)
			m.w.state = stateVictim
			s.victims[m.w] = &victimBatch{evs: m.resp.Events, rev: rev}
		}
		victims = true
	}
	if victims {
		s.publishCountsLocked()
		kick(s.victimKick)
	}
}

// wants reports whether the synced watcher w is sent e at revision rev:
// not if it asked for a later revision, nor if its filters drop e. *pe is
// e as an mvccpb.Event, built on first need and shared, read-only, by
// every watcher of e.
func (w *watcher) wants(rev int64, e *Event, pe **mvccpb.Event) bool {
	if rev < w.minRev { // a watcher that asked for a future revision
		return false
	}
	if *pe == nil {
		*pe = &mvccpb.Event{Type: e.Type, Kv: e.KV}
	}
	return !w.filtered(*pe)
}

// streamBatch is a stream's responses for one notified revision.
type streamBatch struct {
	st   *WatchStream
	msgs []streamMsg
}

// matchOne finds the synced watchers of a revision's only event (a put or
// delete of one key, the common case). Every watcher that gets it gets the
// same Events, shared with their encoding (WatchResponse.EncodedEvents),
// so a key watched many times costs a response per watcher, not a copy of
// the event per watcher. Called with s.mu held.
func (s *WatchableStore) matchOne(rev int64, e *Event) []streamBatch {
	matched := s.matchScratch[:0]
	var pe *mvccpb.Event
	s.synced.match(e.KV.Key, func(w *watcher) {
		if w.wants(rev, e, &pe) {
			matched = append(matched, w)
		}
	})
	defer func() {
		clear(matched) // hold no watcher past this call
		s.matchScratch = matched[:0]
	}()
	if len(matched) == 0 {
		return nil
	}
	sh := &sharedEvents{evs: []*mvccpb.Event{pe}}
	// Each stream's responses in one slice of the right size: count, then
	// fill.
	for _, w := range matched {
		w.stream.notifyCount++
	}
	var batches []streamBatch
	for _, w := range matched {
		st := w.stream
		if st.notifyMsgs == nil {
			st.notifyMsgs = make([]streamMsg, 0, st.notifyCount)
		}
		w.minRev = rev + 1
		st.notifyMsgs = append(st.notifyMsgs, streamMsg{w: w, resp: WatchResponse{WatchID: w.id, Events: sh.evs, Revision: rev, shared: sh}})
		if len(st.notifyMsgs) == st.notifyCount {
			batches = append(batches, streamBatch{st: st, msgs: st.notifyMsgs})
			st.notifyMsgs, st.notifyCount = nil, 0
		}
	}
	return batches
}

// matchMany is matchOne for a revision of several events (a txn or a
// range delete): each watcher gets the events it matches, which may
// differ from watcher to watcher. Called with s.mu held.
func (s *WatchableStore) matchMany(rev int64, events []Event) []streamBatch {
	var perWatcher map[*watcher][]*mvccpb.Event
	for i := range events {
		e := &events[i]
		var pe *mvccpb.Event
		s.synced.match(e.KV.Key, func(w *watcher) {
			if !w.wants(rev, e, &pe) {
				return
			}
			if perWatcher == nil {
				perWatcher = map[*watcher][]*mvccpb.Event{}
			}
			perWatcher[w] = append(perWatcher[w], pe)
		})
	}
	perStream := make(map[*WatchStream][]streamMsg, len(perWatcher))
	for w, evs := range perWatcher {
		w.minRev = rev + 1
		perStream[w.stream] = append(perStream[w.stream], streamMsg{w: w, resp: WatchResponse{WatchID: w.id, Events: evs, Revision: rev}})
	}
	batches := make([]streamBatch, 0, len(perStream))
	for st, msgs := range perStream {
		batches = append(batches, streamBatch{st: st, msgs: msgs})
	}
	return batches
}

// trySend hands r to the watcher's stream without blocking.
func (w *watcher) trySend(r WatchResponse) bool {
	select {
	case w.stream.in <- streamMsg{w: w, resp: r}:
		w.stream.s.metrics.eventsQueued(len(r.Events))
		return true
	default:
		return false
	}
}

// register adds a new watcher to its group and returns the revision it
// was registered at: a watcher from revision 0 sees every change after it.
func (s *WatchableStore) register(w *watcher) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	rev := s.notified
	if w.startRev == 0 || w.startRev > rev {
		w.minRev = max(rev+1, w.startRev)
		w.state = stateSynced
		s.synced.add(w)
	} else {
		w.minRev = w.startRev
		w.state = stateUnsynced
		s.unsynced.add(w)
		kick(s.syncKick)
	}
	s.watcherTotal.Add(1)
	s.publishCountsLocked()
	return rev
}

// unregister removes w from wherever it is. After it returns, the store
// sends nothing more for w.
func (s *WatchableStore) unregister(w *watcher) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch w.state {
	case stateSynced:
		s.synced.remove(w)
	case stateUnsynced:
		s.unsynced.remove(w)
	case stateVictim:
		delete(s.victims, w)
	case stateDone:
		return
	}
	w.state = stateDone
	s.watcherTotal.Add(-1)
	s.publishCountsLocked()
}

// progressAll answers a stream's RequestProgress: one response with watch
// ID -1 at the notified revision, sent only when every watcher of the
// stream is synced and has reached its start revision (etcd's rule: the
// client may then treat the revision as a consistent point for all of
// them). Like etcd, it sends nothing for a stream with no watchers, and
// drops the response if the stream's channel is full.
func (s *WatchableStore) progressAll(st *WatchStream, ws []*watcher) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range ws {
		if w.state == stateDone {
			continue // compacted; its stream is about to forget it
		}
		if w.state != stateSynced || s.notified < w.startRev {
			return false
		}
	}
	if len(ws) > 0 {
		select {
		case st.in <- streamMsg{resp: WatchResponse{WatchID: InvalidWatchID, Revision: s.notified}}:
		default:
		}
	}
	return true
}

// progressOne sends w a progress response if it is synced: the periodic
// progress_notify.
func (s *WatchableStore) progressOne(w *watcher) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.state == stateSynced && s.notified >= w.startRev {
		w.trySend(WatchResponse{WatchID: w.id, Revision: s.notified})
	}
}
