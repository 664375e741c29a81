package transport

import (
	"context"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// streamType is one of the two long-lived streams between two members.
type streamType int

const (
	streamMsgApp  streamType = iota // MsgApp v2 stream: MsgApp only
	streamMessage                   // message stream: everything else
	numStreams
)

func (s streamType) String() string {
	if s == streamMsgApp {
		return "stream MsgApp v2"
	}
	return "stream Message"
}

func (s streamType) endpoint() string {
	if s == streamMsgApp {
		return pathStreamMsgApp
	}
	return pathStreamMessage
}

// channel names the way a message travelled, for PeerStatus counters.
type channel int

const (
	chanMsgApp channel = iota
	chanMessage
	chanPipeline
	chanSnapshot
	numChannels
)

// peer is everything that talks to one member: a writer per stream (the
// member dialed us and we write into the response), a reader per stream
// (we dialed the member and read its writes), a pipeline of POSTs, a
// snapshot sender, a prober, and the goroutines that pass received
// messages to Raft.
type peer struct {
	tr     *Transport
	id     uint64
	idStr  string
	status *peerStatus
	picker *urlPicker

	writers  [numStreams]*streamWriter
	readers  [numStreams]*streamReader
	pipeline *pipeline
	prober   *prober

	// recv holds messages read from each stream until Raft.Process takes
	// them, one goroutine per queue, so a slow MsgApp never delays a
	// heartbeat read on the other stream. Proposals forwarded by a
	// follower get their own queue: Process may block them while there
	// is no leader.
	recv  [numStreams]chan *raftpb.Message
	propc chan *raftpb.Message
	// queued counts, per queue (recv's, then propc), the messages put in
	// it whose Process call has not returned. Only while it is 0 may the
	// reader offer a message straight to raft (Offerer): nothing of that
	// stream is then on its way, so the direct hand-off cannot overtake
	// an earlier message.
	queued [numStreams + 1]atomic.Int64

	snapBusy atomic.Bool // a snapshot send is in flight (at most one)

	lifeMu  sync.Mutex // guards stopped and orders wg.Add before stop's wg.Wait
	stopped bool

	infoMu sync.Mutex // guards info
	info   PeerInfo

	sent, received [numChannels]atomic.Uint64
	dropped        atomic.Uint64 // messages dropped on a full send queue
	lastDropLog    atomic.Int64  // unix nanos; rate-limits the drop warning

	ctx    context.Context // canceled by stop; bounds Process calls
	cancel context.CancelFunc
	wg     sync.WaitGroup // the peer's own goroutines (not writers/readers)
}

func startPeer(t *Transport, id uint64, urls []url.URL) *peer {
	p := &peer{
		tr:     t,
		id:     id,
		idStr:  FormatID(id),
		picker: &urlPicker{urls: urls},
		propc:  make(chan *raftpb.Message, t.cfg.RecvQueue),
		info:   PeerInfo{ID: id},
	}
	p.status = &peerStatus{log: t.log.With("remote-peer-id", p.idStr), m: t.m, local: t.idStr, remote: p.idStr}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.pipeline = startPipeline(t, id, p.picker, p.status, p)
	for s := streamMsgApp; s < numStreams; s++ {
		p.recv[s] = make(chan *raftpb.Message, t.cfg.RecvQueue)
		p.writers[s] = startStreamWriter(p, s)
	}
	for i, q := range append(p.recv[:], p.propc) {
		p.wg.Add(1)
		go p.process(q, &p.queued[i])
	}
	for s := streamMsgApp; s < numStreams; s++ {
		p.readers[s] = startStreamReader(p, s)
	}
	if t.cfg.ProbeInterval > 0 {
		p.prober = startProber(p)
	}
	return p
}

// process hands one queue's messages to Raft, in order.
func (p *peer) process(q chan *raftpb.Message, queued *atomic.Int64) {
	defer p.wg.Done()
	for {
		select {
		case m := <-q:
			if err := p.tr.cfg.Raft.Process(p.ctx, m); err != nil {
				p.status.log.Warn("failed to process Raft message", "type", m.GetType().String(), "error", err)
			}
			queued.Add(-1)
		case <-p.ctx.Done():
			return
		}
	}
}

// deliver passes m, read from a stream, to raft: straight to Offer when
// nothing of that queue is pending, else (or when raft cannot take it at
// once) through the queue. False if the queue is full and m was dropped.
// Called only from the stream's reader goroutine, the queue's only
// producer.
func (p *peer) deliver(m *raftpb.Message, typ streamType) bool {
	qi, q := int(typ), p.recv[typ]
	if m.GetType() == raftpb.MsgProp {
		qi, q = int(numStreams), p.propc
	}
	queued := &p.queued[qi]
	if o, ok := p.tr.cfg.Raft.(Offerer); ok && queued.Load() == 0 {
		taken, err := o.Offer(m)
		if err != nil {
			p.status.log.Warn("failed to process Raft message", "type", m.GetType().String(), "error", err)
		}
		if taken || err != nil {
			return true
		}
	}
	queued.Add(1)
	select {
	case q <- m:
		return true
	default:
		queued.Add(-1)
		return false
	}
}

// send queues m without blocking. MsgApp goes on the MsgApp v2 stream,
// everything else on the message stream, so a heartbeat never waits
// behind a large append; with no stream connected, the pipeline carries
// it. MsgSnap goes to the snapshot sender (or, without Snapshots, the
// pipeline), never on a stream.
func (p *peer) send(m *raftpb.Message) {
	snap := m.GetType() == raftpb.MsgSnap
	if snap && p.tr.cfg.Snapshots != nil {
		p.sendSnapshot(m)
		return
	}
	queued, working := false, false
	if !snap {
		if m.GetType() == raftpb.MsgApp {
			queued, working = p.writers[streamMsgApp].trySend(m)
		}
		if !working {
			queued, working = p.writers[streamMessage].trySend(m)
		}
	}
	if !working {
		queued = p.pipeline.trySend(m)
	}
	if !queued {
		p.drop(m, "sending buffer is full")
	}
}

// heard is called when the peer showed it is up (it dialed our stream
// endpoint, or a pipeline POST went either way): streams we could not
// dial are dialed again now instead of after their backoff.
func (p *peer) heard() {
	for _, r := range p.readers {
		if r != nil {
			r.redialSoon()
		}
	}
}

// drop accounts for a message that was not sent: raft hears that the
// peer is unreachable (and that a MsgSnap failed), the failure is
// counted, and a warning is logged at most once a second.
func (p *peer) drop(m *raftpb.Message, why string) {
	p.tr.rep.reportUnreachable(m.GetTo())
	if m.GetType() == raftpb.MsgSnap {
		p.tr.rep.reportSnapshot(m.GetTo(), etcdraft.SnapshotFailure)
	}
	p.tr.m.sentFailures.WithLabelValues(p.idStr).Inc()
	n := p.dropped.Add(1)
	now := time.Now().UnixNano()
	if last := p.lastDropLog.Load(); now-last >= int64(time.Second) && p.lastDropLog.CompareAndSwap(last, now) {
		p.status.log.Warn("dropped internal Raft message since "+why, "message-type", m.GetType().String(),
			"remote-peer-active", p.status.isActive(), "dropped-total", n)
	}
}

// learn records what a peer's headers say about it.
func (p *peer) learn(h http.Header) {
	v, f := h.Get(hdrServerVersion), h.Get(hdrStrataFeatures)
	p.infoMu.Lock()
	defer p.infoMu.Unlock()
	if v != "" {
		p.info.ServerVersion = v
	}
	// Only a Strata member sends the header, on every request and stream
	// response; its absence on a response from a member that has one
	// means the member was replaced by one that does not (an etcd).
	p.info.Features, p.info.Strata = f, f != ""
}

func (p *peer) peerInfo() PeerInfo {
	p.infoMu.Lock()
	defer p.infoMu.Unlock()
	return p.info
}

func (p *peer) stop() {
	p.lifeMu.Lock()
	p.stopped = true
	p.lifeMu.Unlock()
	p.cancel()
	for _, w := range p.writers {
		w.stop()
	}
	for _, r := range p.readers {
		r.stop()
	}
	p.pipeline.stop()
	if p.prober != nil {
		p.prober.stop()
	}
	p.wg.Wait() // receivers, snapshot sender
	p.status.release()
}

// PeerStatus describes the link to one peer.
type PeerStatus struct {
	PeerInfo
	// Active: some stream or request to the peer works; ActiveSince is
	// when it became so.
	Active      bool
	ActiveSince time.Time
	// LastError is the failure that last made the link inactive.
	LastError string
	// Writing: the peer has dialed our stream of that type and we write
	// to it. Reading: we dialed the peer's and read from it.
	WritingMsgApp, WritingMessage bool
	ReadingMsgApp, ReadingMessage bool
	// Sent and Received count messages by the way they travelled:
	// MsgApp v2 stream, message stream, pipeline, snapshot endpoint.
	// Link heartbeats are not counted.
	SentMsgApp, SentMessage, SentPipeline, SentSnapshot                 uint64
	ReceivedMsgApp, ReceivedMessage, ReceivedPipeline, ReceivedSnapshot uint64
	// QueuedMsgApp and QueuedMessage are the stream send queues' lengths.
	QueuedMsgApp, QueuedMessage int
	// Dropped counts messages dropped because a send queue was full.
	Dropped uint64
	// RTT is the smoothed round trip to /raft/probing (zero before the
	// first probe); Probes counts successful probes.
	RTT    time.Duration
	Probes uint64
}

// PeerStatus reports on member id; ok is false for an unknown id.
func (t *Transport) PeerStatus(id uint64) (st PeerStatus, ok bool) {
	p := t.peer(id)
	if p == nil {
		return st, false
	}
	st.PeerInfo = p.peerInfo()
	st.Active, st.ActiveSince, st.LastError = p.status.snapshot()
	st.WritingMsgApp = p.writers[streamMsgApp].isWorking()
	st.WritingMessage = p.writers[streamMessage].isWorking()
	st.ReadingMsgApp = p.readers[streamMsgApp].isConnected()
	st.ReadingMessage = p.readers[streamMessage].isConnected()
	st.SentMsgApp, st.SentMessage = p.sent[chanMsgApp].Load(), p.sent[chanMessage].Load()
	st.SentPipeline, st.SentSnapshot = p.sent[chanPipeline].Load(), p.sent[chanSnapshot].Load()
	st.ReceivedMsgApp, st.ReceivedMessage = p.received[chanMsgApp].Load(), p.received[chanMessage].Load()
	st.ReceivedPipeline, st.ReceivedSnapshot = p.received[chanPipeline].Load(), p.received[chanSnapshot].Load()
	st.QueuedMsgApp, st.QueuedMessage = p.writers[streamMsgApp].queued(), p.writers[streamMessage].queued()
	st.Dropped = p.dropped.Load()
	if p.prober != nil {
		st.RTT, st.Probes = p.prober.stats()
	}
	return st, true
}
