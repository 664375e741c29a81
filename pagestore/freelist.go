package pagestore

import "fmt"

// checkpointEvery bounds the freelist log: after this many records since
// the last checkpoint the next commit writes a checkpoint. It bounds Open
// to reading one checkpoint plus this many small records.
const checkpointEvery = 64

// pendingFree is what one committed transaction freed.
type pendingFree struct {
	txid uint64
	ext  []extent
}

// freelist is the writer's view of free space. It is owned by whoever holds
// DB.writeMu; nothing else touches it.
//
// Invariant (between transactions): the pages [2, hwm) of the latest
// commit are exactly partitioned into pages reachable from its meta, pages
// in free, and pages in pending; and the on-disk log ending at meta.flHead
// decodes to free ∪ pending.
type freelist struct {
	free *freeSet
	// pending holds pages freed by committed transactions that an open
	// reader may still see, in ascending txid order.
	pending      []pendingFree
	pendingCount uint64
	// chain lists the log records from the checkpoint (first) to the
	// newest delta (last); all of them are live pages.
	chain        []extent
	deltaExtents int // extents recorded in deltas since the checkpoint
	ckptExtents  int // extents in the checkpoint
}

// release makes every pending page freed by a transaction <= upTo free.
func (fl *freelist) release(upTo uint64) error {
	i := 0
	for ; i < len(fl.pending) && fl.pending[i].txid <= upTo; i++ {
		for _, e := range fl.pending[i].ext {
			if !fl.free.add(e.start, e.n) {
				return fmt.Errorf("%w: pages [%d,+%d) freed twice (tx %d)", ErrCorrupt, e.start, e.n, fl.pending[i].txid)
			}
			fl.pendingCount -= e.n
		}
	}
	fl.pending = append(fl.pending[:0], fl.pending[i:]...)
	return nil
}

func (fl *freelist) pendingContains(id pgid) bool {
	for _, p := range fl.pending {
		for _, e := range p.ext {
			if id >= e.start && id < e.end() {
				return true
			}
		}
	}
	return false
}

// encodeFreelistRecord fills buf (a whole page run starting at page id).
func encodeFreelistRecord(buf []byte, id pgid, kind uint32, prev pgid, txid uint64, hwm, trunc pgid, alloc, freed []extent, ps int) {
	clear(buf)
	putHeader(buf, id, flagFreelist, len(alloc)+len(freed), uint32(len(buf)/ps-1), 0)
	le.PutUint32(buf[flOffKind:], kind)
	le.PutUint32(buf[flOffNAlloc:], uint32(len(alloc)))
	le.PutUint32(buf[flOffNFreed:], uint32(len(freed)))
	le.PutUint64(buf[flOffPrev:], uint64(prev))
	le.PutUint64(buf[flOffTxID:], txid)
	le.PutUint64(buf[flOffHWM:], uint64(hwm))
	le.PutUint64(buf[flOffTrunc:], uint64(trunc))
	off := flHeaderSize
	for _, list := range [][]extent{alloc, freed} {
		for _, e := range list {
			le.PutUint64(buf[off:], uint64(e.start))
			le.PutUint64(buf[off+8:], e.n)
			off += extentSize
		}
	}
	sealPage(buf)
}

type flRecord struct {
	id    pgid
	pages uint64
	kind  uint32
	prev  pgid
	txid  uint64
	hwm   pgid
	trunc pgid
	alloc []extent
	freed []extent
}

func decodeFreelistRecord(p []byte, id pgid, ps int) (*flRecord, error) {
	na, nf := int(le.Uint32(p[flOffNAlloc:])), int(le.Uint32(p[flOffNFreed:]))
	if na+nf != pgCount(p) {
		return nil, fmt.Errorf("freelist record counts %d+%d disagree with header %d", na, nf, pgCount(p))
	}
	r := &flRecord{
		id:    id,
		pages: uint64(len(p) / ps),
		kind:  le.Uint32(p[flOffKind:]),
		prev:  pgid(le.Uint64(p[flOffPrev:])),
		txid:  le.Uint64(p[flOffTxID:]),
		hwm:   pgid(le.Uint64(p[flOffHWM:])),
		trunc: pgid(le.Uint64(p[flOffTrunc:])),
	}
	if r.kind != flKindCheckpt && r.kind != flKindDelta {
		return nil, fmt.Errorf("unknown freelist record kind %d", r.kind)
	}
	off := flHeaderSize
	read := func(n int) []extent {
		out := make([]extent, n)
		for i := range out {
			out[i] = extent{pgid(le.Uint64(p[off:])), le.Uint64(p[off+8:])}
			off += extentSize
		}
		return out
	}
	r.alloc = read(na)
	r.freed = read(nf)
	return r, nil
}

// loadFreelist replays the log that ends at m.flHead and returns the free
// set it describes, plus the chain of record pages. readPage must verify
// pages against m.hwm.
func loadFreelist(path string, m *meta, ps int, readPage func(pgid) ([]byte, error)) (*freelist, error) {
	var recs []*flRecord
	id := m.flHead
	for id != 0 {
		if len(recs) > int(m.hwm) {
			return nil, corruptf(path, "freelist chain from page %d does not end", m.flHead)
		}
		p, err := readPage(id)
		if err != nil {
			return nil, err
		}
		if pgFlags(p) != flagFreelist {
			return nil, corruptPage(path, id, ps, "expected a freelist record, found flags %#x", pgFlags(p))
		}
		r, err := decodeFreelistRecord(p, id, ps)
		if err != nil {
			return nil, corruptPage(path, id, ps, "%v", err)
		}
		recs = append(recs, r)
		if r.kind == flKindCheckpt {
			break
		}
		id = r.prev
	}
	if len(recs) == 0 || recs[len(recs)-1].kind != flKindCheckpt {
		return nil, corruptf(path, "freelist chain from page %d has no checkpoint", m.flHead)
	}
	fl := &freelist{free: &freeSet{}}
	for i := len(recs) - 1; i >= 0; i-- {
		r := recs[i]
		if r.trunc != 0 {
			fl.free.clip(r.trunc)
		}
		for _, e := range r.alloc {
			if !fl.free.remove(e.start, e.n) {
				return nil, corruptPage(path, r.id, ps, "freelist record of tx %d: allocated pages [%d,+%d) were not free", r.txid, e.start, e.n)
			}
		}
		for _, e := range r.freed {
			if e.n == 0 || e.start < numMetaPages || e.end() > r.hwm || !fl.free.add(e.start, e.n) {
				return nil, corruptPage(path, r.id, ps, "freelist record of tx %d: bad free extent [%d,+%d)", r.txid, e.start, e.n)
			}
		}
		fl.free.clip(r.hwm)
		fl.chain = append(fl.chain, extent{r.id, r.pages})
		if r.kind == flKindCheckpt {
			fl.ckptExtents = len(r.freed)
		} else {
			fl.deltaExtents += len(r.alloc) + len(r.freed)
		}
	}
	fl.free.clip(m.hwm)
	return fl, nil
}
