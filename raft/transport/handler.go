package transport

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/version"
)

func (t *Transport) newRaftHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(pathRaft, t.servePipeline)
	mux.HandleFunc(pathStream, t.serveStream)
	mux.HandleFunc(pathSnapshot, t.serveSnapshot)
	mux.HandleFunc(pathProbing, serveProbing)
	return mux
}

// allow answers 405 unless r uses method.
func allow(w http.ResponseWriter, r *http.Request, method string) bool {
	if r.Method == method {
		return true
	}
	w.Header().Set("Allow", method)
	http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
	return false
}

// refuseCluster answers 412 when the sender's version or cluster id does
// not fit, with etcd's text (which etcd senders match).
func (t *Transport) refuseCluster(w http.ResponseWriter, r *http.Request) bool {
	text, err := t.checkCluster(r.Header)
	if err == nil {
		return false
	}
	t.log.Warn("refused peer request", "path", r.URL.Path, "remote-addr", r.RemoteAddr, "error", err)
	http.Error(w, text, http.StatusPreconditionFailed)
	return true
}

// servePipeline takes one message POSTed to /raft and answers 204 once
// Raft.Process has it.
func (t *Transport) servePipeline(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodPost) {
		return
	}
	w.Header().Set(hdrClusterID, t.cidStr)
	// The sender learns from the answer's headers (peer.learn), and takes
	// a missing feature list for a member that is not Strata.
	w.Header().Set(hdrStrataFeatures, localFeatures)
	if t.refuseCluster(w, r) {
		return
	}
	t.addRemoteFromHeader(r.Header)
	b, err := io.ReadAll(io.LimitReader(r.Body, maxStreamMessage+1))
	if err == nil && len(b) > maxStreamMessage {
		err = ErrMessageTooLarge
	}
	if err != nil {
		t.log.Warn("failed to read Raft message", "remote-addr", r.RemoteAddr, "error", err)
		http.Error(w, "error reading raft message", http.StatusBadRequest)
		t.m.recvFailures.WithLabelValues(r.RemoteAddr).Inc()
		return
	}
	m := &raftpb.Message{}
	if err := proto.Unmarshal(b, m); err != nil {
		t.log.Warn("failed to unmarshal Raft message", "remote-addr", r.RemoteAddr, "error", err)
		http.Error(w, "error unmarshalling raft message", http.StatusBadRequest)
		t.m.recvFailures.WithLabelValues(r.RemoteAddr).Inc()
		return
	}
	t.m.receivedBytes.WithLabelValues(FormatID(m.GetFrom())).Add(float64(len(b)))
	if p := t.peer(m.GetFrom()); p != nil {
		p.learn(r.Header)
		p.received[chanPipeline].Add(1)
		p.heard()
	}
	if err := t.cfg.Raft.Process(r.Context(), m); err != nil {
		t.answerProcessError(w, err, "error processing raft message")
		return
	}
	// 204 only after raft has the message: the sender reports a MsgSnap
	// sent this way as finished on it.
	w.WriteHeader(http.StatusNoContent)
}

func (t *Transport) answerProcessError(w http.ResponseWriter, err error, text string) {
	var refused *RefusedError
	if errors.As(err, &refused) {
		refused.writeTo(w)
		return
	}
	t.log.Warn("failed to process Raft message", "error", err)
	http.Error(w, text, http.StatusInternalServerError)
}

// serveStream accepts a peer's GET /raft/stream/<type>/<its id> and hands
// the response to our writer for that peer, which writes messages into it
// until either side closes it.
func (t *Transport) serveStream(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet) {
		return
	}
	w.Header().Set(hdrServerVersion, version.Etcd)
	w.Header().Set(hdrClusterID, t.cidStr)
	w.Header().Set(hdrStrataFeatures, localFeatures)
	if t.refuseCluster(w, r) {
		return
	}
	var typ streamType
	switch path.Dir(r.URL.Path) {
	case pathStreamMsgApp:
		typ = streamMsgApp
	case pathStreamMessage:
		typ = streamMessage
	default:
		http.Error(w, textInvalidPath, http.StatusNotFound)
		return
	}
	from, err := ParseID(path.Base(r.URL.Path))
	if err != nil {
		http.Error(w, textInvalidFrom, http.StatusNotFound)
		return
	}
	if t.cfg.Raft.IsIDRemoved(from) {
		t.log.Warn("rejected stream from remote peer because it was removed", "remote-peer-id-from", FormatID(from))
		http.Error(w, textRemovedMember, http.StatusGone)
		return
	}
	p := t.peer(from)
	if p == nil {
		// A member of another cluster that happens to share the id, or
		// one that joined after what we know of the membership: it gets a
		// pipeline back, not a stream.
		if urls := r.Header.Get(hdrPeerURLs); urls != "" {
			_ = t.AddRemote(from, strings.Split(urls, ","))
		}
		t.log.Warn("failed to find remote peer in cluster", "remote-peer-id-from", FormatID(from))
		http.Error(w, textSenderNotFound, http.StatusNotFound)
		return
	}
	if to := r.Header.Get(hdrRaftTo); to != t.idStr {
		t.log.Warn("ignored streaming request; ID mismatch", "remote-peer-id-header", to, "remote-peer-id-from", FormatID(from))
		http.Error(w, textToMismatch, http.StatusPreconditionFailed)
		return
	}
	p.learn(r.Header)
	p.heard()
	w.WriteHeader(http.StatusOK)
	if err := http.NewResponseController(w).Flush(); err != nil {
		return
	}
	conn := newStreamConn(typ, w)
	if !p.writers[typ].attach(conn) {
		return // the peer was removed meanwhile
	}
	select {
	case <-conn.closed:
	case <-r.Context().Done():
		p.writers[typ].detach(conn)
	}
}

// serveSnapshot receives POST /raft/snapshot: a MsgSnap envelope and the
// image after it. The image is made durable at Snapshots.ReceivePath
// before raft sees the MsgSnap; 204 means both happened.
func (t *Transport) serveSnapshot(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	fail := func(from string) { t.m.snapshotReceiveFailures.WithLabelValues(from).Inc() }
	if !allow(w, r, http.MethodPost) {
		fail(unknownSnapshotSender)
		return
	}
	w.Header().Set(hdrClusterID, t.cidStr)
	w.Header().Set(hdrStrataFeatures, localFeatures)
	if t.refuseCluster(w, r) {
		fail(unknownSnapshotSender)
		return
	}
	t.addRemoteFromHeader(r.Header)
	body := &countingReader{r: r.Body}
	m, n, err := (&messageDecoder{r: body, limit: maxSnapshotEnvelope}).decode()
	from := FormatID(m.GetFrom())
	if err != nil {
		t.log.Warn("failed to decode Raft message", "remote-snapshot-sender-id", from, "error", err)
		http.Error(w, fmt.Sprintf("failed to decode raft message (%v)", err), http.StatusBadRequest)
		t.m.recvFailures.WithLabelValues(r.RemoteAddr).Inc()
		fail(from)
		return
	}
	t.m.receivedBytes.WithLabelValues(from).Add(float64(n))
	if m.GetType() != raftpb.MsgSnap {
		t.log.Warn("unexpected Raft message type", "remote-snapshot-sender-id", from, "message-type", m.GetType().String())
		http.Error(w, "wrong raft message type", http.StatusBadRequest)
		fail(from)
		return
	}
	t.m.snapshotReceiveInflights.WithLabelValues(from).Inc()
	defer t.m.snapshotReceiveInflights.WithLabelValues(from).Dec()
	p := t.peer(m.GetFrom())
	if p != nil {
		p.learn(r.Header)
	}
	idx := m.GetSnapshot().GetMetadata().GetIndex()
	log := t.log.With("remote-snapshot-sender-id", from, "incoming-snapshot-index", idx)
	log.Info("receiving database snapshot", "incoming-snapshot-message-size-bytes", n)

	saved, err := t.receiveImage(m, r, body)
	if err != nil {
		log.Warn("failed to save incoming database snapshot", "error", err)
		http.Error(w, fmt.Sprintf("failed to save KV snapshot (%v)", err), http.StatusInternalServerError)
		fail(from)
		return
	}
	t.m.receivedBytes.WithLabelValues(from).Add(float64(body.n - int64(n)))
	log.Info("received and saved database snapshot", "incoming-snapshot-size-bytes", saved,
		"wire-bytes", body.n-int64(n), "download-took", time.Since(start).String())

	if err := t.cfg.Raft.Process(r.Context(), m); err != nil {
		t.answerProcessError(w, err, fmt.Sprintf("failed to process raft message (%v)", err))
		fail(from)
		return
	}
	w.WriteHeader(http.StatusNoContent)
	if p != nil {
		p.received[chanSnapshot].Add(1)
	}
	t.m.snapshotReceive.WithLabelValues(from).Inc()
	t.m.snapshotReceiveSeconds.WithLabelValues(from).Observe(time.Since(start).Seconds())
}

// receiveImage stores the payload after MsgSnap m, decoding it if the
// sender used Strata's encoding, and returns the image's size.
func (t *Transport) receiveImage(m *raftpb.Message, r *http.Request, body io.Reader) (int64, error) {
	if t.cfg.Snapshots == nil {
		return 0, errors.New("transport: this member has no snapshot store")
	}
	dst, err := t.cfg.Snapshots.ReceivePath(m)
	if err != nil {
		return 0, err
	}
	fill := func(w io.Writer) (int64, error) { return io.Copy(w, body) }
	switch enc := r.Header.Get(hdrSnapshotEncoding); enc {
	case "":
	case encodingZstdXXH64:
		size, err := strconv.ParseInt(r.Header.Get(hdrSnapshotImageSize), 10, 64)
		if err != nil || size < 0 {
			return 0, fmt.Errorf("%w: bad %s %q", ErrSnapshotSize, hdrSnapshotImageSize, r.Header.Get(hdrSnapshotImageSize))
		}
		fill = func(w io.Writer) (int64, error) { return decodeImage(w, body, size) }
	default:
		return 0, fmt.Errorf("transport: unsupported snapshot encoding %q", enc)
	}
	return saveImage(t.cfg.FS, dst, fill, t.m)
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// probeHealth is /raft/probing's answer (wire format: etcd's prober
// decodes {"OK":true,"Now":<RFC 3339 time>}).
type probeHealth struct {
	OK  bool
	Now time.Time
}

func serveProbing(w http.ResponseWriter, _ *http.Request) {
	_ = json.NewEncoder(w).Encode(probeHealth{OK: true, Now: time.Now()})
}
