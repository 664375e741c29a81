package transport

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/url"
	"sync"

	etcdraft "go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// pipelineWorkers is how many POSTs to one peer may be in flight (etcd's
// connPerPipeline).
const pipelineWorkers = 4

// pipeline POSTs single messages to /raft: the route while no stream is
// connected, for MsgSnap without a snapshot store, and the only route to
// a remote. A 204 answer means the peer's raft has the message.
type pipeline struct {
	t      *Transport
	id     uint64
	idStr  string
	picker *urlPicker
	status *peerStatus
	p      *peer // nil for a remote: no per-peer counters

	msgc chan *raftpb.Message

	ctx    context.Context // canceled by stop: aborts requests in flight
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startPipeline(t *Transport, id uint64, picker *urlPicker, status *peerStatus, p *peer) *pipeline {
	pl := &pipeline{
		t: t, id: id, idStr: FormatID(id), picker: picker, status: status, p: p,
		msgc: make(chan *raftpb.Message, t.cfg.PipelineQueue),
	}
	pl.ctx, pl.cancel = context.WithCancel(context.Background())
	for range pipelineWorkers {
		pl.wg.Add(1)
		go pl.run()
	}
	return pl
}

func (pl *pipeline) trySend(m *raftpb.Message) bool {
	select {
	case pl.msgc <- m:
		return true
	default:
		return false
	}
}

func (pl *pipeline) stop() {
	pl.cancel()
	pl.wg.Wait()
}

func (pl *pipeline) run() {
	defer pl.wg.Done()
	for {
		select {
		case <-pl.ctx.Done():
			return
		case m := <-pl.msgc:
			pl.handle(m)
		}
	}
}

func (pl *pipeline) handle(m *raftpb.Message) {
	snap := m.GetType() == raftpb.MsgSnap
	data, err := proto.Marshal(m)
	if err == nil {
		err = pl.post(data)
	}
	if err != nil {
		if pl.ctx.Err() != nil {
			return // stopping; nobody is listening for the outcome
		}
		pl.status.deactivate("pipeline", "write", err)
		pl.t.rep.reportUnreachable(m.GetTo())
		if snap {
			pl.t.rep.reportSnapshot(m.GetTo(), etcdraft.SnapshotFailure)
		}
		pl.t.m.sentFailures.WithLabelValues(pl.idStr).Inc()
		return
	}
	pl.status.activate()
	if snap {
		pl.t.rep.reportSnapshot(m.GetTo(), etcdraft.SnapshotFinish)
	}
	pl.t.m.sentBytes.WithLabelValues(pl.idStr).Add(float64(len(data)))
	if pl.p != nil {
		pl.p.sent[chanPipeline].Add(1)
		pl.p.heard()
	}
}

func (pl *pipeline) post(data []byte) error {
	u := pl.picker.pick()
	req, err := pl.t.newPost(u, pathRaft, bytes.NewReader(data), "application/protobuf")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(pl.ctx, pl.t.cfg.PipelineTimeout)
	defer cancel()
	resp, err := pl.t.pipelineRT.RoundTrip(req.WithContext(ctx))
	if err != nil {
		pl.picker.unreachable(u)
		return err
	}
	defer resp.Body.Close()
	if pl.p != nil {
		pl.p.learn(resp.Header)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		pl.picker.unreachable(u)
		return err
	}
	if err := checkPostResponse(resp, b, req); err != nil {
		pl.picker.unreachable(u)
		if errors.Is(err, ErrMemberRemoved) {
			pl.t.markRemoved(pl.idStr)
		}
		return err
	}
	return nil
}

// remote is a pipeline to a member that is not a peer yet (added from
// the X-PeerURLs of its requests), so a member that just joined can get
// answers before it knows the membership.
type remote struct {
	pipeline *pipeline
	status   *peerStatus
}

func startRemote(t *Transport, id uint64, urls []url.URL) *remote {
	status := &peerStatus{log: t.log.With("remote-peer-id", FormatID(id)), m: t.m, local: t.idStr, remote: FormatID(id)}
	return &remote{pipeline: startPipeline(t, id, &urlPicker{urls: urls}, status, nil), status: status}
}

func (g *remote) send(m *raftpb.Message) {
	if g.pipeline.trySend(m) {
		return
	}
	g.pipeline.t.m.sentFailures.WithLabelValues(g.pipeline.idStr).Inc()
	g.status.log.Debug("dropped Raft message since sending buffer is full (overloaded network)", "message-type", m.GetType().String())
}

func (g *remote) stop() {
	g.pipeline.stop()
	g.status.release()
}
