package etcdsnap

import (
	"bytes"
	"context"
	"fmt"
)

// leafPacker cuts a tree's records into leaves. Both passes use it, so
// they cut at the same records: a leaf takes records in key order while
// its size (header, elements, keys and values) stays within one page; a
// record that does not fit starts the next leaf, and a record larger than
// a page gets a leaf of its own with overflow pages. So every leaf but
// the last is as full as the next record allows, which suits etcd's key
// bucket, whose writes append at the end.
type leafPacker struct {
	n    int   // records in the open leaf
	size int64 // its size in bytes, header included
}

// add adds a record of kv key and value bytes. If the record starts a
// new leaf, it returns the size of the leaf it closed.
func (p *leafPacker) add(kv int64) (closed int64) {
	elem := leafElemSize + kv
	if p.n > 0 && (p.size+elem > PageSize || p.n == maxElems) {
		closed = p.size
		p.n, p.size = 0, pageHeaderSize
	}
	if p.n == 0 {
		p.size = pageHeaderSize
	}
	p.n++
	p.size += elem
	return closed
}

// branchPlan is the branch levels above a tree's leaves, bottom-up. Pass
// 1 fills them as leaves close: a level takes children (each a node of
// the level below, represented by its first key, which its branch element
// holds) in order while they fit one page, and always at least two, so
// every branch node has the two children bbolt's own splits leave it
// (node.minKeys); a node closes when the next child does not fit, and
// goes up to the next level. When a level ends with a lone child, the
// child joins the node before it (which may then take an overflow page),
// and a level that ends with a single node holding a single child is no
// level: that child is the root. Pass 2 closes nodes at the child counts
// recorded here, so both passes build the same nodes. The memory is one
// count per branch node, about one per hundred leaves.
type branchPlan struct {
	levels []*branchLevel
	pages  int64 // all branch pages
	root   int64 // pages of the root node, if it is a branch node
}

type branchLevel struct {
	counts []uint32 // children of each closed node, in order

	// The open node, and the size of the node closed before it.
	open, size, firstKey int64
	prevSize             int64
}

// add takes the next child of level l: a node whose first key is keyLen
// bytes long.
func (b *branchPlan) add(l int, keyLen int64) {
	if l == len(b.levels) {
		b.levels = append(b.levels, &branchLevel{})
	}
	lv := b.levels[l]
	elem := branchElemSize + keyLen
	if lv.open >= 2 && (lv.size+elem > PageSize || lv.open == maxElems) {
		b.close(l)
	}
	if lv.open == 0 {
		lv.size, lv.firstKey = pageHeaderSize, keyLen
	}
	lv.open++
	lv.size += elem
}

// close closes the open node of level l and hands it to level l+1.
func (b *branchPlan) close(l int) {
	lv := b.levels[l]
	lv.counts = append(lv.counts, uint32(lv.open))
	b.pages += pagesFor(lv.size)
	lv.prevSize = lv.size
	lv.open = 0
	b.add(l+1, lv.firstKey)
}

// finish closes every level's open node, bottom-up. leafRoot is the
// pages of the tree's only leaf, should the tree have one.
func (b *branchPlan) finish(leafRoot int64) {
	below := leafRoot // pages of the last node finished below level l
	for l := 0; l < len(b.levels); l++ {
		lv := b.levels[l]
		switch {
		case lv.open == 1 && len(lv.counts) == 0:
			// A single child: it is the root, and this level and any
			// above it (none can have a closed node) are no levels.
			b.levels = b.levels[:l]
			b.root = below
			return
		case lv.open == 1:
			// A lone child joins the node before it.
			b.pages -= pagesFor(lv.prevSize)
			lv.prevSize += branchElemSize + lv.firstKey
			b.pages += pagesFor(lv.prevSize)
			lv.counts[len(lv.counts)-1]++
			lv.open = 0
			below = pagesFor(lv.prevSize)
		case len(lv.counts) == 0:
			// The only node of the level: the root.
			lv.counts = append(lv.counts, uint32(lv.open))
			b.pages += pagesFor(lv.size)
			b.root = pagesFor(lv.size)
			b.levels = b.levels[:l+1]
			return
		default:
			below = pagesFor(lv.size)
			b.close(l)
		}
	}
	b.root = below
}

// treePlan is pass 1's result for one tree (a bucket, or the root tree
// of buckets): everything pass 2 needs to place its pages, and what pass
// 2 checks it saw the same records.
type treePlan struct {
	records   int64
	kvBytes   int64
	maxKey    int64
	leaves    int64
	leafPages int64
	branches  branchPlan
	pages     int64 // leaf and branch pages
	rootPages int64 // pages of the root node

	// inline is the bucket's value when it is stored inline (header and
	// its one leaf), nil otherwise. Pass 1 keeps the records of a
	// bucket while they still fit an inline page (a quarter page).
	inline []byte
	// first is the tree's first page; its root node is its last.
	first uint64
}

// root is the page id of the tree's root node.
func (t *treePlan) root() uint64 { return t.first + uint64(t.pages-t.rootPages) }

// planner is pass 1 over one tree.
type planner struct {
	t        treePlan
	pk       leafPacker
	firstKey int64 // of the open leaf
	prev     []byte
	small    []record // the records, while the tree could still be inline
	inlineT  bool     // still a candidate for inline storage
}

type record struct {
	k, v  []byte
	flags uint32
}

func newPlanner(inlineCandidate bool) *planner {
	return &planner{inlineT: inlineCandidate}
}

// add takes the next record; what is the name of the tree, for errors.
func (p *planner) add(what string, k, v []byte, flags uint32) error {
	if err := checkRecord(what, p.prev, k, v); err != nil {
		return err
	}
	p.prev = k
	t := &p.t
	kv := int64(len(k) + len(v))
	if closed := p.pk.add(kv); closed > 0 {
		p.closeLeaf(closed)
	}
	if p.pk.n == 1 {
		p.firstKey = int64(len(k))
	}
	t.records++
	t.kvBytes += kv
	t.maxKey = max(t.maxKey, int64(len(k)))
	if p.inlineT {
		if pageHeaderSize+t.kvBytes+t.records*leafElemSize > maxInline || flags&bucketLeafFlag != 0 {
			p.inlineT, p.small = false, nil
		} else {
			p.small = append(p.small, record{k: k, v: v, flags: flags})
		}
	}
	return nil
}

func (p *planner) closeLeaf(size int64) {
	p.t.leaves++
	p.t.leafPages += pagesFor(size)
	p.t.branches.add(0, p.firstKey)
}

// finish completes the plan of the tree.
func (p *planner) finish() treePlan {
	if p.inlineT {
		p.t.inline = inlineValue(p.small)
		return p.t
	}
	last := p.pk.size
	if p.pk.n == 0 { // an empty tree stored on a page: one empty leaf
		last, p.firstKey = pageHeaderSize, 0
	}
	p.closeLeaf(last)
	t := p.t
	t.branches.finish(pagesFor(last))
	t.pages = t.leafPages + t.branches.pages
	t.rootPages = t.branches.root
	return t
}

// checkRecord checks what bbolt requires of a record: a key of 1 to
// 32768 bytes, above the previous key, and a value of at most 2^31-2
// bytes.
func checkRecord(what string, prev, k, v []byte) error {
	switch {
	case len(k) == 0:
		return fmt.Errorf("%w: %s: an empty key (bbolt keys are 1 to %d bytes)", ErrInvalid, what, maxKeySize)
	case len(k) > maxKeySize:
		return fmt.Errorf("%w: %s: key %.32x... is %d bytes, more than bbolt's %d", ErrInvalid, what, k, len(k), maxKeySize)
	case int64(len(v)) > maxValueSize:
		return fmt.Errorf("%w: %s: the value of key %.32x is %d bytes, more than bbolt's %d", ErrInvalid, what, k, len(v), maxValueSize)
	case prev != nil && bytes.Compare(prev, k) >= 0:
		return fmt.Errorf("%w: %s: key %.32x does not follow key %.32x in order", ErrInvalid, what, k, prev)
	}
	return nil
}

// inlineValue is the value of a bucket stored inline: a bucket header
// with root 0, followed by its leaf page (page id 0, no overflow).
func inlineValue(recs []record) []byte {
	size := bucketHeaderSize + pageHeaderSize
	for _, r := range recs {
		size += leafElemSize + len(r.k) + len(r.v)
	}
	b := make([]byte, size)
	putLeaf(b[bucketHeaderSize:], 0, 0, recs)
	return b
}

// putLeaf writes a leaf page holding recs into p (which is large enough
// and zero) and returns its size.
func putLeaf(p []byte, id uint64, overflow int64, recs []record) int {
	putPageHeader(p, id, flagLeaf, len(recs), overflow)
	data := pageHeaderSize + leafElemSize*len(recs)
	for i, r := range recs {
		e := p[pageHeaderSize+leafElemSize*i:]
		le.PutUint32(e[0:], r.flags)
		le.PutUint32(e[4:], uint32(data-(pageHeaderSize+leafElemSize*i)))
		le.PutUint32(e[8:], uint32(len(r.k)))
		le.PutUint32(e[12:], uint32(len(r.v)))
		data += copy(p[data:], r.k)
		data += copy(p[data:], r.v)
	}
	return data
}

// checkContext polls ctx every so many records.
func checkContext(ctx context.Context, n int64) error {
	if n&4095 == 0 {
		return ctx.Err()
	}
	return nil
}
