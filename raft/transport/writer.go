package transport

import (
	"errors"
	"net/http"
	"sync"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// streamConn is one stream the peer opened to us: the response of its GET,
// which the stream handler hands to our writer. Only the writer goroutine
// touches w, and only until it closes the conn; the handler returns (and
// the response ends) once closed is closed.
type streamConn struct {
	typ    streamType
	w      http.ResponseWriter
	rc     *http.ResponseController
	closed chan struct{}
	once   sync.Once
	// deadlineSet is when the write deadline was last moved (writer
	// goroutine only).
	deadlineSet time.Time
}

func newStreamConn(typ streamType, w http.ResponseWriter) *streamConn {
	return &streamConn{typ: typ, w: w, rc: http.NewResponseController(w), closed: make(chan struct{})}
}

func (c *streamConn) close() { c.once.Do(func() { close(c.closed) }) }

// streamWriter writes one stream type's messages to the attached conn.
//
// Queue protocol: queue and working change together under mu, and
// trySend enqueues under mu, so a message is either in the queue of the
// conn that is attached or refused. Detaching a conn swaps in a fresh
// queue; what was left in the old one is dropped and the peer reported
// unreachable, as raft must resend it anyway.
type streamWriter struct {
	p   *peer
	typ streamType

	mu      sync.Mutex // guards queue and working
	queue   chan *raftpb.Message
	working bool // a conn is attached

	connc   chan *streamConn   // the stream handler attaches a conn
	detachc chan detachRequest // the stream handler gives it back
	stopc   chan struct{}
	done    chan struct{}
}

type detachRequest struct {
	conn *streamConn
	ack  chan struct{}
}

func startStreamWriter(p *peer, typ streamType) *streamWriter {
	w := &streamWriter{
		p:       p,
		typ:     typ,
		queue:   make(chan *raftpb.Message, p.tr.cfg.StreamQueue),
		connc:   make(chan *streamConn),
		detachc: make(chan detachRequest),
		stopc:   make(chan struct{}),
		done:    make(chan struct{}),
	}
	go w.run()
	return w
}

// trySend queues m if a conn is attached and the queue has room. working
// says whether a conn is attached (if not, the caller tries elsewhere).
func (w *streamWriter) trySend(m *raftpb.Message) (queued, working bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.working {
		return false, false
	}
	select {
	case w.queue <- m:
		return true, true
	default:
		return false, true
	}
}

func (w *streamWriter) queued() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.queue)
}

func (w *streamWriter) isWorking() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.working
}

// attach hands conn to the writer, replacing any current one; false if
// the writer has stopped (the caller then closes conn).
func (w *streamWriter) attach(conn *streamConn) bool {
	select {
	case w.connc <- conn:
		return true
	case <-w.done:
		return false
	}
}

// detach takes conn back (the peer went away) and returns once the writer
// no longer uses it.
func (w *streamWriter) detach(conn *streamConn) {
	ack := make(chan struct{})
	select {
	case w.detachc <- detachRequest{conn, ack}:
		<-ack
	case <-w.done:
	}
}

func (w *streamWriter) stop() {
	close(w.stopc)
	<-w.done
}

// flushEvery bounds how many messages are buffered before a flush while
// the queue stays non-empty (etcd flushes at half its queue).
const flushEvery = 2048

func (w *streamWriter) run() {
	defer close(w.done)
	var (
		conn      *streamConn
		enc       encoder
		msgc      chan *raftpb.Message // nil while no conn is attached
		heartbeat <-chan time.Time     // nil while no conn is attached
		unflushed int                  // bytes written since the last flush
		batched   int                  // messages written since the last flush
	)
	hb := proto.Clone(linkHeartbeat).(*raftpb.Message) // this goroutine's own copy to marshal
	tick := time.NewTicker(w.p.tr.cfg.ConnReadTimeout / 3)
	defer tick.Stop()
	log := w.p.status.log.With("stream-writer-type", w.typ.String())
	sentBytes := w.p.tr.m.sentBytes.WithLabelValues(w.p.idStr)
	flush := func() error {
		err := conn.rc.Flush()
		sentBytes.Add(float64(unflushed))
		unflushed, batched = 0, 0
		return err
	}
	fail := func(action string, err error) {
		w.p.status.deactivate(w.typ.String(), action, err)
		w.p.tr.m.sentFailures.WithLabelValues(w.p.idStr).Inc()
		log.Warn("lost TCP streaming connection with remote peer", "error", err)
		w.release(conn)
		conn, enc, msgc, heartbeat = nil, nil, nil, nil
	}
	for {
		select {
		case <-heartbeat:
			w.deadline(conn)
			n, err := enc.encode(hb)
			unflushed += n
			if err == nil {
				err = flush()
			}
			if err != nil {
				fail("heartbeat", err)
			}

		case m := <-msgc:
			w.deadline(conn)
			n, err := enc.encode(m)
			unflushed += n
			if err == nil {
				w.p.sent[w.typ].Add(1)
				if len(msgc) == 0 || batched >= flushEvery {
					err = flush()
				} else {
					batched++
				}
			}
			if err != nil {
				w.p.tr.rep.reportUnreachable(m.GetTo())
				fail("write", err)
			}

		case c := <-w.connc:
			if conn != nil {
				w.release(conn)
				log.Info("replaced TCP streaming connection with remote peer")
			}
			conn, unflushed, batched = c, 0, 0
			if c.typ == streamMsgApp {
				enc = &msgAppV2Encoder{w: c.w}
			} else {
				enc = &messageEncoder{w: c.w}
			}
			w.mu.Lock()
			w.working, msgc = true, w.queue
			w.mu.Unlock()
			heartbeat = tick.C
			w.p.status.activate()
			log.Info("established TCP streaming connection with remote peer")

		case req := <-w.detachc:
			if req.conn == conn {
				w.release(conn)
				conn, enc, msgc, heartbeat = nil, nil, nil, nil
				log.Info("closed TCP streaming connection with remote peer")
			}
			close(req.ack)

		case <-w.stopc:
			if conn != nil {
				w.release(conn)
			}
			return
		}
	}
}

// deadline bounds the next write, so a peer that stops reading (or a dead
// TCP connection) fails the stream instead of blocking the writer.
// deadline keeps conn's write deadline about ConnWriteTimeout ahead. It is
// moved only once a tenth of the timeout has passed since it was last
// set, not before every message: setting it is a system call's worth of
// work, and under load it took a quarter of the writer's time. A stuck
// write still fails within 0.9 to 1 times the timeout.
func (w *streamWriter) deadline(c *streamConn) {
	timeout := w.p.tr.cfg.ConnWriteTimeout
	now := time.Now()
	if !c.deadlineSet.IsZero() && now.Sub(c.deadlineSet) < timeout/10 {
		return
	}
	c.deadlineSet = now
	err := c.rc.SetWriteDeadline(now.Add(timeout))
	if err != nil && !errors.Is(err, http.ErrNotSupported) {
		w.p.status.log.Debug("cannot set stream write deadline", "error", err)
	}
}

// release closes conn (ending the peer's GET) and retires the queue.
func (w *streamWriter) release(c *streamConn) {
	w.mu.Lock()
	left := len(w.queue)
	w.working = false
	if left > 0 {
		w.queue = make(chan *raftpb.Message, cap(w.queue))
	}
	w.mu.Unlock()
	c.close()
	if left > 0 {
		w.p.tr.rep.reportUnreachable(w.p.id)
		w.p.tr.m.sentFailures.WithLabelValues(w.p.idStr).Add(float64(left))
	}
}
