package pagestore

import (
	"fmt"
	"sort"
	"time"
)

// Commit writes the transaction's changes durably (see the package doc for
// the order of writes and syncs) and ends it. On error nothing is
// published: the database stays at the previous commit and the
// transaction is rolled back.
func (tx *Tx) Commit() error {
	if err := tx.check(true); err != nil {
		return err
	}
	start := time.Now()
	tx.db.syncTime, tx.db.writeTime = 0, 0
	published, err := tx.commit()
	tx.syncTime = tx.db.syncTime
	db := tx.db
	if err != nil {
		if !published {
			db.st.commitFailures.Add(1)
			tx.end(false)
			return err
		}
	}
	if published {
		total := time.Since(start)
		db.st.recordCommit(total, db.writeTime, tx.syncTime)
		if db.opts.OnCommit != nil {
			db.opts.OnCommit(CommitTimes{Rebalance: tx.rebalanceTime, Spill: tx.spillTime, Write: tx.writePhase, Total: total})
		}
		if tx.truncateTail {
			db.defragState.steps.Add(1)
			db.defragState.moved.Add(uint64(tx.defragMoved))
		}
	}
	shrink := tx.shrinkTo
	tx.end(true)
	if shrink > 0 {
		// Outside the write lock: ftruncate can take milliseconds.
		db.shrinkFile(shrink)
	}
	return err
}

// commit returns published=true once the new meta is durable and visible;
// an error with published=true comes from the StrictMode checker.
func (tx *Tx) commit() (published bool, err error) {
	db := tx.db
	// The phases are timed as bbolt times its commit (its Tx stats, which
	// etcd exports): merging underfull nodes, writing nodes into pages,
	// and writing the pages and the meta durably.
	phase := time.Now()
	lap := func(d *time.Duration) {
		now := time.Now()
		*d += now.Sub(phase)
		phase = now
	}
	for _, b := range tx.sortedBuckets() {
		if err := b.rebalance(); err != nil {
			return false, err
		}
		lap(&tx.rebalanceTime)
		if err := b.spill(); err != nil {
			return false, err
		}
		if err := tx.root.put(b.name, encodeBucketHeader(b.root, b.id), elemFlagBucket); err != nil {
			return false, err
		}
		lap(&tx.spillTime)
	}
	if tx.root.rootNode != nil {
		if err := tx.root.rebalance(); err != nil {
			return false, err
		}
		lap(&tx.rebalanceTime)
		if err := tx.root.spill(); err != nil {
			return false, err
		}
		lap(&tx.spillTime)
		tx.meta.root = tx.root.root
	}
	if tx.truncateTail {
		tx.truncateTailPages()
	}
	if len(tx.dirty) == 0 && len(tx.freed) == 0 && len(tx.truncated) == 0 && !tx.forceCheckpoint {
		return false, nil // nothing changed: no new commit
	}
	rec, ckpt, err := tx.writeFreelistRecord()
	if err != nil {
		return false, err
	}
	fl := db.fl
	var freedCount uint64
	for _, e := range tx.freed {
		freedCount += e.n
	}
	inUse := (int64(tx.meta.hwm) - int64(fl.free.count+fl.pendingCount+freedCount)) * int64(db.pageSize)
	if q := db.opts.MaxInUseBytes; q > 0 && tx.grew && inUse > q {
		return false, fmt.Errorf("%w: %s: commit would use %d bytes, quota is %d", ErrNoSpace, db.path, inUse, q)
	}
	phase = time.Now()
	if err := db.writeDirty(tx.dirty, tx.meta.hwm); err != nil {
		return false, err
	}
	if err := db.sync(); err != nil {
		return false, err
	}
	if err := db.writeMeta(&tx.meta); err != nil {
		return false, err
	}
	lap(&tx.writePhase)

	// Durable: publish.
	tx.published = true
	m := tx.meta
	db.meta.Store(&m)
	if len(tx.freed) > 0 {
		fl.pending = append(fl.pending, pendingFree{txid: m.txid, ext: normalize(append([]extent(nil), tx.freed...))})
		fl.pendingCount += freedCount
	}
	if ckpt {
		fl.chain = []extent{rec}
		fl.deltaExtents = 0
	} else {
		fl.chain = append(fl.chain, rec)
	}
	db.st.txid.Store(m.txid)
	if len(tx.truncated) > 0 {
		tx.shrinkTo = int64(m.hwm) * int64(db.pageSize)
	}
	db.publishSpace(m.hwm)
	if debugCommitHook != nil {
		debugCommitHook(tx)
	}
	if db.opts.StrictMode {
		if err := db.checkLatest(); err != nil {
			return true, err
		}
	}
	return true, nil
}

// debugCommitHook, when set by a test, runs after every published commit.
var debugCommitHook func(tx *Tx)

// checkpointExtents bounds the extents of a checkpoint record written
// now, by a transaction that frees freed extents (the chain's included):
// the free set, the pending frees, those, and one for the record.
func (fl *freelist) checkpointExtents(freed int) int {
	est := len(fl.free.ext) + 1 + freed
	for _, p := range fl.pending {
		est += len(p.ext)
	}
	return est
}

// freelistRecordPages is the size in pages of a freelist record of
// extents extents.
func freelistRecordPages(extents, pageSize int) int {
	return (flHeaderSize + extents*extentSize + pageSize - 1) / pageSize
}

// checkpointPages is the size in pages of a checkpoint record written
// now by a transaction that frees freed extents.
func (db *DB) checkpointPages(freed int) int {
	return freelistRecordPages(db.fl.checkpointExtents(freed), db.pageSize)
}

// writeFreelistRecord appends this transaction's freelist record (a delta,
// or a checkpoint when the chain is long) and returns its extent.
func (tx *Tx) writeFreelistRecord() (extent, bool, error) {
	db, fl, ps := tx.db, tx.db.fl, tx.db.pageSize
	ckpt := tx.forceCheckpoint || len(fl.chain) >= checkpointEvery ||
		fl.deltaExtents > max(1024, 2*fl.ckptExtents)
	if ckpt {
		tx.freed = append(tx.freed, fl.chain...)
		est := fl.checkpointExtents(len(tx.freed))
		n := freelistRecordPages(est, ps)
		id, err := tx.allocate(n)
		if err != nil {
			return extent{}, false, err
		}
		content := fl.free.clone()
		for _, p := range fl.pending {
			for _, e := range p.ext {
				if !content.add(e.start, e.n) {
					return extent{}, false, corruptf(db.path, "pending pages [%d,+%d) overlap the free set", e.start, e.n)
				}
			}
		}
		for _, e := range tx.freed {
			if !content.add(e.start, e.n) {
				return extent{}, false, corruptf(db.path, "tx %d frees pages [%d,+%d) that are already free", tx.meta.txid, e.start, e.n)
			}
		}
		if len(content.ext) > est {
			return extent{}, false, fmt.Errorf("pagestore: internal error: checkpoint estimate %d < %d extents", est, len(content.ext))
		}
		buf := db.pageBuf(n * ps)
		encodeFreelistRecord(buf, id, flKindCheckpt, 0, tx.meta.txid, tx.meta.hwm, tx.truncHWM, nil, content.ext, ps)
		tx.dirty = append(tx.dirty, dirtyPage{id, buf})
		tx.meta.flHead = id
		fl.ckptExtents = len(content.ext)
		return extent{id, uint64(n)}, true, nil
	}
	freedN := normalize(append([]extent(nil), tx.freed...))
	est := len(normalize(append([]extent(nil), tx.allocd...))) + len(freedN) + 1
	n := freelistRecordPages(est, ps)
	id, err := tx.allocate(n)
	if err != nil {
		return extent{}, false, err
	}
	allocN := normalize(append([]extent(nil), tx.allocd...))
	if len(allocN)+len(freedN) > est {
		return extent{}, false, fmt.Errorf("pagestore: internal error: delta estimate %d < %d extents", est, len(allocN)+len(freedN))
	}
	buf := db.pageBuf(n * ps) // right after the spilled pages, in memory as on disk
	encodeFreelistRecord(buf, id, flKindDelta, tx.meta.flHead, tx.meta.txid, tx.meta.hwm, tx.truncHWM, allocN, freedN, ps)
	tx.dirty = append(tx.dirty, dirtyPage{id, buf})
	tx.meta.flHead = id
	fl.deltaExtents += len(allocN) + len(freedN)
	return extent{id, uint64(n)}, false, nil
}

// writeDirty writes the pages sorted by id, coalescing runs of adjacent
// pages into one pwrite, after growing the file if hwm needs it.
func (db *DB) writeDirty(pages []dirtyPage, hwm pgid) error {
	ps := int64(db.pageSize)
	need := int64(hwm) * ps
	db.sizeMu.Lock()
	for need > db.zeroed && db.zeroBusy {
		db.sizeCond.Wait() // the preallocator is writing zeros where our pages go
	}
	// Claim [zeroed, need) before writing, so the preallocator's next
	// chunk starts above our pages and can never overwrite them.
	db.zeroed = max(db.zeroed, need)
	db.reserved = need
	if need > db.fileSize {
		grow := min(max(need/16, 16*ps), 64<<20)
		size := min((need+grow+ps-1)/ps*ps, db.opts.MaxMapSize)
		if err := db.file.Truncate(size); err != nil {
			db.sizeMu.Unlock()
			return fmt.Errorf("pagestore: grow %s to %d bytes: %w", db.path, size, err)
		}
		db.fileSize = size
		db.st.fileSize.Store(size)
	}
	db.sizeMu.Unlock()
	sort.Slice(pages, func(i, j int) bool { return pages[i].id < pages[j].id })
	start := time.Now()
	defer func() { db.writeTime += time.Since(start) }()
	const maxRun = 4 << 20
	for i := 0; i < len(pages); {
		// Pages [i, j) are adjacent on disk: one pwrite.
		j, end, size := i+1, pages[i].id+pgid(int64(len(pages[i].buf))/ps), len(pages[i].buf)
		for j < len(pages) && pages[j].id == end && size < maxRun {
			end += pgid(int64(len(pages[j].buf)) / ps)
			size += len(pages[j].buf)
			j++
		}
		buf := pages[i].buf
		if j-i > 1 {
			if adjacentBufs(pages[i:j]) {
				buf = buf[:size] // end to end in one arena chunk: no copy
			} else {
				if cap(db.scratch) < size {
					db.scratch = make([]byte, 0, max(size, maxRun))
				}
				run := db.scratch[:0]
				for _, p := range pages[i:j] {
					run = append(run, p.buf...)
				}
				buf = run
			}
		}
		db.forget(pages[i].id, uint64(end-pages[i].id))
		if err := writeFull(db.file, buf, int64(pages[i].id)*ps); err != nil {
			return fmt.Errorf("pagestore: write %s pages %d..%d: %w", db.path, pages[i].id, end-1, err)
		}
		db.st.pageWrites.Add(1)
		i = j
	}
	db.sizeMu.Lock()
	db.kickPrealloc(need)
	db.sizeMu.Unlock()
	return nil
}

// adjacentBufs reports whether each page's buffer starts where the one
// before it ends, inside the first one's capacity. An append commit's new
// pages (leaves, the branch above them, the directory leaf, the freelist
// record) are cut one after another from the same arena chunk and get
// consecutive ids at the end of the file, so their run is written from the
// chunk without copying it.
func adjacentBufs(pages []dirtyPage) bool {
	first := pages[0].buf
	n := len(first)
	for _, p := range pages[1:] {
		if len(p.buf) == 0 || cap(first) < n+len(p.buf) || &first[:n+1][n] != &p.buf[0] {
			return false
		}
		n += len(p.buf)
	}
	return true
}

func (db *DB) sync() error {
	if db.opts.NoSync {
		return nil
	}
	start := time.Now()
	err := db.file.Sync()
	db.syncTime += time.Since(start)
	if err != nil {
		return fmt.Errorf("pagestore: sync %s: %w", db.path, err)
	}
	return nil
}

// writeMeta writes m into slot txid%2 and syncs. If the write or the sync
// fails it restores the slot's previous bytes so that the file stays at the
// previous commit; if that fails too the DB is marked failed.
func (db *DB) writeMeta(m *meta) error {
	slot := pgid(m.txid % 2)
	buf := make([]byte, db.pageSize)
	m.encode(buf, slot)
	off := int64(slot) * int64(db.pageSize)
	err := writeFull(db.file, buf, off)
	if err == nil {
		err = db.sync()
	}
	if err == nil {
		db.metaBuf[slot] = buf
		return nil
	}
	err = fmt.Errorf("pagestore: write meta page %d of %s (tx %d): %w", slot, db.path, m.txid, err)
	if len(db.metaBuf[slot]) != db.pageSize {
		// Unknown old content: an all-zero slot is invalid, which is
		// just as good, since the other slot holds the previous commit.
		db.metaBuf[slot] = make([]byte, db.pageSize)
	}
	// Once the slot cannot be restored the DB is failed, and the error
	// says so (ErrFailed) from this commit on, not only from the next:
	// its owner must reopen rather than retry.
	if rerr := writeFull(db.file, db.metaBuf[slot], off); rerr != nil {
		db.failed = err
		db.log.Error("pagestore: cannot restore meta page after failed commit", "path", db.path, "slot", slot, "err", rerr)
		return fmt.Errorf("%w: %w", ErrFailed, err)
	}
	if rerr := db.sync(); rerr != nil {
		db.failed = err
		db.log.Error("pagestore: cannot sync restored meta page after failed commit", "path", db.path, "slot", slot, "err", rerr)
		return fmt.Errorf("%w: %w", ErrFailed, err)
	}
	return err
}

// shrinkFile truncates the file after a commit lowered hwm. Failure only
// wastes space, so it is logged.
//
// It runs after the write lock is released, so a writer may have started
// using pages above size meanwhile; every writer records the size its
// pages need in reserved (under sizeMu) before writing, and the file is
// never cut below that.
func (db *DB) shrinkFile(size int64) {
	db.sizeMu.Lock()
	defer db.sizeMu.Unlock()
	for db.zeroBusy {
		db.sizeCond.Wait()
	}
	size = max(size, db.reserved)
	if db.file == nil || db.copiers > 0 || size >= db.fileSize {
		return
	}
	if err := db.file.Truncate(size); err != nil {
		db.log.Warn("pagestore: truncate failed", "path", db.path, "size", size, "err", err)
		return
	}
	db.fileSize = size
	db.zeroed = min(db.zeroed, size)
	db.st.fileSize.Store(size)
	// No sync: if the shorter size is lost in a crash the file is just
	// longer than hwm again, which Open accepts.
}
