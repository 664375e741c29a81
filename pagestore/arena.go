package pagestore

// pageArena hands out the buffers a write transaction spills its nodes
// into, and takes them all back when the transaction ends (commit or
// rollback; the writer is single, under writeMu). Buffers are not zeroed:
// node.write sets every byte of the run it is given (header, elements,
// keys and values, then clears the rest), so a reused buffer carries
// nothing from an earlier transaction. Dirty buffers are only ever
// written to the file, never read back or handed to readers, so
// recycling them once the transaction is over is safe.
//
// It saves a zeroed allocation per spilled node: for a 1,000-key append
// commit, about 70 allocations and 280 KiB of clearing.
type pageArena struct {
	chunks [][]byte
	cur    int // index of the chunk being cut
	off    int // bytes cut from chunks[cur]
}

const (
	arenaChunk = 1 << 20
	// arenaKeep bounds what the arena keeps between transactions, so one
	// huge commit does not pin its size in memory for good.
	arenaKeep = 16
)

// get returns a buffer of n bytes with undefined contents.
func (a *pageArena) get(n int) []byte {
	if n > arenaChunk {
		return make([]byte, n) // rare: a large value's overflow run
	}
	for {
		if a.cur == len(a.chunks) {
			a.chunks = append(a.chunks, make([]byte, arenaChunk))
		}
		c := a.chunks[a.cur]
		if a.off+n <= len(c) {
			b := c[a.off : a.off+n : a.off+n]
			a.off += n
			return b
		}
		a.cur, a.off = a.cur+1, 0
	}
}

// reset makes every buffer handed out reusable.
func (a *pageArena) reset() {
	if len(a.chunks) > arenaKeep {
		clear(a.chunks[arenaKeep:])
		a.chunks = a.chunks[:arenaKeep]
	}
	a.cur, a.off = 0, 0
}

// slab copies keys and values for Put into shared chunks: one allocation
// per 64 KiB instead of one per call. It belongs to the writer (under
// writeMu) and its chunks are reused by the next write transaction once
// this one has ended: the slices Get and cursors return are documented as
// valid only until their transaction ends, the same contract as the
// mapped pages (a page freed by a commit can be rewritten by the next).
// Reusing them matters: a 10,000-key commit copied 2.7 MB into fresh
// chunks, and on this VM the page faults of a heap that keeps growing
// and being scavenged cost more than the copying.
type slab struct {
	chunks [][]byte
	cur    int
	off    int
}

const (
	slabChunk = 64 << 10
	slabKeep  = 256 // chunks kept between transactions: 16 MiB
)

// copy2 returns copies of k and v, adjacent in one buffer.
func (s *slab) copy2(k, v []byte) (kc, vc []byte) {
	n := len(k) + len(v)
	var b []byte
	if n > slabChunk/4 {
		b = make([]byte, n)
	} else {
		for {
			if s.cur == len(s.chunks) {
				s.chunks = append(s.chunks, make([]byte, slabChunk))
			}
			if s.off+n <= slabChunk {
				b = s.chunks[s.cur][s.off : s.off+n : s.off+n]
				s.off += n
				break
			}
			s.cur, s.off = s.cur+1, 0
		}
	}
	copy(b, k)
	copy(b[len(k):], v)
	return b[:len(k):len(k)], b[len(k):]
}

// reset makes every chunk reusable.
func (s *slab) reset() {
	if len(s.chunks) > slabKeep {
		clear(s.chunks[slabKeep:])
		s.chunks = s.chunks[:slabKeep]
	}
	s.cur, s.off = 0, 0
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
	lent [][]inode
}

const (
	inodeMinClass = 4  // 16 elements
	inodeClasses  = 21 // up to 16M elements
	inodeKeep     = 8  // arrays kept per class
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
func (p *inodePool) reset() {
	for _, a := range p.lent {
		a = a[:cap(a)]
		clear(a)
		c := inodeClass(cap(a))
		if len(p.free[c]) < inodeKeep {
			p.free[c] = append(p.free[c], a[:0])
		}
	}
	clear(p.lent)
	p.lent = p.lent[:0]
}
