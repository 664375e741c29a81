package pagestore

import (
	"bytes"
	"encoding/binary"
	"sort"
)

// Cursor walks a bucket's keys in order. Keys and values it returns are
// valid only until the transaction ends. A cursor method that hits a
// corrupt page returns nil and records the error, reported by Err.
type Cursor struct {
	b     *Bucket
	stack []elemRef // path from the root to the current leaf element
	err   error
	keys  keySlab   // copies of packed leaves' keys
	leaf  leafCache // the packed leaf the cursor walks, decoded
	walk  bool      // the last move was Next or Prev: decode whole leaves
}

// elemRef is one level of the cursor's path: a page or an in-memory node,
// and the element index in it.
type elemRef struct {
	p   []byte
	n   *node
	idx int
}

func (r *elemRef) count() int {
	if r.n != nil {
		return len(r.n.inodes)
	}
	return pgCount(r.p)
}

func (r *elemRef) isLeaf() bool {
	if r.n != nil {
		return r.n.leaf
	}
	return isLeafPage(r.p)
}

func (r *elemRef) child() pgid {
	if r.n != nil {
		return r.n.inodes[r.idx].child
	}
	_, c := branchElem(r.p, r.idx)
	return c
}

// Err returns the first error the cursor met, if any.
func (c *Cursor) Err() error { return c.err }

// Bucket returns the cursor's bucket.
func (c *Cursor) Bucket() *Bucket { return c.b }

func (c *Cursor) fail(err error) ([]byte, []byte) {
	if c.err == nil {
		c.err = err
	}
	c.stack = c.stack[:0]
	return nil, nil
}

func (c *Cursor) start() error {
	c.walk = false
	if err := c.b.usable(false); err != nil {
		return err
	}
	c.stack = c.stack[:0]
	if c.b.root == 0 && c.b.rootNode == nil {
		return nil
	}
	return c.push(c.b.root)
}

func (c *Cursor) push(id pgid) error {
	p, n, err := c.b.pageNode(id)
	if err != nil {
		return err
	}
	if len(c.stack) >= 64 {
		return corruptf(c.b.tx.db.path, "page %d: tree deeper than 64 levels in bucket %q", id, c.b.name)
	}
	c.stack = append(c.stack, elemRef{p: p, n: n})
	return nil
}

// First moves to the first key and returns it, or nil if the bucket is
// empty.
func (c *Cursor) First() (key, value []byte) {
	if err := c.start(); err != nil {
		return c.fail(err)
	}
	if len(c.stack) == 0 {
		return nil, nil
	}
	if err := c.descend(false); err != nil {
		return c.fail(err)
	}
	if c.top().count() == 0 {
		return c.Next()
	}
	return c.here()
}

// Last moves to the last key and returns it.
func (c *Cursor) Last() (key, value []byte) {
	if err := c.start(); err != nil {
		return c.fail(err)
	}
	if len(c.stack) == 0 {
		return nil, nil
	}
	c.stack[0].idx = c.stack[0].count() - 1
	if err := c.descend(true); err != nil {
		return c.fail(err)
	}
	if c.top().count() == 0 {
		return c.Prev()
	}
	return c.here()
}

// Seek moves to the first key >= seek and returns it, or nil if there is
// none.
func (c *Cursor) Seek(seek []byte) (key, value []byte) {
	if err := c.search(seek); err != nil {
		return c.fail(err)
	}
	if len(c.stack) == 0 {
		return nil, nil
	}
	if r := c.top(); r.idx >= r.count() {
		return c.Next()
	}
	return c.here()
}

// Next moves to the next key and returns it, or nil at the end.
func (c *Cursor) Next() (key, value []byte) {
	if c.err != nil || len(c.stack) == 0 {
		return nil, nil
	}
	c.walk = true
	// Fast path: the next element is in the same leaf page. (The top of
	// the stack is always a leaf once the cursor is positioned.)
	r := &c.stack[len(c.stack)-1]
	if lc := &c.leaf; lc.klen > 0 && r.n == nil && r.idx+1 < pgCount(r.p) && lc.page == &r.p[0] {
		// A packed leaf of the fixed layout whose keys are rebuilt.
		r.idx++
		i := r.idx
		o := r.p[packedOffsets+2*i:]
		vs, ve := le.Uint16(o), le.Uint16(o[2:])
		if lc.flags[i*(1+lc.ml)]&elemFlagsCompressed == 0 {
			return lc.keys[i*lc.klen : (i+1)*lc.klen : (i+1)*lc.klen], r.p[vs:ve:ve]
		}
		return c.here()
	}
	if r.n == nil && r.idx+1 < pgCount(r.p) && isLeafPage(r.p) {
		r.idx++
		k, v, f := c.pageElem(r.p, r.idx)
		if f&elemFlagsCompressed != 0 {
			return c.here()
		}
		return k, v
	}
	for {
		i := len(c.stack) - 1
		for ; i >= 0; i-- {
			r := &c.stack[i]
			if r.idx < r.count()-1 {
				r.idx++
				break
			}
		}
		if i < 0 {
			// Park past the last element so current() returns nil.
			top := c.top()
			top.idx = top.count()
			return nil, nil
		}
		c.stack = c.stack[:i+1]
		if err := c.descend(false); err != nil {
			return c.fail(err)
		}
		if c.top().count() > 0 {
			return c.here()
		}
	}
}

// Prev moves to the previous key and returns it, or nil at the start.
func (c *Cursor) Prev() (key, value []byte) {
	if c.err != nil || len(c.stack) == 0 {
		return nil, nil
	}
	c.walk = true
	for {
		i := len(c.stack) - 1
		for ; i >= 0; i-- {
			r := &c.stack[i]
			if r.idx > 0 {
				r.idx--
				break
			}
		}
		if i < 0 {
			c.top().idx = -1
			return nil, nil
		}
		c.stack = c.stack[:i+1]
		if i == len(c.stack)-1 && c.top().isLeaf() {
			return c.here()
		}
		if err := c.descend(true); err != nil {
			return c.fail(err)
		}
		if c.top().count() > 0 {
			return c.here()
		}
	}
}

func (c *Cursor) top() *elemRef { return &c.stack[len(c.stack)-1] }

// descend follows the current element down to a leaf, positioning at the
// first (or, if last, the last) element of each page on the way.
func (c *Cursor) descend(last bool) error {
	for !c.top().isLeaf() {
		if err := c.push(c.top().child()); err != nil {
			return err
		}
		if last {
			c.top().idx = c.top().count() - 1
		}
	}
	return nil
}

// search positions the cursor at the leaf where key belongs, at the first
// element >= key (possibly one past the end of that leaf).
func (c *Cursor) search(key []byte) error {
	if err := c.start(); err != nil {
		return err
	}
	if len(c.stack) == 0 {
		return nil
	}
	for {
		r := c.top()
		cnt := r.count()
		if r.isLeaf() {
			if r.n != nil {
				r.idx = sort.Search(cnt, func(i int) bool { return bytes.Compare(r.n.inodes[i].key, key) >= 0 })
			} else {
				r.idx, _ = searchLeaf(r.p, key)
			}
			return nil
		}
		// Branch: the last element whose key <= key (element 0 if none).
		var idx int
		if r.n != nil {
			idx = sort.Search(cnt, func(i int) bool { return bytes.Compare(r.n.inodes[i].key, key) > 0 })
		} else {
			idx = searchPage(r.p, cnt, key, 4, 1)
		}
		if idx > 0 {
			idx--
		}
		if cnt == 0 {
			return corruptf(c.b.tx.db.path, "empty branch page in bucket %q", c.b.name)
		}
		r.idx = idx
		if err := c.push(r.child()); err != nil {
			return err
		}
	}
}

// here returns the key and the value under the cursor, the value decoded
// if it is stored compressed (a value that fails to decode fails the
// cursor).
func (c *Cursor) here() (key, value []byte) {
	k, v, f := c.current()
	if f&elemFlagsCompressed == 0 {
		return k, v
	}
	r := c.top()
	var err error
	if r.n != nil {
		v, err = c.b.tx.db.inflateNode(r.n, r.idx)
	} else {
		v, err = c.b.tx.db.inflatePage(r.p, r.idx, f, v)
	}
	if err != nil {
		return c.fail(err)
	}
	return k, v
}

// current returns the element under the cursor, or nil keys if the cursor
// is not on one.
func (c *Cursor) current() (key, value []byte, flags uint32) {
	if len(c.stack) == 0 {
		return nil, nil, 0
	}
	r := c.top()
	if r.idx < 0 || r.idx >= r.count() {
		return nil, nil, 0
	}
	if r.n != nil {
		in := &r.n.inodes[r.idx]
		return in.key, in.value, in.flags
	}
	return c.pageElem(r.p, r.idx)
}

// searchPage returns the first element of page p whose key is >= key
// (strict 0) or > key (strict 1). ksOff is the offset of the key size in
// the element (8 for leaves, 4 for branches); the key position is the
// u32 just before it.
//
// Keys of 8 bytes or more are compared first by their first 8 bytes as a
// big-endian integer, which orders them as bytes.Compare does: for
// revision keys that is the main revision, which almost always decides,
// without a call into the runtime's compare.
func searchPage(p []byte, cnt int, key []byte, ksOff int, strict int) int {
	var head uint64
	long := len(key) >= 8
	if long {
		head = binary.BigEndian.Uint64(key)
	}
	lo, hi := 0, cnt
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		e := p[pageHeaderSize+m*elemSize : pageHeaderSize+m*elemSize+elemSize]
		pos := le.Uint32(e[ksOff-4:])
		ks := le.Uint32(e[ksOff:])
		ek := p[pos : pos+ks]
		var c int
		if long && len(ek) >= 8 {
			switch eh := binary.BigEndian.Uint64(ek); {
			case eh < head:
				c = -1
			case eh > head:
				c = 1
			default:
				c = bytes.Compare(ek[8:], key[8:])
			}
		} else {
			c = bytes.Compare(ek, key)
		}
		if c < strict {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// pageElem returns element i of leaf page p. A packed leaf's keys must be
// rebuilt (packed.go): after a Seek, First or Last the element is rebuilt
// alone; once the cursor walks (Next, Prev), or reads a second element of
// the same page, the whole leaf's keys are rebuilt at once into
// leafCache, so a scan pays one pass per leaf instead of a decode per key.
func (c *Cursor) pageElem(p []byte, i int) (key, value []byte, flags uint32) {
	if pgFlags(p) != flagLeafPacked {
		f, k, v := leafElem(p, i)
		return k, v, f
	}
	lc := &c.leaf
	if lc.page != &p[0] {
		if lc.seen != &p[0] && !c.walk {
			lc.seen = &p[0]
			f, v := leafValue(p, i)
			return c.keys.leafKey(p, i), v, f
		}
		lc.fill(p, &c.keys)
	}
	o := p[packedOffsets+2*i:]
	vs, ve := le.Uint16(o), le.Uint16(o[2:])
	if lc.klen > 0 {
		// The fixed layout: keys of one length, flags in the key area.
		k := lc.keys[i*lc.klen : (i+1)*lc.klen : (i+1)*lc.klen]
		return k, p[vs:ve:ve], uint32(lc.flags[i*(1+lc.ml)])
	}
	e := lc.elems[i]
	ks := uint32(0)
	if i > 0 {
		ks = lc.elems[i-1].kend
	}
	return lc.keys[ks:e.kend:e.kend], p[e.vstart:e.vend:e.vend], uint32(e.flags)
}

// leafCache is one packed leaf's keys, rebuilt end to end into the
// cursor's key slab (so they outlive the cache, as the cursor promises).
// For the fixed layout every key has klen bytes and the flags are read
// from the page's key area; for the variable one, elems records each
// element's key end, value bounds and flags. Neither holds a pointer per
// element, so filling it costs no write barriers.
type leafCache struct {
	page  *byte  // first byte of the page decoded (nil: none)
	seen  *byte  // first byte of the page last read one element from
	keys  []byte // the page's keys, end to end
	klen  int    // fixed layout: every key's length; 0: variable layout
	ml    int    // fixed layout: the key middles' length
	flags []byte // fixed layout: the page's key area (flags, middle)*
	elems []cachedElem
}

type cachedElem struct {
	kend         uint32 // end of the key in keys; it starts where the previous one ends
	vstart, vend uint16 // the value's bounds in the page
	flags        uint8
}

func (lc *leafCache) fill(p []byte, slab *keySlab) {
	n := pgCount(p)
	pre, suf := packedAffixes(p)
	lc.page = &p[0]
	if area, ml := packedKeys(p); ml >= 0 {
		// Write prefix and suffix once, copy that template to every
		// slot by doubling, then put each middle in place.
		kl := len(pre) + ml + len(suf)
		buf := slab.take(n * kl)
		lc.keys, lc.klen, lc.ml, lc.flags = buf, kl, ml, area
		if n == 0 {
			return
		}
		copy(buf, pre)
		copy(buf[len(pre)+ml:], suf)
		for done := kl; done < len(buf); done *= 2 {
			copy(buf[done:], buf[:done])
		}
		for i := 0; i < n; i++ {
			dst, src := buf[i*kl+len(pre):i*kl+len(pre)+ml], area[i*(1+ml)+1:i*(1+ml)+1+ml]
			if ml <= 8 {
				for j := range dst {
					dst[j] = src[j] // a revision key's 2-3 bytes: no call into memmove
				}
			} else {
				copy(dst, src)
			}
		}
		return
	}
	total := n * (len(pre) + len(suf))
	for i := 0; i < n; i++ {
		total += len(packedMid(p, i))
	}
	buf := slab.take(total)
	lc.keys, lc.klen, lc.elems = buf, 0, lc.elems[:0]
	off := 0
	for i := 0; i < n; i++ {
		f, mid, v, vpos := packedRecord(p, i)
		off += copy(buf[off:], pre)
		off += copy(buf[off:], mid)
		off += copy(buf[off:], suf)
		lc.elems = append(lc.elems, cachedElem{kend: uint32(off), vstart: uint16(vpos), vend: uint16(vpos + len(v)), flags: uint8(f)})
	}
}
