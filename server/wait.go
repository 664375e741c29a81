package server

import (
	"sync"

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
	m  map[uint64]chan applyResult
}

func newWaitRegistry() *waitRegistry {
	w := &waitRegistry{}
	for i := range w.shards {
		w.shards[i].m = map[uint64]chan applyResult{}
	}
	return w
}

func (w *waitRegistry) shard(id uint64) *waitShard { return &w.shards[id%uint64(len(w.shards))] }

// register returns the channel id's result will arrive on.
func (w *waitRegistry) register(id uint64) <-chan applyResult {
	ch := make(chan applyResult, 1)
	s := w.shard(id)
	s.mu.Lock()
	s.m[id] = ch
	s.mu.Unlock()
	return ch
}

// trigger delivers a result to id's waiter, if it still waits.
func (w *waitRegistry) trigger(id uint64, r applyResult) {
	s := w.shard(id)
	s.mu.Lock()
	ch, ok := s.m[id]
	delete(s.m, id)
	s.mu.Unlock()
	if ok {
		ch <- r
	}
}

// cancel forgets id's waiter.
func (w *waitRegistry) cancel(id uint64) {
	s := w.shard(id)
	s.mu.Lock()
	delete(s.m, id)
	s.mu.Unlock()
}
