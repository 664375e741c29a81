package server

import (
	"bytes"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"google.golang.org/protobuf/proto"
)

// applyResult is what applying one proposal produced.
type applyResult struct {
	resp proto.Message
	err  error
	// done, if set, closes when background work the request started has
	// finished (a compaction's physical deletion).
	done <-chan struct{}
	// dropped means raft refused the proposal; err says why.
	dropped bool
}

// waitRegistry hands apply results to the goroutines that proposed them,
// by request id. It is sharded so concurrent proposers rarely contend.
type waitRegistry struct {
	shards [64]waitShard
}

type waitShard struct {
	mu sync.Mutex
	m  map[uint64]waiter
}

// waiter is one proposer waiting for its result. req and data, when set,
// are the request it proposed and the bytes it proposed, so that applying
// the entry on this member need not decode what it just encoded (see
// local).
type waiter struct {
	ch   chan applyResult
	req  *pb.InternalRaftRequest
	data []byte
}

func newWaitRegistry() *waitRegistry {
	w := &waitRegistry{}
	for i := range w.shards {
		w.shards[i].m = map[uint64]waiter{}
	}
	return w
}

func (w *waitRegistry) shard(id uint64) *waitShard { return &w.shards[id%uint64(len(w.shards))] }

// register returns the channel id's result will arrive on.
func (w *waitRegistry) register(id uint64) <-chan applyResult {
	return w.registerRequest(id, nil, nil)
}

// registerRequest is register for a proposal of req encoded as data.
// Neither may change afterwards, not even after cancel: local may have
// handed req to the apply goroutine just before.
func (w *waitRegistry) registerRequest(id uint64, req *pb.InternalRaftRequest, data []byte) <-chan applyResult {
	ch := make(chan applyResult, 1)
	s := w.shard(id)
	s.mu.Lock()
	s.m[id] = waiter{ch: ch, req: req, data: data}
	s.mu.Unlock()
	return ch
}

// local returns the request that a proposer on this member still waiting
// for id proposed, if it proposed exactly data; nil otherwise (another
// member's proposal, a replay after a restart, a proposer that gave up).
// The bytes are compared, not only the id, so the request returned is the
// one the entry was encoded from.
func (w *waitRegistry) local(id uint64, data []byte) *pb.InternalRaftRequest {
	s := w.shard(id)
	s.mu.Lock()
	wt, ok := s.m[id]
	s.mu.Unlock()
	if !ok || wt.req == nil || !bytes.Equal(wt.data, data) {
		return nil
	}
	return wt.req
}

// trigger delivers a result to id's waiter, if it still waits.
func (w *waitRegistry) trigger(id uint64, r applyResult) {
	s := w.shard(id)
	s.mu.Lock()
	wt, ok := s.m[id]
	delete(s.m, id)
	s.mu.Unlock()
	if ok {
		wt.ch <- r
	}
}

// cancel forgets id's waiter.
func (w *waitRegistry) cancel(id uint64) {
	s := w.shard(id)
	s.mu.Lock()
	delete(s.m, id)
	s.mu.Unlock()
}
