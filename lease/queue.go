package lease

import (
	"container/heap"
	"time"
)

// timeQueue is a min-heap of (lease, time). The expiry queue keeps at most
// one entry per lease (indexed, so a renew moves the entry in O(log n));
// the checkpoint queue may hold several, and stale ones are skipped when
// popped. Neither is safe for concurrent use: Lessor.mu guards both.
type timeQueue struct {
	items []*queued
	byID  map[int64]*queued // only for the indexed (expiry) queue
}

type queued struct {
	id    int64
	at    time.Time
	index int
}

func newIndexedQueue() *timeQueue { return &timeQueue{byID: map[int64]*queued{}} }
func newQueue() *timeQueue        { return &timeQueue{} }

func (q *timeQueue) Len() int           { return len(q.items) }
func (q *timeQueue) Less(i, j int) bool { return q.items[i].at.Before(q.items[j].at) }
func (q *timeQueue) Swap(i, j int) {
	q.items[i], q.items[j] = q.items[j], q.items[i]
	q.items[i].index = i
	q.items[j].index = j
}

// Push and Pop are for container/heap; use set, add and pop.
func (q *timeQueue) Push(x any) {
	it := x.(*queued)
	it.index = len(q.items)
	q.items = append(q.items, it)
}

func (q *timeQueue) Pop() any {
	n := len(q.items) - 1
	it := q.items[n]
	q.items[n] = nil
	q.items = q.items[:n]
	it.index = -1
	return it
}

// set makes at the lease's time in an indexed queue, adding or moving it.
func (q *timeQueue) set(id int64, at time.Time) {
	if it, ok := q.byID[id]; ok {
		it.at = at
		heap.Fix(q, it.index)
		return
	}
	it := &queued{id: id, at: at}
	heap.Push(q, it)
	q.byID[id] = it
}

// add pushes an entry into a non-indexed queue.
func (q *timeQueue) add(id int64, at time.Time) { heap.Push(q, &queued{id: id, at: at}) }

// peek returns the earliest entry, or nil.
func (q *timeQueue) peek() *queued {
	if len(q.items) == 0 {
		return nil
	}
	return q.items[0]
}

// pop removes and returns the earliest entry.
func (q *timeQueue) pop() *queued {
	it := heap.Pop(q).(*queued)
	if q.byID != nil {
		delete(q.byID, it.id)
	}
	return it
}

// remove drops a lease's entry from an indexed queue, if it has one.
func (q *timeQueue) remove(id int64) {
	if it, ok := q.byID[id]; ok {
		heap.Remove(q, it.index)
		delete(q.byID, id)
	}
}
