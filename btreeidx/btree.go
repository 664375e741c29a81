package btreeidx

import (
	"cmp"
	"sync/atomic"
)

// Node geometry. A node holds between minItems and maxItems items (the root
// may hold fewer). maxItems is odd so that a full node splits into two nodes
// of exactly minItems items around one median that moves up to the parent;
// a merge of two minimal siblings plus their separator refills exactly one
// full node.
//
// 31 was chosen by measurement (BenchmarkBTree, 100k int items, 31/47/63/127
// tried; see bench/RESULTS.md). Get, insert and range were within noise of
// each other from 31 to 63 (the number of comparisons is about log2(N) at any
// width) and worse at 127, but the first write after a Clone copies one node
// per level, and with fixed-size nodes that copy is what 63 or more items a
// node make expensive: 2 KB a path at 31 against 4 KB at 63.
const (
	maxItems = 31
	minItems = maxItems / 2
)

// ownerSeq hands out ownership tokens. A token is never reused (2^64 tokens
// outlive any process), so "node.owner == tree.owner" proves that the node
// was created by this tree since its last Clone and is reachable from no
// other tree.
var ownerSeq atomic.Uint64

func newOwner() uint64 { return ownerSeq.Add(1) }

// node is one B-tree node. Items are sorted; in an internal node
// children[i] holds the items strictly between items[i-1] and items[i].
//
// Invariants:
//   - items[n:] are zero values, so a removed item is not kept alive.
//   - children == nil for a leaf; for an internal node children[0:n+1] are
//     non-nil and children[n+1:] are nil. All leaves are at the same depth.
//   - A node whose owner differs from the tree's owner may be shared with
//     another tree (a clone) and must never be written; mutable copies it.
type node[T any] struct {
	owner    uint64
	n        int
	items    [maxItems]T
	children *[maxItems + 1]*node[T]
}

// BTree is an ordered set of T kept in an in-memory B-tree, ordered by the
// compare function given to New (negative: a < b, zero: equal, positive:
// a > b). Items that compare equal are the same item: ReplaceOrInsert
// replaces.
//
// Ownership rule:
//   - A BTree is not safe for concurrent use. At most one goroutine may
//     mutate it (ReplaceOrInsert, Delete, DeleteMin, DeleteMax, Clear, and
//     Clone, which re-keys the source's ownership), and no goroutine may read
//     or iterate it while that happens. Readers of one tree that run
//     concurrently with its writer need external synchronization (a
//     sync.RWMutex held for the read and for the write).
//   - Any number of goroutines may read a tree concurrently when nobody
//     mutates it.
//   - Clone returns an independent snapshot in O(1): both trees share every
//     node, and whichever tree first writes a shared node copies it (and the
//     path above it). After Clone the two trees may be mutated independently
//     and by different goroutines; a write to one is never visible in the
//     other. Take the Clone under the same exclusion as a write, then hand the
//     clone to a reader that can work on it without any lock.
//   - Items themselves are not copied. If T is a pointer, the pointee is
//     shared between clones, and mutating it in place is visible to both;
//     copy the pointee before changing it (Index does so for its key
//     entries).
//   - Iterators and the Ascend/Descend callbacks must not mutate the tree
//     they walk; to change a tree while walking it, walk a Clone.
type BTree[T any] struct {
	cmp    func(a, b T) int
	root   *node[T]
	length int
	// owner is the token stamped on nodes this tree may write in place. It
	// changes on every Clone (for both trees), which turns every node that
	// existed at the time of the Clone into a shared, read-only node.
	owner uint64
}

// New returns an empty tree ordered by compare. compare must be a strict
// total order consistent over the tree's lifetime, as cmp.Compare is.
func New[T any](compare func(a, b T) int) *BTree[T] {
	return &BTree[T]{cmp: compare, owner: newOwner()}
}

// NewOrdered returns an empty tree of an ordered type, ordered by
// cmp.Compare.
func NewOrdered[T cmp.Ordered]() *BTree[T] {
	return New(cmp.Compare[T])
}

// Len returns the number of items in the tree.
func (t *BTree[T]) Len() int { return t.length }

// Clone returns a copy-on-write snapshot of t in O(1) time and one
// allocation. See the ownership rule on BTree.
func (t *BTree[T]) Clone() *BTree[T] {
	c := *t
	t.owner = newOwner()
	c.owner = newOwner()
	return &c
}

// Clear removes all items. Nodes are dropped, not recycled, so a clone that
// shares them is unaffected.
func (t *BTree[T]) Clear() {
	t.root = nil
	t.length = 0
}

// find returns the index of the first item >= key in n and whether that item
// equals key. The binary search makes one three-way comparison per step.
func (n *node[T]) find(key T, compare func(a, b T) int) (int, bool) {
	lo, hi := 0, n.n
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		c := compare(n.items[m], key)
		switch {
		case c < 0:
			lo = m + 1
		case c > 0:
			hi = m
		default:
			return m, true
		}
	}
	return lo, false
}

// Get returns the item equal to key, if any.
func (t *BTree[T]) Get(key T) (T, bool) {
	n := t.root
	for n != nil {
		i, found := n.find(key, t.cmp)
		if found {
			return n.items[i], true
		}
		if n.children == nil {
			break
		}
		n = n.children[i]
	}
	var zero T
	return zero, false
}

// findFunc is find for a probe instead of a key: probe(item) reports how
// item compares with the sought key.
func (n *node[T]) findFunc(probe func(T) int) (int, bool) {
	lo, hi := 0, n.n
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		c := probe(n.items[m])
		switch {
		case c < 0:
			lo = m + 1
		case c > 0:
			hi = m
		default:
			return m, true
		}
	}
	return lo, false
}

// GetFunc returns the item for which probe returns zero. probe(item) must
// report how item compares with the sought key under the tree's order
// (negative: item sorts before the key). It lets a caller search by a key of
// another type without building a T (Index searches *keyIndex items by a
// []byte key this way, without allocating a probe entry).
func (t *BTree[T]) GetFunc(probe func(T) int) (T, bool) {
	n := t.root
	for n != nil {
		i, found := n.findFunc(probe)
		if found {
			return n.items[i], true
		}
		if n.children == nil {
			break
		}
		n = n.children[i]
	}
	var zero T
	return zero, false
}

// Has reports whether an item equal to key is in the tree.
func (t *BTree[T]) Has(key T) bool {
	_, ok := t.Get(key)
	return ok
}

// Min returns the smallest item.
func (t *BTree[T]) Min() (T, bool) {
	var zero T
	n := t.root
	if n == nil || n.n == 0 {
		return zero, false
	}
	for n.children != nil {
		n = n.children[0]
	}
	return n.items[0], true
}

// Max returns the largest item.
func (t *BTree[T]) Max() (T, bool) {
	var zero T
	n := t.root
	if n == nil || n.n == 0 {
		return zero, false
	}
	for n.children != nil {
		n = n.children[n.n]
	}
	return n.items[n.n-1], true
}

// internalNode lays an internal node and its child array out in one
// allocation: node.children points at kids, and the *node[T] handed out
// points at the embedded node, which keeps the whole object alive. Leaves
// (most nodes) are plain node[T] values without the child array.
type internalNode[T any] struct {
	node[T]
	kids [maxItems + 1]*node[T]
}

// newNode returns an empty node owned by t.
func (t *BTree[T]) newNode(internal bool) *node[T] {
	if internal {
		in := &internalNode[T]{}
		in.owner = t.owner
		in.children = &in.kids
		return &in.node
	}
	return &node[T]{owner: t.owner}
}

// mutable returns n if t owns it, else a private copy owned by t. The caller
// must link the copy where n was.
func (t *BTree[T]) mutable(n *node[T]) *node[T] {
	if n.owner == t.owner {
		return n
	}
	if n.children != nil {
		in := &internalNode[T]{kids: *n.children}
		in.owner, in.n, in.items = t.owner, n.n, n.items
		in.children = &in.kids
		return &in.node
	}
	return &node[T]{owner: t.owner, n: n.n, items: n.items}
}

// mutableChild makes child i of the (already mutable) node n writable and
// returns it.
func (t *BTree[T]) mutableChild(n *node[T], i int) *node[T] {
	c := n.children[i]
	if c.owner != t.owner {
		c = t.mutable(c)
		n.children[i] = c
	}
	return c
}

func (n *node[T]) insertItemAt(i int, item T) {
	copy(n.items[i+1:n.n+1], n.items[i:n.n])
	n.items[i] = item
	n.n++
}

// insertChildAt must be called after insertItemAt grew n.n, so the child
// array has room for n.n+1 children.
func (n *node[T]) insertChildAt(i int, c *node[T]) {
	copy(n.children[i+1:n.n+1], n.children[i:n.n])
	n.children[i] = c
}

func (n *node[T]) removeItemAt(i int) T {
	out := n.items[i]
	copy(n.items[i:n.n-1], n.items[i+1:n.n])
	n.n--
	var zero T
	n.items[n.n] = zero
	return out
}

// removeChildAt must be called after removeItemAt shrank n.n: the node had
// n.n+2 children and keeps n.n+1.
func (n *node[T]) removeChildAt(i int) *node[T] {
	out := n.children[i]
	copy(n.children[i:n.n+1], n.children[i+1:n.n+2])
	n.children[n.n+1] = nil
	return out
}

// split splits the full mutable node n around its median, keeping the lower
// half in n and returning the median and a new node with the upper half.
func (t *BTree[T]) split(n *node[T]) (T, *node[T]) {
	right := t.newNode(n.children != nil)
	median := n.items[minItems]
	copy(right.items[:], n.items[minItems+1:])
	right.n = maxItems - minItems - 1
	var zero T
	for i := minItems; i < maxItems; i++ {
		n.items[i] = zero
	}
	if n.children != nil {
		copy(right.children[:], n.children[minItems+1:])
		for i := minItems + 1; i <= maxItems; i++ {
			n.children[i] = nil
		}
	}
	n.n = minItems
	return median, right
}

// ReplaceOrInsert adds item, replacing and returning an equal item if one is
// present.
//
// Full nodes are split on the way down, so a leaf always has room when the
// descent reaches it and no second pass up the tree is needed.
func (t *BTree[T]) ReplaceOrInsert(item T) (T, bool) {
	var zero T
	if t.root == nil {
		t.root = t.newNode(false)
	}
	t.root = t.mutable(t.root)
	if t.root.n == maxItems {
		left := t.root
		median, right := t.split(left)
		t.root = t.newNode(true)
		t.root.items[0] = median
		t.root.n = 1
		t.root.children[0] = left
		t.root.children[1] = right
	}
	n := t.root
	for {
		i, found := n.find(item, t.cmp)
		if found {
			old := n.items[i]
			n.items[i] = item
			return old, true
		}
		if n.children == nil {
			n.insertItemAt(i, item)
			t.length++
			return zero, false
		}
		child := t.mutableChild(n, i)
		if child.n == maxItems {
			median, right := t.split(child)
			n.insertItemAt(i, median)
			n.insertChildAt(i+1, right)
			switch c := t.cmp(item, median); {
			case c == 0:
				old := n.items[i]
				n.items[i] = item
				return old, true
			case c > 0:
				child = right
			}
		}
		n = child
	}
}

type removeKind int8

const (
	removeKey removeKind = iota
	removeMin
	removeMax
)

// Delete removes and returns the item equal to key, if any.
func (t *BTree[T]) Delete(key T) (T, bool) { return t.delete(key, removeKey) }

// DeleteMin removes and returns the smallest item.
func (t *BTree[T]) DeleteMin() (T, bool) {
	var zero T
	return t.delete(zero, removeMin)
}

// DeleteMax removes and returns the largest item.
func (t *BTree[T]) DeleteMax() (T, bool) {
	var zero T
	return t.delete(zero, removeMax)
}

func (t *BTree[T]) delete(key T, kind removeKind) (T, bool) {
	var zero T
	if t.root == nil || t.root.n == 0 {
		return zero, false
	}
	if kind == removeKey && !t.Has(key) {
		// Checking first keeps a miss from copying (or rebalancing) the
		// path of a shared tree for nothing.
		return zero, false
	}
	t.root = t.mutable(t.root)
	out, ok := t.remove(t.root, key, kind)
	if t.root.n == 0 && t.root.children != nil {
		// A merge emptied the root: the tree shrinks by one level.
		t.root = t.root.children[0]
	}
	if t.root.n == 0 {
		t.root = nil
	}
	if ok {
		t.length--
	}
	return out, ok
}

// remove deletes key (or the min or max) from the subtree of the mutable
// node n, which is the root or holds more than minItems items. Before
// descending into a child it makes sure that child holds more than minItems
// too, so the final removal from a leaf can never underflow and nothing has
// to be rebalanced on the way back up.
func (t *BTree[T]) remove(n *node[T], key T, kind removeKind) (T, bool) {
	var zero T
	for {
		var i int
		var found bool
		switch kind {
		case removeMin:
			i, found = 0, n.children == nil
		case removeMax:
			if n.children == nil {
				i, found = n.n-1, true
			} else {
				i = n.n
			}
		default:
			i, found = n.find(key, t.cmp)
		}
		if n.children == nil {
			if !found {
				return zero, false
			}
			return n.removeItemAt(i), true
		}
		if n.children[i].n <= minItems {
			// Rotation or merge may move the target into the child or
			// move items around it; search this node again.
			t.grow(n, i)
			continue
		}
		child := t.mutableChild(n, i)
		if found {
			// The separator is the target: replace it by its predecessor,
			// the maximum of the left subtree, which has room to lose one.
			out := n.items[i]
			n.items[i], _ = t.remove(child, zero, removeMax)
			return out, true
		}
		n = child
	}
}

// grow gives child i of the mutable node n (which holds exactly minItems
// items) one more item: it borrows from a sibling that can spare one, or
// merges the child with a sibling and their separator.
func (t *BTree[T]) grow(n *node[T], i int) {
	if i > 0 && n.children[i-1].n > minItems {
		left := t.mutableChild(n, i-1)
		child := t.mutableChild(n, i)
		child.insertItemAt(0, n.items[i-1])
		n.items[i-1] = left.removeItemAt(left.n - 1)
		if left.children != nil {
			child.insertChildAt(0, left.removeChildAt(left.n+1))
		}
		return
	}
	if i < n.n && n.children[i+1].n > minItems {
		right := t.mutableChild(n, i+1)
		child := t.mutableChild(n, i)
		child.items[child.n] = n.items[i]
		child.n++
		n.items[i] = right.removeItemAt(0)
		if right.children != nil {
			child.children[child.n] = right.removeChildAt(0)
		}
		return
	}
	if i == n.n {
		i--
	}
	// Merge children i and i+1 around separator i. Both hold minItems, so
	// the result holds exactly maxItems. The right sibling is only read, so
	// it need not be owned.
	child := t.mutableChild(n, i)
	right := n.children[i+1]
	child.items[child.n] = n.items[i]
	copy(child.items[child.n+1:], right.items[:right.n])
	if child.children != nil {
		copy(child.children[child.n+1:], right.children[:right.n+1])
	}
	child.n += 1 + right.n
	n.removeItemAt(i)
	n.removeChildAt(i + 1)
}
