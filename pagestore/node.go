package pagestore

import (
	"bytes"
	"sort"
)

// node is the writer's in-memory, mutable copy of a tree page. Every node
// that is materialised is rewritten to a new page at commit (copy on
// write); the page it came from is freed.
type node struct {
	b          *Bucket
	leaf       bool
	pgid       pgid   // page it was read from (0: new); the new page after spill
	key        []byte // the key the parent uses for this node
	parent     *node
	children   []*node // materialised children
	inodes     []inode
	unbalanced bool // a delete happened: check fill before spill
	appendOnly bool // every insert landed after the last key: split full
	spilled    bool
	removed    bool
}

type inode struct {
	flags uint32
	key   []byte
	value []byte
	child pgid
}

func (n *node) minKeys() int {
	if n.leaf {
		return 1
	}
	return 2
}

// size is the bytes n takes on disk: packed if it fits in one page, else
// in the 16-byte element format (see packed.go).
func (n *node) size() int {
	if n.leaf && len(n.inodes) > 0 && packLeaves {
		if s := packedLayout(n.inodes); s.size <= packedLimit(n.b.tx.db.pageSize) {
			return s.size
		}
	}
	return n.classicSize()
}

func (n *node) classicSize() int {
	sz := pageHeaderSize
	for i := range n.inodes {
		sz += elemSize + len(n.inodes[i].key) + len(n.inodes[i].value)
	}
	return sz
}

func (n *node) root() *node {
	for n.parent != nil {
		n = n.parent
	}
	return n
}

// read fills n from page p.
func (n *node) read(p []byte) {
	n.leaf = isLeafPage(p)
	cnt := pgCount(p)
	n.inodes = n.b.tx.db.inodes.get(cnt)[:cnt]
	if pgFlags(p) == flagLeafPacked {
		n.readPacked(p)
		cnt = 0
	}
	for i := 0; i < cnt; i++ {
		in := &n.inodes[i]
		if n.leaf {
			in.flags, in.key, in.value = leafElem(p, i)
		} else {
			in.key, in.child = branchElem(p, i)
		}
	}
	if len(n.inodes) > 0 {
		n.key = n.inodes[0].key
	}
}

// write encodes n into buf, a run of whole pages starting at page id.
func (n *node) write(buf []byte, id pgid, ps int) {
	if n.leaf && len(n.inodes) > 0 && len(buf) == ps && packLeaves {
		if s := packedLayout(n.inodes); s.size <= packedLimit(ps) {
			n.writePacked(buf, id, s)
			return
		}
	}
	n.writeClassic(buf, id, ps)
}

// writeClassic encodes n with 16-byte elements: every branch, and a leaf
// that needs an overflow run.
func (n *node) writeClassic(buf []byte, id pgid, ps int) {
	flags := flagBranch
	if n.leaf {
		flags = flagLeaf
	}
	putHeader(buf, id, flags, len(n.inodes), uint32(len(buf)/ps-1), n.b.id)
	off := pageHeaderSize + len(n.inodes)*elemSize
	for i := range n.inodes {
		in := &n.inodes[i]
		e := buf[pageHeaderSize+i*elemSize:]
		if n.leaf {
			le.PutUint32(e[0:], in.flags)
			le.PutUint32(e[4:], uint32(off))
			le.PutUint32(e[8:], uint32(len(in.key)))
			le.PutUint32(e[12:], uint32(len(in.value)))
		} else {
			le.PutUint32(e[0:], uint32(off))
			le.PutUint32(e[4:], uint32(len(in.key)))
			le.PutUint64(e[8:], uint64(in.child))
		}
		off += copy(buf[off:], in.key)
		off += copy(buf[off:], in.value)
	}
	clear(buf[off:])
	sealPage(buf)
}

// put inserts or replaces the element keyed oldKey.
func (n *node) put(oldKey, newKey, value []byte, child pgid, flags uint32) {
	var idx int
	if last := len(n.inodes) - 1; last >= 0 && bytes.Compare(n.inodes[last].key, oldKey) < 0 {
		idx = len(n.inodes) // appending (revision keys arrive in order): no search
	} else {
		idx = sort.Search(len(n.inodes), func(i int) bool { return bytes.Compare(n.inodes[i].key, oldKey) >= 0 })
	}
	if idx == len(n.inodes) || !bytes.Equal(n.inodes[idx].key, oldKey) {
		if idx < len(n.inodes) {
			n.appendOnly = false
		}
		n.inodes = n.b.tx.db.inodes.grow(n.inodes)
		n.inodes = append(n.inodes, inode{})
		copy(n.inodes[idx+1:], n.inodes[idx:])
	}
	in := &n.inodes[idx]
	in.flags, in.key, in.value, in.child = flags, newKey, value, child
}

// del removes key if present.
func (n *node) del(key []byte) bool {
	idx := sort.Search(len(n.inodes), func(i int) bool { return bytes.Compare(n.inodes[i].key, key) >= 0 })
	if idx == len(n.inodes) || !bytes.Equal(n.inodes[idx].key, key) {
		return false
	}
	n.inodes = append(n.inodes[:idx], n.inodes[idx+1:]...)
	n.unbalanced = true
	return true
}

func (n *node) removeChild(c *node) {
	for i, x := range n.children {
		if x == c {
			n.children = append(n.children[:i], n.children[i+1:]...)
			return
		}
	}
}

// childIndex returns the index of c's element in n.
func (n *node) childIndex(c *node) int {
	return sort.Search(len(n.inodes), func(i int) bool { return bytes.Compare(n.inodes[i].key, c.key) >= 0 })
}

// split cuts n into nodes that each fit a page (a single oversized element
// gets an overflow run). A node that only received appends is cut full, so
// monotonic keys (revisions) fill every leaf; others are cut in half.
func (n *node) split(ps int) []*node {
	nodes := []*node{n}
	cur := n
	if n.leaf && packLeaves {
		for {
			next := cur.splitLeaf(ps)
			if next == nil {
				return nodes
			}
			nodes = append(nodes, next)
			cur = next
		}
	}
	// The remainder's size is carried from split to split: recomputing it
	// each time made splitting a large append (10k keys into one leaf)
	// quadratic.
	size := n.size()
	for {
		next, first := cur.splitTwo(ps, size)
		if next == nil {
			return nodes
		}
		nodes = append(nodes, next)
		size -= first - pageHeaderSize
		cur = next
	}
}

// splitTwo cuts n after its first page's worth of elements and returns
// the new right node and the size of what n keeps; size is n.size().
func (n *node) splitTwo(ps, size int) (*node, int) {
	mk := n.minKeys()
	if len(n.inodes) <= mk*2 || size <= ps {
		return nil, 0
	}
	threshold := ps / 2
	if n.appendOnly {
		threshold = ps
	}
	sz, idx := pageHeaderSize, 0
	for i := range n.inodes {
		es := elemSize + len(n.inodes[i].key) + len(n.inodes[i].value)
		if i >= mk && sz+es > threshold {
			break
		}
		sz += es
		idx = i + 1
	}
	if idx > len(n.inodes)-mk {
		idx = len(n.inodes) - mk
	}
	if idx <= 0 || idx >= len(n.inodes) {
		return nil, 0
	}
	next := n.cutAt(idx)
	return next, n.size()
}

// splitLeaf is splitTwo for a leaf, measured in the packed format: it
// cuts n after the elements that fit within the threshold and returns the
// new right node, or nil if n fits in one page. It scans at most a page's
// worth of elements, so splitting a large append stays linear.
func (n *node) splitLeaf(ps int) *node {
	mk := n.minKeys()
	if len(n.inodes) <= mk*2 {
		return nil
	}
	threshold := ps / 2
	if n.appendOnly {
		threshold = ps
	}
	limit := packedLimit(ps)
	idx, all := packedFit(n.inodes, min(threshold, limit), limit)
	if all {
		return nil
	}
	idx = min(max(idx, mk), len(n.inodes)-mk)
	return n.cutAt(idx)
}

// cutAt moves n's elements from idx on into a new right sibling.
func (n *node) cutAt(idx int) *node {
	if n.parent == nil {
		n.parent = &node{b: n.b, children: []*node{n}, appendOnly: true}
	}
	next := &node{b: n.b, leaf: n.leaf, parent: n.parent, appendOnly: n.appendOnly}
	n.parent.children = append(n.parent.children, next)
	next.inodes = n.inodes[idx:]
	n.inodes = n.inodes[:idx:idx]
	return next
}

// spill writes n's subtree to new pages, children first, and updates the
// parents' references.
func (n *node) spill() error {
	if n.spilled {
		return nil
	}
	tx := n.b.tx
	ps := tx.db.pageSize
	children := append([]*node(nil), n.children...)
	sort.Slice(children, func(i, j int) bool { return bytes.Compare(children[i].key, children[j].key) < 0 })
	for _, c := range children {
		if err := c.spill(); err != nil {
			return err
		}
	}
	n.children = nil
	for _, m := range n.split(ps) {
		if m.pgid > 0 {
			if err := tx.free(m.pgid); err != nil {
				return err
			}
			m.pgid = 0
		}
		npages := (m.size() + ps - 1) / ps
		id, err := tx.allocate(npages)
		if err != nil {
			return err
		}
		buf := tx.db.pageBuf(npages * ps)
		m.write(buf, id, ps)
		tx.dirty = append(tx.dirty, dirtyPage{id, buf})
		m.pgid = id
		m.spilled = true
		if m.parent != nil {
			key := m.key
			if key == nil {
				key = m.inodes[0].key
			}
			m.parent.put(key, m.inodes[0].key, nil, m.pgid, 0)
			m.key = m.inodes[0].key
		}
	}
	if n.parent != nil && n.parent.pgid == 0 {
		return n.parent.spill()
	}
	return nil
}

// rebalance merges n into a sibling when a delete left it under a quarter
// full, removes it when empty, and collapses a root with one child.
func (n *node) rebalance() error {
	if !n.unbalanced || n.removed {
		return nil
	}
	n.unbalanced = false
	b, tx := n.b, n.b.tx
	if n.size() > tx.db.pageSize/4 && len(n.inodes) > n.minKeys() {
		return nil
	}
	if n.parent == nil {
		if !n.leaf && len(n.inodes) == 1 {
			child, err := b.childNode(n, 0)
			if err != nil {
				return err
			}
			n.leaf, n.inodes, n.children = child.leaf, child.inodes, child.children
			for _, c := range n.children {
				c.parent = n
			}
			child.removed = true
			child.parent, child.children = nil, nil
			delete(b.nodes, child.pgid)
			if err := tx.free(child.pgid); err != nil {
				return err
			}
			n.unbalanced = true
			return n.rebalance()
		}
		return nil
	}
	parent := n.parent
	if len(n.inodes) == 0 {
		parent.del(n.key)
		parent.removeChild(n)
		n.removed = true
		delete(b.nodes, n.pgid)
		if n.pgid != 0 {
			if err := tx.free(n.pgid); err != nil {
				return err
			}
		}
		return parent.rebalance()
	}
	if len(parent.inodes) < 2 {
		return nil
	}
	idx := parent.childIndex(n)
	// Merge the right node of the pair into the left one.
	left, right := n, (*node)(nil)
	var err error
	if idx == 0 {
		right, err = b.childNode(parent, 1)
	} else {
		left, err = b.childNode(parent, idx-1)
		right = n
	}
	if err != nil {
		return err
	}
	left.inodes = append(left.inodes, right.inodes...)
	for _, c := range right.children {
		c.parent = left
		left.children = append(left.children, c)
	}
	left.appendOnly = false
	parent.del(right.key)
	parent.removeChild(right)
	right.removed = true
	delete(b.nodes, right.pgid)
	if right.pgid != 0 {
		if err := tx.free(right.pgid); err != nil {
			return err
		}
	}
	return parent.rebalance()
}
