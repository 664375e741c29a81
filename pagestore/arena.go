package pagestore

// chunks hands out buffers cut from large chunks to the writer (under
// writeMu) and takes them all back at once when the write transaction
// ends (commit or rollback), keeping at most keep chunks for the next
// one, so one huge commit does not pin its size in memory for good.
// Buffers come back with whatever the last user left in them.
type chunks struct {
	size, keep int
	list       [][]byte
	cur        int // index of the chunk being cut
	off        int // bytes cut from list[cur]
}

// get returns a buffer of n bytes with undefined contents. Its capacity
// ends at n, so appending to it can never reach a neighbour's bytes.
func (c *chunks) get(n int) []byte {
	b := c.getRun(n)
	return b[:n:n]
}

// getRun is get with the capacity left running to the end of the chunk,
// so that buffers cut one after another can be recognised as adjacent
// (see adjacentBufs). For dirty pages only: nothing ever appends to them.
func (c *chunks) getRun(n int) []byte {
	if n > c.size {
		return make([]byte, n)
	}
	for {
		if c.cur == len(c.list) {
			c.list = append(c.list, make([]byte, c.size))
		}
		if c.off+n <= c.size {
			b := c.list[c.cur][c.off : c.off+n]
			c.off += n
			return b
		}
		c.cur, c.off = c.cur+1, 0
	}
}

// reset makes every buffer handed out reusable.
func (c *chunks) reset() {
	if len(c.list) > c.keep {
		clear(c.list[c.keep:])
		c.list = c.list[:c.keep]
	}
	c.cur, c.off = 0, 0
}

// release drops every chunk, kept ones included.
func (c *chunks) release() {
	c.list, c.cur, c.off = nil, 0, 0
}

// newPageArena returns the buffers a write transaction spills its nodes
// into (1 MiB chunks, 16 kept). They are not zeroed: node.write sets
// every byte of the run it is given (header, elements, keys and values,
// then clears the rest), so a reused buffer carries nothing from an
// earlier transaction. Dirty buffers are written to the file and read
// back only by the writer of the next transaction (DB.recent), never by
// readers, and the DB keeps two arenas so that a buffer is recycled only
// once the transaction after the one that wrote it has ended. It saves a
// zeroed allocation per spilled node: for a 1,000-key append commit,
// about 70 allocations and 280 KiB of clearing. A run larger than a chunk
// (a large value's overflow) gets its own allocation.
func newPageArena() chunks { return chunks{size: 1 << 20, keep: 16} }

// slab copies keys and values for Put into 64 KiB chunks (256 kept): one
// allocation per chunk instead of one per call. Its chunks are reused by
// the next write transaction once this one has ended: the slices Get and
// cursors return are documented as valid only until their transaction
// ends, the same contract as the mapped pages (a page freed by a commit
// can be rewritten by the next). Reusing them matters: a 10,000-key
// commit copied 2.7 MB into fresh chunks, and on this VM the page faults
// of a heap that keeps growing and being scavenged cost more than the
// copying.
type slab struct{ chunks }

func newSlab() slab { return slab{chunks{size: 64 << 10, keep: 256}} }

// copy2 returns copies of k and v, adjacent in one buffer. A pair larger
// than a quarter chunk gets its own allocation, so chunks are not wasted.
func (s *slab) copy2(k, v []byte) (kc, vc []byte) {
	n := len(k) + len(v)
	var b []byte
	if n > s.size/4 {
		b = make([]byte, n)
	} else {
		b = s.get(n)
	}
	copy(b, k)
	copy(b[len(k):], v)
	return b[:len(k):len(k)], b[len(k):]
}

// inodePool lends the writer's nodes their element arrays and takes them
// all back when the transaction ends. The node that collects a large
// append (a 10,000-key commit lands in one leaf until the spill splits
// it) used to grow its array by append, a quarter at a time: 2.7 MB of
// garbage per such commit. Arrays come in power-of-two capacities, are
// cleared on return (they point into the slab and at large values) and
// are shared with no one: a split's right half aliases its left's array,
// but both nodes belong to the same transaction.
type inodePool struct {
	free [inodeClasses][][]inode
	kept int // elements held in free
	lent [][]inode
}

const (
	inodeMinClass = 4  // 16 elements
	inodeClasses  = 21 // up to 1M elements; larger arrays are not pooled
	inodeKeep     = 8  // arrays kept per class
	// inodeBudget bounds the elements kept between transactions (64 bytes
	// each: 16 MiB), so one huge transaction does not pin its size.
	inodeBudget = 1 << 18
)

func inodeClass(n int) int {
	c := inodeMinClass
	for 1<<c < n {
		c++
	}
	return c
}

// get returns a zero-length array with room for at least n elements.
func (p *inodePool) get(n int) []inode {
	c := inodeClass(n)
	if c >= inodeClasses {
		return make([]inode, 0, n)
	}
	var a []inode
	if l := len(p.free[c]); l > 0 {
		a = p.free[c][l-1]
		p.free[c] = p.free[c][:l-1]
		p.kept -= cap(a)
	} else {
		a = make([]inode, 0, 1<<c)
	}
	p.lent = append(p.lent, a)
	return a
}

// grow returns a with room for at least one more element.
func (p *inodePool) grow(a []inode) []inode {
	if len(a) < cap(a) {
		return a
	}
	b := p.get(2 * (len(a) + 1))
	return append(b, a...)
}

// reset takes back every array lent out.
// release drops the arrays kept for later transactions.
func (p *inodePool) release() {
	p.free = [inodeClasses][][]inode{}
	p.kept = 0
}

func (p *inodePool) reset() {
	for _, a := range p.lent {
		c := inodeClass(cap(a))
		if len(p.free[c]) >= inodeKeep || p.kept+cap(a) > inodeBudget {
			continue // left to the garbage collector
		}
		a = a[:cap(a)]
		clear(a)
		p.free[c] = append(p.free[c], a[:0])
		p.kept += cap(a)
	}
	clear(p.lent)
	p.lent = p.lent[:0]
}
