package transport

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// redialInterval is the least time between a stream's dial and the redial
// after that stream is lost: etcd's stream readers dial at most once per
// 100 ms.
const redialInterval = 100 * time.Millisecond

// streamReader dials one stream type at the peer (GET
// /raft/stream/<type>/<our id>) and reads what the peer's writer sends,
// redialing with backoff for as long as the peer exists.
type streamReader struct {
	p   *peer
	typ streamType
	log *slog.Logger

	ctx    context.Context // canceled by stop: aborts a dial and the wait
	cancel context.CancelFunc

	mu   sync.Mutex // guards body
	body io.Closer  // the response being read, closed by stop

	connected   atomic.Bool
	kick        chan struct{} // cuts the dial backoff short (redialSoon)
	lastDialErr string        // run goroutine only: the last dial error logged
	lastDropLog atomic.Int64  // unix nanos; rate-limits the drop warning
	done        chan struct{}
}

func startStreamReader(p *peer, typ streamType) *streamReader {
	r := &streamReader{p: p, typ: typ, kick: make(chan struct{}, 1), done: make(chan struct{})}
	r.log = p.status.log.With("stream-reader-type", typ.String())
	r.ctx, r.cancel = context.WithCancel(context.Background())
	go r.run()
	return r
}

func (r *streamReader) isConnected() bool { return r.connected.Load() }

// redialSoon cuts a dial backoff short because the peer was just heard
// from: it dialed one of our streams, or a pipeline message went through.
// Members of a new cluster start one after another, so each one's first
// dials fail and back off (up to DialRetryMax); without this, streams to
// a member that has come up waited out that backoff while the election
// and the first requests went through the pipeline. The redial still
// comes no sooner than redialInterval after the previous dial.
func (r *streamReader) redialSoon() {
	if r.connected.Load() {
		return
	}
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

func (r *streamReader) stop() {
	r.cancel()
	r.mu.Lock()
	if r.body != nil {
		r.body.Close()
	}
	r.mu.Unlock()
	<-r.done
}

func (r *streamReader) run() {
	defer close(r.done)
	cfg := &r.p.tr.cfg
	backoff := cfg.DialRetryMin
	for {
		dialed := time.Now()
		body, err := r.dial()
		lost := false
		switch {
		case err == nil:
			r.lastDialErr = ""
			backoff = cfg.DialRetryMin
			r.connected.Store(true)
			r.p.status.activate()
			r.log.Info("established TCP streaming connection with remote peer")
			err = r.decodeLoop(body)
			r.connected.Store(false)
			if r.ctx.Err() != nil {
				break
			}
			r.log.Warn("lost TCP streaming connection with remote peer", "error", err)
			if !errors.Is(err, io.EOF) && !isClosedConn(err) {
				r.p.status.deactivate(r.typ.String(), "read", err)
			}
			lost = true
		case r.ctx.Err() != nil:
		case errors.Is(err, ErrUnsupportedStream):
			backoff = min(backoff*2, cfg.DialRetryMax)
		default:
			r.p.status.deactivate(r.typ.String(), "dial", err)
			if msg := err.Error(); msg != r.lastDialErr {
				r.lastDialErr = msg
				r.log.Warn("failed to dial stream", "error", err)
			}
			backoff = min(backoff*2, cfg.DialRetryMax)
		}
		// Jitter (up to a quarter of the wait) keeps members that lost
		// each other at the same moment from redialing in lockstep.
		wait := backoff - time.Duration(rand.Int64N(int64(backoff)/4+1))
		if lost {
			// As etcd's reader, whose dials are rate-limited to one per
			// 100 ms with a burst of one: a stream that was up is
			// redialed at once (no sooner than redialInterval after the
			// dial that opened it). A peer that went away is then found
			// unreachable, and marked inactive, within a round trip
			// rather than a backoff, so a leader that stops right after
			// it does not ask it to lead (server's handOffLeadership).
			wait = redialInterval - time.Since(dialed)
		}
		timer := time.NewTimer(wait)
		for waiting := true; waiting; {
			select {
			case <-r.ctx.Done():
				timer.Stop()
				return
			case <-timer.C:
				waiting = false
			case <-r.kick:
				// The peer is up: redial now, but no sooner than
				// redialInterval after the last dial.
				backoff = cfg.DialRetryMin
				timer.Reset(max(0, redialInterval-time.Since(dialed)))
			}
		}
	}
}

// dial opens the stream and returns its body, or why it could not.
func (r *streamReader) dial() (io.ReadCloser, error) {
	t := r.p.tr
	u := r.p.picker.pick()
	uu := u
	uu.Path = r.typ.endpoint() + "/" + t.idStr
	req, err := http.NewRequestWithContext(r.ctx, http.MethodGet, uu.String(), nil)
	if err != nil {
		r.p.picker.unreachable(u)
		return nil, fmt.Errorf("transport: request to %s: %w", uu.String(), err)
	}
	t.setCommonHeaders(req.Header)
	req.Header.Set(hdrRaftTo, r.p.idStr)
	resp, err := t.streamRT.RoundTrip(req)
	if err != nil {
		r.p.picker.unreachable(u)
		return nil, err
	}
	r.p.learn(resp.Header)
	if rv, err := headerVersion(resp.Header, hdrServerVersion); err == nil && cmpMajorMinor(rv, localServerVersion) < 0 && !streamSupported(rv) {
		discard(resp)
		r.p.picker.unreachable(u)
		return nil, ErrUnsupportedStream
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return resp.Body, nil
	case http.StatusGone:
		discard(resp)
		r.p.picker.unreachable(u)
		t.markRemoved(r.p.idStr)
		return nil, ErrMemberRemoved
	case http.StatusNotFound:
		discard(resp)
		r.p.picker.unreachable(u)
		return nil, fmt.Errorf("transport: peer %s failed to find local node %s", r.p.idStr, t.idStr)
	case http.StatusPreconditionFailed:
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		discard(resp)
		r.p.picker.unreachable(u)
		switch strings.TrimSuffix(string(b), "\n") {
		case textIncompatibleVersion:
			return nil, fmt.Errorf("%w: request sent was ignored by remote peer due to server version incompatibility", ErrIncompatibleVersion)
		case textClusterIDMismatch:
			return nil, fmt.Errorf("%w: request sent was ignored by remote peer (peer cluster %s, local cluster %s)",
				ErrClusterIDMismatch, resp.Header.Get(hdrClusterID), t.cidStr)
		default:
			return nil, fmt.Errorf("transport: unhandled error %q when precondition failed", string(b))
		}
	default:
		discard(resp)
		r.p.picker.unreachable(u)
		return nil, fmt.Errorf("transport: unhandled http status %d", resp.StatusCode)
	}
}

// decodeLoop reads messages until the stream ends, queueing each for
// Raft.Process; a full queue drops the message (raft resends).
func (r *streamReader) decodeLoop(body io.ReadCloser) error {
	r.mu.Lock()
	if r.ctx.Err() != nil {
		r.mu.Unlock()
		body.Close()
		return io.EOF
	}
	r.body = body
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.body = nil
		r.mu.Unlock()
		body.Close()
	}()

	t := r.p.tr
	br := bufio.NewReaderSize(body, 64<<10)
	var dec decoder
	if r.typ == streamMsgApp {
		dec = &msgAppV2Decoder{r: br, local: t.cfg.ID, remote: r.p.id, limit: maxStreamMessage}
	} else {
		dec = &messageDecoder{r: br, limit: maxStreamMessage}
	}
	fromPeer := t.m.receivedBytes.WithLabelValues(r.p.idStr)
	for {
		m, n, err := dec.decode()
		if err != nil {
			return err
		}
		if from := m.GetFrom(); from == r.p.id {
			fromPeer.Add(float64(n))
		} else {
			t.m.receivedBytes.WithLabelValues(FormatID(from)).Add(float64(n))
		}
		if isLinkHeartbeat(m) {
			continue // link-level keep-alive; raft never sees it
		}
		r.p.received[r.typ].Add(1)
		if !r.p.deliver(m, r.typ) {
			t.m.recvFailures.WithLabelValues(FormatID(m.GetFrom())).Inc()
			now := time.Now().UnixNano()
			if last := r.lastDropLog.Load(); now-last >= int64(time.Second) && r.lastDropLog.CompareAndSwap(last, now) {
				r.log.Warn("dropped Raft message since receiving buffer is full (overloaded network)", "message-type", m.GetType().String())
			}
		}
	}
}

// discard drains a little of a response we do not use, so the connection
// can be reused, and closes it.
func discard(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
}

func isClosedConn(err error) bool {
	return errors.Is(err, net.ErrClosed) || (err != nil && strings.Contains(err.Error(), "use of closed network connection"))
}
