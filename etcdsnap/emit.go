package etcdsnap

import (
	"context"
	"fmt"
	"io"
)

// emitter is pass 2: it writes pages in page-id order to w. Its memory is
// one open leaf's records (at most a page of them, or one large record,
// whose bytes stay where the source keeps them) and, per branch level,
// the open branch node's keys: a few pages, whatever the database's size.
type emitter struct {
	w       io.Writer
	next    uint64 // the page id of the next page written
	scratch []byte // page header and elements of the node being written
	zeros   []byte
}

func newEmitter(w io.Writer) *emitter {
	return &emitter{w: w, scratch: make([]byte, PageSize), zeros: make([]byte, PageSize)}
}

// page writes whole pages that are already laid out.
func (e *emitter) page(p []byte) error {
	if _, err := e.w.Write(p); err != nil {
		return err
	}
	e.next += uint64(len(p) / PageSize)
	return nil
}

// pad writes zeros from size to the end of the node's pages, and
// accounts for them.
func (e *emitter) pad(size, pages int64) error {
	for rest := pages*PageSize - size; rest > 0; {
		n := min(rest, int64(len(e.zeros)))
		if _, err := e.w.Write(e.zeros[:n]); err != nil {
			return err
		}
		rest -= n
	}
	e.next += uint64(pages)
	return nil
}

// leaf writes a leaf node holding recs, of size bytes.
func (e *emitter) leaf(recs []record, size int64) error {
	pages := pagesFor(size)
	hdr := pageHeaderSize + leafElemSize*len(recs)
	if cap(e.scratch) < hdr {
		e.scratch = make([]byte, hdr)
	}
	s := e.scratch[:hdr]
	putPageHeader(s, e.next, flagLeaf, len(recs), pages-1)
	data := hdr
	for i, r := range recs {
		el := s[pageHeaderSize+leafElemSize*i:]
		le.PutUint32(el[0:], r.flags)
		le.PutUint32(el[4:], uint32(data-(pageHeaderSize+leafElemSize*i)))
		le.PutUint32(el[8:], uint32(len(r.k)))
		le.PutUint32(el[12:], uint32(len(r.v)))
		data += len(r.k) + len(r.v)
	}
	if _, err := e.w.Write(s); err != nil {
		return err
	}
	for _, r := range recs {
		if _, err := e.w.Write(r.k); err != nil {
			return err
		}
		if _, err := e.w.Write(r.v); err != nil {
			return err
		}
	}
	return e.pad(int64(data), pages)
}

// branch writes a branch node over children.
func (e *emitter) branch(children []child, pages int64) error {
	hdr := pageHeaderSize + branchElemSize*len(children)
	if cap(e.scratch) < hdr {
		e.scratch = make([]byte, hdr)
	}
	s := e.scratch[:hdr]
	putPageHeader(s, e.next, flagBranch, len(children), pages-1)
	data := hdr
	for i, c := range children {
		el := s[pageHeaderSize+branchElemSize*i:]
		le.PutUint32(el[0:], uint32(data-(pageHeaderSize+branchElemSize*i)))
		le.PutUint32(el[4:], uint32(len(c.key)))
		le.PutUint64(el[8:], c.pgid)
		data += len(c.key)
	}
	if _, err := e.w.Write(s); err != nil {
		return err
	}
	for _, c := range children {
		if _, err := e.w.Write(c.key); err != nil {
			return err
		}
	}
	return e.pad(int64(data), pages)
}

// child is an element of a branch node: its child's first key (a copy)
// and page.
type child struct {
	key  []byte
	pgid uint64
}

// openBranch is the branch node being filled at one level.
type openBranch struct {
	node     int // its index in the level
	children []child
}

// treeWriter is pass 2 over one tree: it writes the tree's nodes in
// post-order (each branch node right after its last child), so a node is
// written as soon as its children's first keys and page ids are known,
// and the root is the tree's last page. The page ids it gives are the
// plan's: pass 1 counted the same nodes.
type treeWriter struct {
	e    *emitter
	plan *treePlan
	what string

	pk      leafPacker
	recs    []record // the open leaf
	levels  []openBranch
	records int64
	kvBytes int64
	prev    []byte
}

func newTreeWriter(e *emitter, plan *treePlan, what string) *treeWriter {
	return &treeWriter{e: e, plan: plan, what: what, levels: make([]openBranch, len(plan.branches.levels))}
}

// branchPages is the pages of a branch node over children.
func branchPages(children []child) int64 {
	size := int64(pageHeaderSize)
	for _, c := range children {
		size += branchElemSize + int64(len(c.key))
	}
	return pagesFor(size)
}

func (w *treeWriter) add(k, v []byte, flags uint32) error {
	if err := checkRecord(w.what, w.prev, k, v); err != nil {
		return err
	}
	w.prev = k
	kv := int64(len(k) + len(v))
	if closed := w.pk.add(kv); closed > 0 {
		if err := w.flushLeaf(closed); err != nil {
			return err
		}
	}
	w.recs = append(w.recs, record{k: k, v: v, flags: flags})
	w.records++
	w.kvBytes += kv
	return nil
}

func (w *treeWriter) flushLeaf(size int64) error {
	id := w.e.next
	if err := w.e.leaf(w.recs, size); err != nil {
		return err
	}
	var first []byte
	if len(w.recs) > 0 {
		first = w.recs[0].k
	}
	clear(w.recs) // let the source's slices go
	w.recs = w.recs[:0]
	return w.up(0, first, id)
}

// up hands a finished node (its first key and page) to branch level l,
// writing the level's open node once it has the children pass 1 gave it.
func (w *treeWriter) up(l int, first []byte, id uint64) error {
	if l == len(w.levels) {
		return nil // the root
	}
	ob := &w.levels[l]
	counts := w.plan.branches.levels[l].counts
	if ob.node >= len(counts) {
		return fmt.Errorf("%w: %s: more nodes at branch level %d than planned", ErrChanged, w.what, l)
	}
	// Reuse the key buffers of the level's previous node.
	n := len(ob.children)
	if n < cap(ob.children) {
		ob.children = ob.children[:n+1]
		ob.children[n].key = append(ob.children[n].key[:0], first...)
		ob.children[n].pgid = id
	} else {
		ob.children = append(ob.children, child{key: append([]byte(nil), first...), pgid: id})
	}
	if len(ob.children) < int(counts[ob.node]) {
		return nil
	}
	nid := w.e.next
	if err := w.e.branch(ob.children, branchPages(ob.children)); err != nil {
		return err
	}
	nfirst := append([]byte(nil), ob.children[0].key...)
	ob.children = ob.children[:0]
	ob.node++
	return w.up(l+1, nfirst, nid)
}

// finish writes the open leaf and checks the tree came out as planned.
func (w *treeWriter) finish() error {
	if w.pk.n > 0 || w.records == 0 {
		size := w.pk.size
		if w.pk.n == 0 {
			size = pageHeaderSize // an empty tree: one empty leaf
		}
		if err := w.flushLeaf(size); err != nil {
			return err
		}
	}
	if w.records != w.plan.records || w.kvBytes != w.plan.kvBytes {
		return fmt.Errorf("%w: %s: %d records of %d bytes, planned %d of %d", ErrChanged, w.what,
			w.records, w.kvBytes, w.plan.records, w.plan.kvBytes)
	}
	for l, ob := range w.levels {
		if n := len(w.plan.branches.levels[l].counts); ob.node != n || len(ob.children) != 0 {
			return fmt.Errorf("%w: %s: branch level %d ended at node %d of %d", ErrChanged, w.what, l, ob.node, n)
		}
	}
	if end := w.plan.first + uint64(w.plan.pages); w.e.next != end {
		return fmt.Errorf("%w: %s: ended at page %d, planned %d", ErrChanged, w.what, w.e.next, end)
	}
	return nil
}

// writeTree is pass 2 over a bucket's records.
func writeTree(ctx context.Context, e *emitter, plan *treePlan, what string, recs Records) error {
	if e.next != plan.first {
		return fmt.Errorf("%w: %s starts at page %d, planned %d", ErrChanged, what, e.next, plan.first)
	}
	w := newTreeWriter(e, plan, what)
	for {
		k, v, ok := recs.Next()
		if !ok {
			break
		}
		if err := w.add(k, v, 0); err != nil {
			return err
		}
		if err := checkContext(ctx, w.records); err != nil {
			return err
		}
	}
	if err := recs.Err(); err != nil {
		return fmt.Errorf("etcdsnap: %s: %w", what, err)
	}
	return w.finish()
}
