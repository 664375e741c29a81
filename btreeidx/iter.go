package btreeidx

import "iter"

// Ordered walks. Each calls fn on items in order until fn returns false.
// fn must not mutate the tree being walked (see the ownership rule on
// BTree).

// Ascend calls fn on every item in ascending order.
func (t *BTree[T]) Ascend(fn func(T) bool) {
	var zero T
	t.ascend(t.root, zero, false, zero, false, fn)
}

// AscendGreaterOrEqual calls fn on the items >= pivot in ascending order.
func (t *BTree[T]) AscendGreaterOrEqual(pivot T, fn func(T) bool) {
	var zero T
	t.ascend(t.root, pivot, true, zero, false, fn)
}

// AscendLessThan calls fn on the items < pivot in ascending order.
func (t *BTree[T]) AscendLessThan(pivot T, fn func(T) bool) {
	var zero T
	t.ascend(t.root, zero, false, pivot, true, fn)
}

// AscendRange calls fn on the items in [greaterOrEqual, lessThan) in
// ascending order.
func (t *BTree[T]) AscendRange(greaterOrEqual, lessThan T, fn func(T) bool) {
	if t.cmp(greaterOrEqual, lessThan) >= 0 {
		return // empty range; ascend relies on lo < hi
	}
	t.ascend(t.root, greaterOrEqual, true, lessThan, true, fn)
}

// Descend calls fn on every item in descending order.
func (t *BTree[T]) Descend(fn func(T) bool) {
	var zero T
	t.descend(t.root, zero, false, zero, false, fn)
}

// DescendLessOrEqual calls fn on the items <= pivot in descending order.
func (t *BTree[T]) DescendLessOrEqual(pivot T, fn func(T) bool) {
	var zero T
	t.descend(t.root, pivot, true, zero, false, fn)
}

// DescendGreaterThan calls fn on the items > pivot in descending order.
func (t *BTree[T]) DescendGreaterThan(pivot T, fn func(T) bool) {
	var zero T
	t.descend(t.root, zero, false, pivot, true, fn)
}

// DescendRange calls fn on the items in (greaterThan, lessOrEqual] in
// descending order.
func (t *BTree[T]) DescendRange(lessOrEqual, greaterThan T, fn func(T) bool) {
	if t.cmp(lessOrEqual, greaterThan) <= 0 {
		return // empty range; descend relies on lo < hi
	}
	t.descend(t.root, lessOrEqual, true, greaterThan, true, fn)
}

// All returns an iterator over every item in ascending order.
func (t *BTree[T]) All() iter.Seq[T] {
	return func(yield func(T) bool) { t.Ascend(yield) }
}

// Backward returns an iterator over every item in descending order.
func (t *BTree[T]) Backward() iter.Seq[T] {
	return func(yield func(T) bool) { t.Descend(yield) }
}

// ascend visits the items of n's subtree that are >= lo (if hasLo) and < hi
// (if hasHi). It returns false once fn stopped the walk or the upper bound
// was reached.
//
// Each bound costs one binary search per node on the path to it, not one
// comparison per item: the lower bound only constrains the first child
// visited (every later child lies above a separator >= lo), and the upper
// bound only the child just below the first separator >= hi (every earlier
// child lies below a separator < hi).
func (t *BTree[T]) ascend(n *node[T], lo T, hasLo bool, hi T, hasHi bool, fn func(T) bool) bool {
	if n == nil {
		return true
	}
	start, skipChild := 0, false
	if hasLo {
		// If lo is itself in n, child start holds only items < lo.
		start, skipChild = n.find(lo, t.cmp)
	}
	end, endFound := n.n, false
	if hasHi {
		// items[end] is the first separator >= hi. If it equals hi,
		// child end holds only items < hi and needs no bound.
		end, endFound = n.find(hi, t.cmp)
	}
	if n.children == nil {
		// Most visits are to leaves: a plain loop over the slice.
		for _, it := range n.items[start:end] {
			if !fn(it) {
				return false
			}
		}
		return end == n.n
	}
	for k := start; ; k++ {
		if !skipChild {
			if !t.ascend(n.children[k], lo, hasLo && k == start, hi, hasHi && k == end && !endFound, fn) {
				return false
			}
		}
		skipChild = false
		if k == end {
			// Either n is exhausted (end == n.n: every item of n is
			// < hi) or items[end] >= hi and the walk is over.
			return end == n.n
		}
		if !fn(n.items[k]) {
			return false
		}
	}
}

// descend is ascend's mirror image: it visits the items <= hi (if hasHi)
// and > lo (if hasLo) in descending order, with the same one-search-per-node
// cost for each bound.
func (t *BTree[T]) descend(n *node[T], hi T, hasHi bool, lo T, hasLo bool, fn func(T) bool) bool {
	if n == nil {
		return true
	}
	// top is the index of the first child to visit; item top-1 follows it.
	top, skipChild := n.n, false
	if hasHi {
		i, found := n.find(hi, t.cmp)
		top = i
		if found {
			// hi itself is item i: start there, child i+1 is all > hi.
			top, skipChild = i+1, true
		}
	}
	// Items with index >= stop are > lo; item stop-1 is the first one <= lo
	// (if any), and child stop is the only child that needs the bound.
	stop, stopFound := 0, false
	if hasLo {
		i, found := n.find(lo, t.cmp)
		if found {
			// Item i == lo: child i+1 is all > lo, nothing below it.
			stop, stopFound = i+1, true
		} else {
			stop = i
		}
	}
	if n.children == nil {
		for k := top; k > stop; k-- {
			if !fn(n.items[k-1]) {
				return false
			}
		}
		return stop == 0
	}
	for k := top; ; k-- {
		if !skipChild {
			if !t.descend(n.children[k], hi, hasHi && k == top, lo, hasLo && k == stop && !stopFound, fn) {
				return false
			}
		}
		skipChild = false
		if k == stop {
			// Either n is exhausted (stop == 0: every item of n is
			// > lo) or item stop-1 <= lo and the walk is over.
			return stop == 0
		}
		if !fn(n.items[k-1]) {
			return false
		}
	}
}

// maxHeight bounds a tree's height. Every node below the root has at least
// minItems+1 children, so a tree of height h holds at least
// 2*(minItems+1)^(h-2) leaves: 32 levels are more than any memory can fill.
const maxHeight = 32

// Iter is a bidirectional cursor over a BTree; get one from BTree.Iter (a
// zero Iter is over no tree and never valid). Any mutation of the tree
// invalidates its cursors: afterwards they may skip or repeat items. To
// mutate a tree while walking it, walk a Clone.
//
// Its position is a path of frames from the root, stack[:depth]. In every
// frame but the last, idx is the child of that node the path descends into;
// in the last frame idx is the current item. The item that follows child c
// in order is item c of the same node, which makes Next and Prev climb
// without searching. The stack is a fixed array, not a slice into itself, so
// an Iter declared in a function stays on that function's stack.
type Iter[T any] struct {
	t     *BTree[T]
	depth int
	stack [maxHeight]frame[T]
}

type frame[T any] struct {
	n   *node[T]
	idx int
}

// Iter returns an unpositioned cursor over t; call First, Last, SeekGE or
// SeekLE before Item.
func (t *BTree[T]) Iter() *Iter[T] {
	it := &Iter[T]{}
	it.reset(t)
	return it
}

// reset points it at t, unpositioned.
func (it *Iter[T]) reset(t *BTree[T]) {
	it.t = t
	it.depth = 0
}

func (it *Iter[T]) push(n *node[T], idx int) {
	it.stack[it.depth] = frame[T]{n, idx}
	it.depth++
}

func (it *Iter[T]) top() *frame[T] { return &it.stack[it.depth-1] }

// Valid reports whether the cursor is at an item.
func (it *Iter[T]) Valid() bool {
	if it.depth == 0 {
		return false
	}
	f := it.top()
	return f.idx >= 0 && f.idx < f.n.n
}

// Item returns the current item, or the zero T if the cursor is not valid.
func (it *Iter[T]) Item() T {
	if !it.Valid() {
		var zero T
		return zero
	}
	f := it.top()
	return f.n.items[f.idx]
}

// First moves to the smallest item and reports whether there is one.
func (it *Iter[T]) First() bool {
	it.depth = 0
	if it.t == nil || it.t.root == nil {
		return false
	}
	it.downLeft(it.t.root)
	return it.Valid()
}

// Last moves to the largest item and reports whether there is one.
func (it *Iter[T]) Last() bool {
	it.depth = 0
	if it.t == nil || it.t.root == nil {
		return false
	}
	it.downRight(it.t.root)
	return it.Valid()
}

// downLeft pushes the path from n to its smallest item.
func (it *Iter[T]) downLeft(n *node[T]) {
	for n.children != nil {
		it.push(n, 0)
		n = n.children[0]
	}
	it.push(n, 0)
}

// downRight pushes the path from n to its largest item.
func (it *Iter[T]) downRight(n *node[T]) {
	for n.children != nil {
		it.push(n, n.n)
		n = n.children[n.n]
	}
	it.push(n, n.n-1)
}

// SeekGE moves to the smallest item >= key and reports whether there is one.
func (it *Iter[T]) SeekGE(key T) bool {
	if it.t == nil {
		return false
	}
	compare := it.t.cmp
	return it.SeekGEFunc(func(item T) int { return compare(item, key) })
}

// SeekGEFunc moves to the smallest item for which probe returns >= 0 and
// reports whether there is one. probe is as for BTree.GetFunc.
func (it *Iter[T]) SeekGEFunc(probe func(T) int) bool {
	it.depth = 0
	if it.t == nil {
		return false
	}
	n := it.t.root
	if n == nil {
		return false
	}
	for {
		i, found := n.findFunc(probe)
		it.push(n, i)
		if found || n.children == nil {
			break
		}
		n = n.children[i]
	}
	if f := it.top(); f.idx == f.n.n {
		// Past the end of a leaf: the successor is the separator after
		// the nearest ancestor child that is not the last one.
		it.climbForward()
	}
	return it.Valid()
}

// SeekLE moves to the largest item <= key and reports whether there is one.
func (it *Iter[T]) SeekLE(key T) bool {
	if it.t == nil {
		return false
	}
	if !it.SeekGE(key) {
		return it.Last()
	}
	if it.t.cmp(it.Item(), key) > 0 {
		return it.Prev()
	}
	return true
}

// Next moves to the following item and reports whether there is one. On an
// invalid cursor it does nothing and returns false.
func (it *Iter[T]) Next() bool {
	if !it.Valid() {
		return false
	}
	f := it.top()
	f.idx++
	if f.n.children != nil {
		// The successor of item i is the smallest item of child i+1.
		it.downLeft(f.n.children[f.idx])
		return true
	}
	if f.idx < f.n.n {
		return true
	}
	it.climbForward()
	return it.Valid()
}

// climbForward leaves an exhausted leaf: it pops frames whose child index is
// the last one; the first ancestor that still has a separator to the right
// is positioned on it. If there is none, the cursor ends invalid.
func (it *Iter[T]) climbForward() {
	it.depth--
	for it.depth > 0 {
		if f := it.top(); f.idx < f.n.n {
			return
		}
		it.depth--
	}
}

// Prev moves to the preceding item and reports whether there is one. On an
// invalid cursor it does nothing and returns false.
func (it *Iter[T]) Prev() bool {
	if !it.Valid() {
		return false
	}
	f := it.top()
	if f.n.children != nil {
		// The predecessor of item i is the largest item of child i.
		it.downRight(f.n.children[f.idx])
		return true
	}
	f.idx--
	if f.idx >= 0 {
		return true
	}
	// Pop frames that descended into child 0; the first ancestor that
	// descended into child c > 0 is positioned on separator c-1.
	it.depth--
	for it.depth > 0 {
		if f := it.top(); f.idx > 0 {
			f.idx--
			return true
		}
		it.depth--
	}
	return false
}
