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
// per 64 KiB instead of one per call. Chunks are never reused (a value
// read back within the transaction may still be referenced by a caller
// that kept it too long), only shared.
type slab struct{ buf []byte }

const slabChunk = 64 << 10

// copy2 returns copies of k and v, adjacent in one buffer.
func (s *slab) copy2(k, v []byte) (kc, vc []byte) {
	n := len(k) + len(v)
	var b []byte
	if n > slabChunk/4 {
		b = make([]byte, n)
	} else {
		if len(s.buf) < n {
			s.buf = make([]byte, slabChunk)
		}
		b = s.buf[:n:n]
		s.buf = s.buf[n:]
	}
	copy(b, k)
	copy(b[len(k):], v)
	return b[:len(k):len(k)], b[len(k):]
}
