package pagestore

import "sync/atomic"

// verifiedChunk is how many pages one lazily allocated block of the
// verified set covers: 32768 pages (128 MiB of 4 KiB pages) in 4 KiB of
// bits.
const verifiedChunk = 1 << 15

// verifiedSet is a bit per page of the mapping: its checksum and
// structure were verified (DB.page). It is two-level, with the blocks of
// bits allocated when a page in their range is first verified: one flat
// bitmap for the whole mapping was 2 MiB of heap for every DB (64 GiB of
// 4 KiB pages), whatever its size, and the garbage collector's pacing
// counts it as live heap. Safe for concurrent use.
type verifiedSet struct {
	blocks []atomic.Pointer[[verifiedChunk / 64]atomic.Uint64]
}

func newVerifiedSet(pages int64) verifiedSet {
	return verifiedSet{blocks: make([]atomic.Pointer[[verifiedChunk / 64]atomic.Uint64], (pages+verifiedChunk-1)/verifiedChunk)}
}

func (v *verifiedSet) has(id pgid) bool {
	b := v.blocks[id/verifiedChunk].Load()
	return b != nil && b[id%verifiedChunk/64].Load()&(1<<(id%64)) != 0
}

func (v *verifiedSet) add(id pgid) {
	slot := &v.blocks[id/verifiedChunk]
	b := slot.Load()
	if b == nil {
		b = new([verifiedChunk / 64]atomic.Uint64)
		if !slot.CompareAndSwap(nil, b) {
			b = slot.Load() // another reader allocated it first
		}
	}
	b[id%verifiedChunk/64].Or(1 << (id % 64))
}

func (v *verifiedSet) remove(id pgid) {
	if b := v.blocks[id/verifiedChunk].Load(); b != nil {
		b[id%verifiedChunk/64].And(^(uint64(1) << (id % 64)))
	}
}
