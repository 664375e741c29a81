package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strconv"
	"sync"
	"time"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// ErrSnapshotSize: the image did not have the size announced for it.
var ErrSnapshotSize = errors.New("transport: snapshot image size mismatch")

// sendSnapshot starts sending MsgSnap m with its image, unless a send to
// this peer is already in flight (raft tracks one pending snapshot per
// follower; a second MsgSnap means the first will be reported soon), in
// which case m is dropped and reported as failed.
func (p *peer) sendSnapshot(m *raftpb.Message) {
	p.lifeMu.Lock()
	if p.stopped || !p.snapBusy.CompareAndSwap(false, true) {
		p.lifeMu.Unlock()
		p.drop(m, "a snapshot is already being sent")
		return
	}
	p.wg.Add(1)
	p.lifeMu.Unlock()
	go func() {
		defer p.wg.Done()
		defer p.snapBusy.Store(false)
		p.runSnapshot(m)
	}()
}

// runSnapshot POSTs the MsgSnap envelope and the image to /raft/snapshot
// and reports the outcome to raft: SnapshotFinish once the receiver has
// stored the image and handed the MsgSnap to its raft (204), otherwise
// SnapshotFailure (and the peer unreachable).
func (p *peer) runSnapshot(m *raftpb.Message) {
	t := p.tr
	start := time.Now()
	idx := m.GetSnapshot().GetMetadata().GetIndex()
	log := p.status.log.With("snapshot-index", idx)
	t.m.snapshotSendInflights.WithLabelValues(p.idStr).Inc()
	defer t.m.snapshotSendInflights.WithLabelValues(p.idStr).Dec()

	u := p.picker.pick()
	total, encoding, err := p.postSnapshot(m, u, log)
	if err != nil {
		if errors.Is(err, ErrMemberRemoved) {
			t.markRemoved(p.idStr)
		}
		log.Warn("failed to send database snapshot", "error", err)
		p.picker.unreachable(u)
		p.status.deactivate("sendMsgSnap", "post", err)
		t.rep.reportUnreachable(p.id)
		t.rep.reportSnapshot(p.id, etcdraft.SnapshotFailure)
		t.m.sentFailures.WithLabelValues(p.idStr).Inc()
		t.m.snapshotSendFailures.WithLabelValues(p.idStr).Inc()
		return
	}
	p.status.activate()
	t.rep.reportSnapshot(p.id, etcdraft.SnapshotFinish)
	p.sent[chanSnapshot].Add(1)
	t.m.sentBytes.WithLabelValues(p.idStr).Add(float64(total))
	t.m.snapshotSend.WithLabelValues(p.idStr).Inc()
	t.m.snapshotSendSeconds.WithLabelValues(p.idStr).Observe(time.Since(start).Seconds())
	log.Info("sent database snapshot", "bytes", total, "encoding", encoding, "took", time.Since(start).String())
}

// postSnapshot sends the request and returns the bytes of envelope and
// image sent (before encoding) and the encoding used.
func (p *peer) postSnapshot(m *raftpb.Message, u url.URL, log *slog.Logger) (int64, string, error) {
	t := p.tr
	info := p.peerInfo()
	rc, size, err := t.cfg.Snapshots.Open(m, info)
	if err != nil {
		return 0, "", fmt.Errorf("transport: open snapshot image: %w", err)
	}
	if size < 0 {
		rc.Close()
		return 0, "", fmt.Errorf("%w: negative size %d", ErrSnapshotSize, size)
	}
	var env bytes.Buffer
	if _, err := (&messageEncoder{w: &env}).encode(m); err != nil {
		rc.Close()
		return 0, "", err
	}
	total := int64(env.Len()) + size
	image := &exactReader{r: rc, left: size}

	// The body is the envelope then the image, raw (what etcd sends and
	// expects) or, to a Strata member that accepts it, zstd-compressed
	// with a checksum. Either way the request is chunked, as etcd's is.
	encoding := ""
	var body io.Reader
	var finish func() // stops everything that reads rc; then rc is closed
	if info.Strata && hasFeature(info.Features, featureSnapZstd) && !t.cfg.DisableSnapshotCompression {
		encoding = encodingZstdXXH64
		pr, pw := io.Pipe()
		encDone := make(chan struct{})
		go func() {
			defer close(encDone)
			pw.CloseWithError(encodeImage(pw, image, size))
		}()
		body = io.MultiReader(&env, pr)
		finish = func() {
			pr.CloseWithError(ErrStopped)
			<-encDone
		}
	} else {
		g := &guardedReader{r: io.MultiReader(&env, image)}
		body, finish = g, g.close
	}
	defer func() {
		finish()
		rc.Close()
	}()

	log.Info("sending database snapshot", "bytes", size, "encoding", encoding, "remote-peer-strata", info.Strata)
	req, err := t.newPost(u, pathSnapshot, body, "application/octet-stream")
	if err != nil {
		return 0, "", err
	}
	if encoding != "" {
		req.Header.Set(hdrSnapshotEncoding, encoding)
		req.Header.Set(hdrSnapshotImageSize, strconv.FormatInt(size, 10))
	}
	ctx, cancel := context.WithCancel(p.ctx)
	defer cancel()
	resp, err := t.pipelineRT.RoundTrip(req.WithContext(ctx))
	if err != nil {
		return 0, encoding, err
	}
	p.learn(resp.Header)
	// The receiver answers only after it stored the image and raft took
	// the MsgSnap; a receiver that dies right after reading the body must
	// not hold us forever.
	timer := time.AfterFunc(t.cfg.SnapshotResponseTimeout, cancel)
	defer timer.Stop()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if err != nil {
		return 0, encoding, err
	}
	if err := checkPostResponse(resp, b, req); err != nil {
		return 0, encoding, err
	}
	return total, encoding, nil
}

// exactReader reads exactly left bytes from r: fewer, or more, is an error,
// so a changed file or a broken image source fails the send instead of
// delivering a truncated image.
type exactReader struct {
	r    io.Reader
	left int64
}

func (e *exactReader) Read(p []byte) (int, error) {
	if e.left == 0 {
		var one [1]byte
		n, err := io.ReadFull(e.r, one[:])
		if n > 0 {
			return 0, fmt.Errorf("%w: image longer than announced", ErrSnapshotSize)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return 0, io.EOF
		}
		return 0, err
	}
	if int64(len(p)) > e.left {
		p = p[:e.left]
	}
	n, err := e.r.Read(p)
	e.left -= int64(n)
	if err == io.EOF {
		if e.left > 0 {
			return n, fmt.Errorf("%w: image ended %d bytes short", ErrSnapshotSize, e.left)
		}
		err = nil // the check for extra bytes happens on the next call
	}
	return n, err
}

// guardedReader lets the sender stop the HTTP client from reading the
// image (which it may still do after RoundTrip returned) before the image
// is closed.
type guardedReader struct {
	mu     sync.Mutex // held across each Read, so close waits for it
	r      io.Reader
	closed bool
}

func (g *guardedReader) Read(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return 0, ErrStopped
	}
	return g.r.Read(p)
}

func (g *guardedReader) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}
