package pagestore

import (
	"bytes"
	"fmt"
	"sort"
)

// Bucket is a named B+tree of keys, valid for the life of its transaction.
type Bucket struct {
	tx       *Tx
	name     []byte
	id       uint32 // recorded in each page's owner field
	root     pgid   // committed root page (0 for a bucket created in this tx)
	rootNode *node  // materialised root; non-nil once the writer changes the tree
	nodes    map[pgid]*node
	deleted  bool
	hint     leafHint
}

// leafHint is the leaf the writer's last descent reached, with the key
// range its ancestors' separators give it: a key in that range belongs in
// that leaf, so runs of puts or deletes in one leaf (appends of ascending
// revisions, compaction deleting the oldest) skip the descent. The tree's
// shape and separators only change at commit (rebalance, spill), after
// the last Put or Delete, and spill clears the hint.
type leafHint struct {
	n      *node
	lo, hi []byte // the leaf holds keys in [lo, hi); nil: unbounded
}

func (h *leafHint) covers(key []byte) bool {
	return h.n != nil && (h.lo == nil || bytes.Compare(key, h.lo) >= 0) && (h.hi == nil || bytes.Compare(key, h.hi) < 0)
}

// Name returns the bucket's name; the caller must not change it (readers
// of one commit share it).
func (b *Bucket) Name() []byte { return b.name }

// Tx returns the bucket's transaction.
func (b *Bucket) Tx() *Tx { return b.tx }

// Get returns the value stored under key, or nil if there is none (an
// empty value is a non-nil empty slice). The slice is valid only until the
// transaction ends and must not be modified.
func (b *Bucket) Get(key []byte) ([]byte, error) {
	v, _, err := b.GetBuf(key, nil)
	return v, err
}

// GetBuf is Get for a caller that reads many values and copies each one
// before the next: a value stored compressed is decoded into buf when it
// fits (else into new memory, kept as the next buffer), so such a value
// is valid only until buf is used again; with a nil buf it is Get. It
// returns the buffer to pass next time. buf must be memory of the
// caller's, never a value a read returned.
func (b *Bucket) GetBuf(key, buf []byte) (value, next []byte, err error) {
	if err := b.usable(false); err != nil {
		return nil, buf, err
	}
	v, f, err := b.get(key)
	if err != nil || f&elemFlagsCompressed == 0 {
		return v, buf, err
	}
	out, next, err := inflateInto(f, v, buf)
	if err != nil {
		out, err = b.inflated(string(key), f, v, err)
	}
	return out, next, err
}

// inflated returns the error of decoding the compressed value v found
// under key, for GetBuf, named by its page and offset: it looks the
// element up again. The key comes as a copy, so that GetBuf's key does
// not escape to the heap (the lookup and the error would keep it).
func (b *Bucket) inflated(key string, f uint32, v []byte, err error) ([]byte, error) {
	c := b.Cursor()
	if err := c.search([]byte(key)); err != nil {
		return nil, err
	}
	if r := c.top(); r.n == nil && r.idx < r.count() {
		return b.tx.db.inflatePage(r.p, r.idx, f, v)
	} else if r.n != nil && r.idx < r.count() {
		return b.tx.db.inflateNode(r.n, r.idx)
	}
	return nil, corruptf(b.tx.db.path, "bucket %q: key %x: %v", b.name, key, err)
}

func (b *Bucket) get(key []byte) ([]byte, uint32, error) {
	// A plain descent, without a Cursor, so nothing escapes to the heap.
	id := b.root
	if id == 0 && b.rootNode == nil {
		return nil, 0, nil
	}
	for depth := 0; depth < 64; depth++ {
		p, n, err := b.pageNode(id)
		if err != nil {
			return nil, 0, err
		}
		if n != nil {
			i := sort.Search(len(n.inodes), func(i int) bool { return bytes.Compare(n.inodes[i].key, key) >= 0 })
			if n.leaf {
				if i < len(n.inodes) && bytes.Equal(n.inodes[i].key, key) {
					return n.inodes[i].value, n.inodes[i].flags, nil
				}
				return nil, 0, nil
			}
			if i == len(n.inodes) || !bytes.Equal(n.inodes[i].key, key) {
				i--
			}
			if i < 0 {
				i = 0
			}
			if len(n.inodes) == 0 {
				return nil, 0, corruptf(b.tx.db.path, "empty branch node in bucket %q", b.name)
			}
			id = n.inodes[i].child
			continue
		}
		cnt := pgCount(p)
		if isLeafPage(p) {
			if i, ok := searchLeaf(p, key); ok && i < cnt {
				f, v := leafValue(p, i)
				return v, f, nil
			}
			return nil, 0, nil
		}
		if cnt == 0 {
			return nil, 0, corruptf(b.tx.db.path, "page %d: empty branch page in bucket %q", id, b.name)
		}
		i := searchPage(p, cnt, key, 4, 1)
		if i > 0 {
			i--
		}
		_, id = branchElem(p, i)
	}
	return nil, 0, corruptf(b.tx.db.path, "bucket %q: tree deeper than 64 levels", b.name)
}

// Put stores value under key, copying both.
func (b *Bucket) Put(key, value []byte) error {
	if err := b.usable(true); err != nil {
		return err
	}
	switch {
	case len(key) == 0:
		return ErrKeyRequired
	case len(key) > MaxKeySize:
		return ErrKeyTooLarge
	case int64(len(value)) > MaxValueSize:
		return ErrValueTooLarge
	}
	stored, flags := b.tx.db.compressValue(value)
	kc, vc := b.tx.db.slab.copy2(key, stored)
	if err := b.put(kc, vc, flags); err != nil {
		return err
	}
	b.tx.grew = true
	return nil
}

func (b *Bucket) put(key, value []byte, flags uint32) error {
	if b.hint.covers(key) {
		b.hint.n.put(key, key, value, 0, flags)
		return nil
	}
	n, err := b.leafFor(key)
	if err != nil {
		return err
	}
	n.put(key, key, value, 0, flags)
	return nil
}

// leafFor materialises the path from the root to the leaf where key
// belongs and returns that leaf.
func (b *Bucket) leafFor(key []byte) (*node, error) {
	n, err := b.materializeRoot()
	if err != nil {
		return nil, err
	}
	var lo, hi []byte
	for depth := 0; !n.leaf; depth++ {
		if len(n.inodes) == 0 || depth > 64 {
			return nil, corruptf(b.tx.db.path, "bucket %q: malformed tree at page %d", b.name, n.pgid)
		}
		// The child is the last one whose separator is <= key. (Runs of
		// appends rarely get here: the leaf hint catches them.)
		i := sort.Search(len(n.inodes), func(i int) bool { return bytes.Compare(n.inodes[i].key, key) > 0 })
		if i > 0 {
			i--
		}
		// Child 0 also takes the keys below its separator.
		if i > 0 {
			lo = n.inodes[i].key
		}
		if i+1 < len(n.inodes) {
			hi = n.inodes[i+1].key
		}
		if n, err = b.childNode(n, i); err != nil {
			return nil, err
		}
	}
	b.hint = leafHint{n, lo, hi}
	return n, nil
}

// Delete removes key; deleting a missing key is not an error.
func (b *Bucket) Delete(key []byte) error {
	if err := b.usable(true); err != nil {
		return err
	}
	if len(key) == 0 {
		return ErrKeyRequired
	}
	return b.del(key)
}

func (b *Bucket) del(key []byte) error {
	if b.hint.covers(key) {
		b.hint.n.del(key) // materialised already: a miss copies nothing
		return nil
	}
	// Look first, so that deleting a missing key copies nothing.
	if v, _, err := b.get(key); err != nil || v == nil {
		return err
	}
	n, err := b.leafFor(key)
	if err != nil {
		return err
	}
	n.del(key)
	return nil
}

// ForEach calls fn for every key in order. The slices are valid only
// until the transaction ends. fn must not modify the bucket.
func (b *Bucket) ForEach(fn func(k, v []byte) error) error {
	if err := b.usable(false); err != nil {
		return err
	}
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if err := fn(k, v); err != nil {
			return err
		}
	}
	return c.Err()
}

// Cursor returns a cursor over the bucket. Modifying the bucket while a
// cursor is in use invalidates the cursor's position.
func (b *Bucket) Cursor() *Cursor {
	return &Cursor{b: b, stack: make([]elemRef, 0, 8)}
}

func (b *Bucket) usable(write bool) error {
	if err := b.tx.check(write); err != nil {
		return err
	}
	if b.deleted {
		return fmt.Errorf("%w: %q was deleted", ErrBucketNotFound, b.name)
	}
	return nil
}

// pageNode returns the page or the in-memory node for id.
func (b *Bucket) pageNode(id pgid) ([]byte, *node, error) {
	if b.rootNode != nil && id == b.root {
		return nil, b.rootNode, nil
	}
	if n := b.nodes[id]; n != nil {
		return nil, n, nil
	}
	p, err := b.tx.page(id)
	if err != nil {
		return nil, nil, err
	}
	if f := pgFlags(p); !isLeafFlags(f) && f != flagBranch {
		return nil, nil, corruptf(b.tx.db.path, "page %d: expected a tree page of bucket %q, found flags %#x", id, b.name, f)
	}
	return p, nil, nil
}

// rootNodeFor materialises the root.
func (b *Bucket) materializeRoot() (*node, error) {
	if b.rootNode != nil {
		return b.rootNode, nil
	}
	n, err := b.node(b.root, nil)
	if err != nil {
		return nil, err
	}
	b.rootNode = n
	return n, nil
}

// node materialises page id as a child of parent (nil for the root).
func (b *Bucket) node(id pgid, parent *node) (*node, error) {
	if n := b.nodes[id]; n != nil {
		return n, nil
	}
	p, existing, err := b.pageNode(id)
	if err != nil {
		return nil, err
	}
	if existing != nil {
		return existing, nil
	}
	n := &node{b: b, pgid: id, parent: parent, appendOnly: true}
	n.read(p)
	if parent != nil {
		parent.children = append(parent.children, n)
	}
	if b.nodes == nil {
		b.nodes = map[pgid]*node{}
	}
	b.nodes[id] = n
	return n, nil
}

// childNode materialises parent's idx-th child.
func (b *Bucket) childNode(parent *node, idx int) (*node, error) {
	in := parent.inodes[idx]
	n, err := b.node(in.child, parent)
	if err != nil {
		return nil, err
	}
	n.key = in.key
	return n, nil
}

func (b *Bucket) rebalance() error {
	for _, n := range b.nodeList() {
		if err := n.rebalance(); err != nil {
			return err
		}
	}
	return nil
}

func (b *Bucket) nodeList() []*node {
	out := make([]*node, 0, len(b.nodes))
	for _, n := range b.nodes {
		out = append(out, n)
	}
	return out
}

// spill writes the bucket's changed nodes and sets b.root to the new root.
func (b *Bucket) spill() error {
	b.hint = leafHint{}
	if b.rootNode == nil {
		return nil
	}
	if err := b.rootNode.spill(); err != nil {
		return err
	}
	b.rootNode = b.rootNode.root()
	b.root = b.rootNode.pgid
	b.nodes = nil
	return nil
}
