package mvcc

import (
	"bytes"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"math/rand/v2"
	"sync"
	"time"
)

// WatchRequest creates one watcher on a stream. Key and End are as on the
// wire: an empty Key means "\x00" (the smallest key), an empty End means
// the single key, End "\x00" means every key >= Key; a prefix is a range
// the client computed.
type WatchRequest struct {
	// ID is the client-chosen watch ID, or AutoWatchID for the next free
	// one (auto IDs count up from 0 and skip IDs in use).
	ID       WatchID
	Key, End []byte
	// StartRev is the first revision to report; 0 means "after the
	// current revision". A negative one fails with ErrCompacted, as etcd.
	StartRev int64
	Filters  []pb.WatchCreateRequest_FilterType
	// PrevKV fills each event's PrevKv with the key at mod_revision-1,
	// except for creations (which have none), as etcd.
	PrevKV bool
	// ProgressNotify asks for a progress response every
	// WatchConfig.ProgressNotifyInterval in which the watcher got nothing.
	ProgressNotify bool
	// Fragment lets responses larger than the server's request limit be
	// split (see WatchResponse.Proto).
	Fragment bool
}

// WatchRequestFromProto converts a gRPC create request.
func WatchRequestFromProto(c *pb.WatchCreateRequest) WatchRequest {
	return WatchRequest{
		ID: WatchID(c.WatchId), Key: c.Key, End: c.RangeEnd, StartRev: c.StartRevision,
		Filters: c.Filters, PrevKV: c.PrevKv, ProgressNotify: c.ProgressNotify, Fragment: c.Fragment,
	}
}

// WatchResponse is one response on a stream, in the order the client must
// see it. Events are shared between watchers: treat them as read-only.
type WatchResponse struct {
	WatchID WatchID
	// Events are in revision order; empty for created, canceled and
	// progress responses.
	Events []*mvccpb.Event
	// Revision is the header revision.
	Revision int64
	// CompactRevision is set (with Canceled) when the watch started below
	// the compacted revision.
	CompactRevision int64
	Created         bool
	Canceled        bool
	CancelReason    string
	// Fragment is the watcher's fragment option: Proto may split the
	// response.
	Fragment bool

	// shared, if set, holds Events as every watcher that matched the same
	// single event got them, with their encoding (EncodedEvents).
	shared *sharedEvents
}

// sharedEvents is what one revision's event is for every watcher that
// matched it: one Events slice, encoded once by whichever stream sends it
// first, so that a put seen by many watchers is not encoded per watcher.
type sharedEvents struct {
	evs  []*mvccpb.Event
	once sync.Once
	enc  []byte
}

// EncodedEvents returns r's events encoded as the events field (11) of
// WatchResponse, the same bytes for every watcher sent them; nil unless
// r carries its revision's events as the store shared them (not, for
// instance, with a watcher's PrevKv added). Field 11 is WatchResponse's
// last, so a response of the other fields marshalled and followed by
// these bytes is the response proto.Marshal makes.
func (r *WatchResponse) EncodedEvents() []byte {
	sh := r.shared
	if sh == nil || len(r.Events) == 0 || len(r.Events) != len(sh.evs) || &r.Events[0] != &sh.evs[0] {
		return nil
	}
	sh.once.Do(func() {
		var b []byte
		for _, ev := range sh.evs {
			b = protowire.AppendTag(b, 11, protowire.BytesType)
			b = protowire.AppendVarint(b, uint64(proto.Size(ev)))
			var err error
			if b, err = (proto.MarshalOptions{UseCachedSize: true}).MarshalAppend(b, ev); err != nil {
				b = nil // cannot happen for a valid Event; the caller marshals r itself
				break
			}
		}
		sh.enc = b
	})
	return sh.enc
}

// IsProgressNotify reports whether r is a progress response (etcd's
// clientv3 definition: nothing but a header).
func (r *WatchResponse) IsProgressNotify() bool {
	return len(r.Events) == 0 && !r.Created && !r.Canceled && r.CompactRevision == 0
}

// Proto converts r for the gRPC stream. hdr is the server's header (the
// revision is set from r). If the watcher asked for fragments and the
// response is at least maxBytes long, it is split as etcd splits it: every
// part but the last has Fragment set, and each part holds at least one
// event. maxBytes <= 0 never splits.
func (r *WatchResponse) Proto(hdr *pb.ResponseHeader, maxBytes int) []*pb.WatchResponse {
	h := proto.Clone(hdr).(*pb.ResponseHeader)
	h.Revision = r.Revision
	wr := &pb.WatchResponse{
		Header: h, WatchId: int64(r.WatchID), Events: r.Events, Created: r.Created, Canceled: r.Canceled,
		CompactRevision: r.CompactRevision, CancelReason: r.CancelReason,
	}
	if !r.Fragment || maxBytes <= 0 {
		return []*pb.WatchResponse{wr}
	}
	return FragmentResponse(wr, maxBytes)
}

// FragmentResponse splits wr into parts below maxBytes, each with at
// least one event, with Fragment set on all but the last. A response below
// the limit, or with fewer than two events, is returned whole.
func FragmentResponse(wr *pb.WatchResponse, maxBytes int) []*pb.WatchResponse {
	if proto.Size(wr) < maxBytes || len(wr.Events) < 2 {
		return []*pb.WatchResponse{wr}
	}
	var parts []*pb.WatchResponse
	evs := wr.Events
	for len(evs) > 0 {
		cur := &pb.WatchResponse{
			Header: wr.Header, WatchId: wr.WatchId, Created: wr.Created, Canceled: wr.Canceled,
			CompactRevision: wr.CompactRevision, CancelReason: wr.CancelReason, Fragment: true,
		}
		// A repeated field encodes each element on its own, so the size
		// of a part is its empty size plus each event's: linear, where
		// re-measuring the growing part would be quadratic.
		size, n := proto.Size(cur), 0
		for n < len(evs) {
			es := proto.Size(&pb.WatchResponse{Events: evs[n : n+1]})
			if n > 0 && size+es >= maxBytes {
				break
			}
			size += es
			n++
		}
		cur.Events = evs[:n:n]
		evs = evs[n:]
		parts = append(parts, cur)
	}
	parts[len(parts)-1].Fragment = false
	return parts
}

// streamMsg is what the store sends to a stream: a response and the
// watcher it is for (nil for a stream-wide progress response).
type streamMsg struct {
	w    *watcher
	resp WatchResponse
	// batch, if set, replaces w and resp: the responses of several
	// watchers of the stream for one revision, sent as one message so
	// that apply does one channel operation per stream, not per watcher.
	batch []streamMsg
}

// events is how many watch events m carries.
func (m streamMsg) events() int {
	n := len(m.resp.Events)
	for _, sub := range m.batch {
		n += len(sub.resp.Events)
	}
	return n
}

// WatchStream is a set of watchers whose responses share one ordered
// channel: the store side of a gRPC Watch stream.
//
// Every Watch call yields exactly one created response on Chan (with
// watch ID -1 and Canceled if it failed), before any event of the new
// watcher. A successful Cancel yields one canceled response, after which
// nothing more comes for that watcher. A watcher below the compacted
// revision gets one response with CompactRevision and Canceled set and
// gets nothing more; as in etcd, its ID stays taken until it is canceled.
type WatchStream struct {
	s    *WatchableStore
	in   chan streamMsg     // the store's non-blocking sends; never closed
	out  chan WatchResponse // Chan(); closed when the forwarder exits
	kick chan struct{}      // wakes the forwarder when ctrl grows
	done chan struct{}      // closed by Close
	exit chan struct{}      // closed when the forwarder has exited

	// mu guards the fields below. Lock order: mu before the store's mu.
	mu       sync.Mutex
	watchers map[WatchID]*watcher
	nextID   WatchID
	closed   bool
	// ctrl holds the stream's own responses not yet forwarded. A created
	// response is queued before its watcher is registered, and the
	// forwarder drains ctrl before each message from in, so it always
	// precedes the watcher's events.
	ctrl []streamMsg

	// notifyMsgs and notifyCount are notify's scratch (guarded by the
	// store's mu): the stream's responses for the revision being notified.
	notifyMsgs  []streamMsg
	notifyCount int
}

// NewWatchStream opens a stream. Close it when the client goes away.
func (s *WatchableStore) NewWatchStream() *WatchStream {
	ws := &WatchStream{
		s: s, in: make(chan streamMsg, s.cfg.ChanSize), out: make(chan WatchResponse, s.cfg.ChanSize),
		kick: make(chan struct{}, 1), done: make(chan struct{}), exit: make(chan struct{}),
		watchers: map[WatchID]*watcher{},
	}
	if m := s.metrics; m != nil {
		m.WatchStreams.Inc()
	}
	go ws.forward()
	return ws
}

// Chan yields the stream's responses until Close. The reader reports the
// events it takes to Store.Metrics().EventsTaken, so that
// etcd_debugging_mvcc_pending_events_total counts what is still queued.
func (ws *WatchStream) Chan() <-chan WatchResponse { return ws.out }

// Rev returns the store's current revision.
func (ws *WatchStream) Rev() int64 { return ws.s.Rev() }

// Watch creates a watcher and returns its ID. Errors (also reported on
// Chan as a created-and-canceled response with watch ID -1, as etcd
// answers them): ErrCompacted for a negative start revision,
// ErrEmptyWatcherRange, ErrWatcherDuplicateID, ErrWatchStreamClosed (not
// reported on Chan).
func (ws *WatchStream) Watch(r WatchRequest) (WatchID, error) {
	// Copies: the watcher outlives the request's buffers.
	key := bytes.Clone(r.Key)
	if len(key) == 0 {
		key = []byte{0} // "\x00" is the smallest key, as etcd
	}
	var end []byte // nil: the single key; empty non-nil: every key >= key
	if len(r.End) > 0 {
		end = bytes.Clone(rangeEnd(r.End))
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.closed {
		return InvalidWatchID, ErrWatchStreamClosed
	}
	fail := func(err error, reason string) (WatchID, error) {
		ws.ctrl = append(ws.ctrl, streamMsg{resp: WatchResponse{
			WatchID: InvalidWatchID, Revision: ws.s.Rev(), Created: true, Canceled: true, CancelReason: reason,
		}})
		kick(ws.kick)
		return InvalidWatchID, err
	}
	if r.StartRev < 0 {
		// etcd's server answers with its gRPC error text here.
		return fail(ErrCompacted, "etcdserver: "+ErrCompacted.Error())
	}
	if len(end) > 0 && bytes.Compare(key, end) >= 0 {
		return fail(ErrEmptyWatcherRange, ErrEmptyWatcherRange.Error())
	}
	id := r.ID
	if id == AutoWatchID {
		for ws.watchers[ws.nextID] != nil {
			ws.nextID++
		}
		id = ws.nextID
		ws.nextID++
	} else if ws.watchers[id] != nil {
		return fail(ErrWatcherDuplicateID, ErrWatcherDuplicateID.Error())
	}
	w := &watcher{
		id: id, key: key, end: end, startRev: r.StartRev, filters: r.Filters,
		prevKV: r.PrevKV, progress: r.ProgressNotify, fragment: r.Fragment, stream: ws,
	}
	ws.watchers[id] = w
	i := len(ws.ctrl)
	ws.ctrl = append(ws.ctrl, streamMsg{w: w, resp: WatchResponse{WatchID: id, Created: true}})
	ws.ctrl[i].resp.Revision = ws.s.register(w)
	kick(ws.kick)
	return id, nil
}

// Cancel removes a watcher; ErrWatcherNotExist if the stream has none by
// that ID (then, as etcd, nothing is sent).
func (ws *WatchStream) Cancel(id WatchID) error {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	w := ws.watchers[id]
	if w == nil || ws.closed {
		return ErrWatcherNotExist
	}
	delete(ws.watchers, id)
	ws.s.unregister(w)
	ws.ctrl = append(ws.ctrl, streamMsg{w: w, resp: WatchResponse{WatchID: id, Revision: ws.s.Rev(), Canceled: true}})
	kick(ws.kick)
	return nil
}

// RequestProgress asks for a progress response with watch ID -1 at the
// current revision. As in etcd, it is sent only if every watcher of the
// stream is synced; it reports whether that was so.
func (ws *WatchStream) RequestProgress() bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.closed {
		return false
	}
	list := make([]*watcher, 0, len(ws.watchers))
	for _, w := range ws.watchers {
		list = append(list, w)
	}
	return ws.s.progressAll(ws, list)
}

// Close cancels every watcher and closes Chan. Responses not yet read are
// dropped.
func (ws *WatchStream) Close() {
	ws.mu.Lock()
	if ws.closed {
		ws.mu.Unlock()
		<-ws.exit
		return
	}
	ws.closed = true
	for _, w := range ws.watchers {
		ws.s.unregister(w)
	}
	ws.watchers = nil
	ws.mu.Unlock()
	close(ws.done)
	<-ws.exit
	ws.drainMetrics()
}

// drainMetrics accounts for the events still queued when the stream
// closes, as etcd's send loop does when its stream ends: they count as
// taken (and sent), and are no longer pending. The forwarder has exited,
// and the store sends nothing to a stream whose watchers are unregistered,
// so nothing arrives in `in` after this; `out` is closed, and a response
// the server's reader takes from it instead is reported by the reader.
func (ws *WatchStream) drainMetrics() {
	m := ws.s.metrics
	if m != nil {
		m.WatchStreams.Dec()
	}
	for {
		select {
		case msg := <-ws.in:
			m.EventsTaken(msg.events())
		default:
			for r := range ws.out {
				m.EventsTaken(len(r.Events))
			}
			return
		}
	}
}

// fwdWatcher is the forwarder's view of a live watcher.
type fwdWatcher struct {
	// quiet is etcd's progress flag: no events were sent since the last
	// progress tick.
	quiet bool
}

// forward moves responses from in and ctrl to out, in order. It is the
// only goroutine that writes to out, and it may block there: a slow
// client fills in, and then the store parks the stream's watchers as
// victims.
func (ws *WatchStream) forward() {
	defer close(ws.exit)
	defer close(ws.out)
	live := map[*watcher]*fwdWatcher{}
	iv := ws.s.cfg.ProgressNotifyInterval
	ticker := time.NewTicker(iv + rand.N(iv/10+1))
	defer ticker.Stop()
	emit := func(r WatchResponse) bool {
		select {
		case ws.out <- r:
			return true
		case <-ws.done:
		case <-ws.s.stopc:
		}
		ws.s.metrics.EventsTaken(len(r.Events)) // dropped with the stream
		return false
	}
	drain := func() bool {
		ws.mu.Lock()
		ctrl := ws.ctrl
		ws.ctrl = nil
		ws.mu.Unlock()
		for _, m := range ctrl {
			if m.w != nil {
				if m.resp.Created {
					live[m.w] = &fwdWatcher{quiet: true}
				} else {
					delete(live, m.w)
				}
			}
			if !emit(m.resp) {
				return false
			}
		}
		return true
	}
	// forward1 emits one message from the store; false if the stream ends.
	forward1 := func(m streamMsg) bool {
		if m.w != nil {
			fw := live[m.w]
			if fw == nil {
				// Canceled after the store sent it: the client would
				// ignore it (etcd sends it anyway).
				ws.s.metrics.EventsTaken(len(m.resp.Events))
				return true
			}
			if m.resp.CompactRevision != 0 {
				// The watch is over, but as in etcd its ID stays taken
				// until the client cancels it.
				delete(live, m.w)
			}
			if len(m.resp.Events) > 0 {
				fw.quiet = false
				if m.w.prevKV {
					m.resp.Events = ws.s.withPrevKV(m.resp.Events)
				}
			}
			m.resp.Fragment = m.w.fragment
		}
		return emit(m.resp)
	}
	for {
		if !drain() {
			return
		}
		select {
		case m := <-ws.in:
			if !drain() {
				ws.s.metrics.EventsTaken(m.events())
				return
			}
			if m.batch == nil {
				if !forward1(m) {
					return
				}
				continue
			}
			for i, sub := range m.batch {
				if !forward1(sub) {
					for _, rest := range m.batch[i+1:] {
						ws.s.metrics.EventsTaken(len(rest.resp.Events))
					}
					return
				}
			}
		case <-ws.kick:
		case <-ticker.C:
			start := time.Now()
			for w, fw := range live {
				if w.progress {
					if fw.quiet {
						ws.s.progressOne(w)
					}
					fw.quiet = true
				}
			}
			if m := ws.s.metrics; m != nil {
				m.ProgressLoop.Observe(time.Since(start).Seconds())
			}
		case <-ws.done:
			return
		case <-ws.s.stopc:
			return
		}
	}
}

// withPrevKV returns copies of evs with PrevKv read at mod_revision-1.
// Creations have no previous key; a previous key that is compacted away
// is left out, as etcd does.
func (s *WatchableStore) withPrevKV(evs []*mvccpb.Event) []*mvccpb.Event {
	out := make([]*mvccpb.Event, len(evs))
	for i, ev := range evs {
		out[i] = ev
		if ev.Type == mvccpb.Event_PUT && ev.Kv.CreateRevision == ev.Kv.ModRevision {
			continue
		}
		r, err := s.Range(&pb.RangeRequest{Key: ev.Kv.Key, Revision: ev.Kv.ModRevision - 1})
		if err != nil || len(r.Kvs) == 0 {
			continue
		}
		out[i] = &mvccpb.Event{Type: ev.Type, Kv: ev.Kv, PrevKv: r.Kvs[0]}
	}
	return out
}
