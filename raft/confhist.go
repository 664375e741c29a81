package raft

import (
	"sync"

	"go.etcd.io/raft/v3/raftpb"
)

// confHistory is the membership as of each index since the latest raft
// snapshot, so a snapshot can be cut at any index an image holds (see
// prepareImage) with the membership of that index. The raft goroutine
// records each conf change as it hands it to apply, which is before the
// state machine can hold its effects, so every index an image can hold is
// covered.
type confHistory struct {
	mu   sync.Mutex
	base *raftpb.ConfState // as of baseIndex
	// baseIndex is the index base is the membership of.
	baseIndex uint64
	// changes are the conf changes after baseIndex, ascending.
	changes []confAt
}

type confAt struct {
	index uint64
	cs    *raftpb.ConfState
}

// reset starts the history at a snapshot.
func (h *confHistory) reset(index uint64, cs *raftpb.ConfState) {
	h.mu.Lock()
	h.base, h.baseIndex, h.changes = cs, index, nil
	h.mu.Unlock()
}

// record notes the membership after the conf change at index.
func (h *confHistory) record(index uint64, cs *raftpb.ConfState) {
	h.mu.Lock()
	if index > h.baseIndex {
		h.changes = append(h.changes, confAt{index, cs})
	}
	h.mu.Unlock()
}

// at returns the membership as of index (index >= the base's).
func (h *confHistory) at(index uint64) *raftpb.ConfState {
	h.mu.Lock()
	defer h.mu.Unlock()
	cs := h.base
	for _, c := range h.changes {
		if c.index > index {
			break
		}
		cs = c.cs
	}
	if cs == nil {
		cs = &raftpb.ConfState{}
	}
	return cs
}

// prune folds the changes at or below index into the base.
func (h *confHistory) prune(index uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if index <= h.baseIndex {
		return
	}
	i := 0
	for i < len(h.changes) && h.changes[i].index <= index {
		h.base = h.changes[i].cs
		i++
	}
	h.changes = append(h.changes[:0:0], h.changes[i:]...)
	h.baseIndex = index
}

func (n *Node) confAt(index uint64) *raftpb.ConfState { return n.confs.at(index) }
