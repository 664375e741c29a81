package pagestore

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"slices"
	"time"
)

// Online defrag moves live pages from the tail of the file into free pages
// nearer the start, in small write transactions, and truncates the file
// once its tail is free. Moving a page is just copy-on-write: the step
// materialises the page (and its ancestors) in a write transaction, and the
// commit rewrites them into the lowest free pages, freeing the old ones.
// Finding which pages live in the tail is done in a read transaction,
// without the write lock, by walking the branch pages of every tree (leaf
// pages are known from their parents, so they are never read).
//
// Each step holds the write lock for one small commit; readers are never
// blocked, and the application's writer waits at most one step.

// DefragStepResult describes one DefragStep.
type DefragStepResult struct {
	Moved     int           // pages rewritten to lower positions
	Truncated int64         // bytes cut from the end of the file
	FileSize  int64         // file size after the step
	InUse     int64         // bytes in use after the step
	LockHold  time.Duration // how long the step held the write lock
	SyncTime  time.Duration // of which waiting for fdatasync
	// Done is true when the file is as compact as defrag can make it:
	// no live page above the target and the free tail truncated.
	Done bool
}

// DefragProgress is passed to Defrag's progress callback after each step.
type DefragProgress struct {
	Steps      int
	MovedPages int
	FileSize   int64
	InUseBytes int64
	LockHold   time.Duration // write-lock hold time of the last step
	SyncTime   time.Duration // of which waiting for fdatasync
	Done       bool
}

var debugDefragCheck func(db *DB, moved int, chain bool)

type defragMove struct {
	dir    bool // a page of the bucket directory
	bucket []byte
	key    []byte // first key of the page's subtree; nil for a root
	id     pgid
}

// defragTarget is the page count the file should shrink to: the pages in
// use plus a little slack for the application's writer.
func (db *DB) defragTarget(hwm pgid) pgid {
	inUse := pgid(db.st.inUseBytes.Load() / int64(db.pageSize))
	t := inUse + inUse/50 + 16
	return min(t, hwm)
}

// DefragPlan is the work of one defrag step, found without the write lock
// by PlanDefrag and carried out inside a write transaction by
// Tx.ApplyDefrag. A plan may be stale by the time it is applied: pages the
// writer rewrote meanwhile are simply skipped.
type DefragPlan struct {
	moves  []defragMove
	chain  bool // a freelist log record lies in the tail: checkpoint it
	target pgid
}

// Pages is the number of pages the plan would move.
func (p *DefragPlan) Pages() int { return len(p.moves) }

// PlanDefrag finds up to maxPages live pages in the tail of the file, in a
// read transaction (readers and the writer are not blocked).
func (db *DB) PlanDefrag(maxPages int) (*DefragPlan, error) {
	if maxPages <= 0 {
		maxPages = 256
	}
	plan := &DefragPlan{}
	err := db.View(func(tx *Tx) error {
		plan.target = db.defragTarget(tx.meta.hwm)
		var err error
		plan.moves, plan.chain, err = tx.defragCandidates(plan.target, maxPages)
		return err
	})
	if err != nil {
		return nil, err
	}
	return plan, nil
}

// ApplyDefrag carries out plan inside this write transaction: the planned
// pages are rewritten lower down by the commit, and the free tail of the
// file is truncated. An application can so fold defrag steps into its own
// commits instead of paying for extra ones. It returns the pages moved.
func (tx *Tx) ApplyDefrag(plan *DefragPlan) (int, error) {
	if !tx.writable {
		return 0, ErrTxNotWritable
	}
	// A page moves only into a free page below the target. Pages that
	// were freed while a reader still sees them are pending, not free:
	// without room, the commit would put the moved pages (and a new
	// freelist checkpoint) back at the end of the file, where the next
	// step would find them again, and a reader that stays open (a
	// snapshot streaming to a follower, etcdctl snapshot save) would see
	// the file grow step after step. The checkpoint that takes a freelist
	// record out of the tail goes first; the moves get what room is left,
	// less a page for this commit's own freelist record.
	room := int(tx.db.fl.free.countBelow(plan.target))
	if plan.chain {
		if ckpt := tx.db.checkpointPages(len(tx.db.fl.chain) + 2*len(plan.moves)); ckpt <= room {
			tx.forceCheckpoint = true
			room -= ckpt
		}
	}
	moved, err := tx.relocate(plan.moves, room-1)
	if err != nil {
		return moved, err
	}
	tx.truncateTail = true
	tx.defragMoved += moved
	return moved, nil
}

// DefragComplete reports whether the file is as compact as defrag can make
// it, given the plan that was just applied and committed: nothing was left
// to move and the free tail is truncated.
func (db *DB) DefragComplete(plan *DefragPlan) bool {
	m := db.meta.Load()
	return len(plan.moves) == 0 && !plan.chain && m.hwm <= max(plan.target, db.defragTarget(m.hwm))
}

// DefragStep moves up to maxPages live pages from the tail of the file
// into free pages below it, and truncates the free tail, in one write
// transaction of its own. It is safe to call while other transactions run;
// see Defrag.
func (db *DB) DefragStep(maxPages int) (DefragStepResult, error) {
	plan, err := db.PlanDefrag(maxPages)
	if err != nil {
		return DefragStepResult{}, err
	}
	tx, err := db.Begin(true)
	if err != nil {
		return DefragStepResult{}, err
	}
	start := time.Now()
	moved, err := tx.ApplyDefrag(plan)
	if err != nil {
		tx.Rollback()
		return DefragStepResult{}, err
	}
	oldSize := db.Stats().FileSize
	if err := tx.Commit(); err != nil {
		return DefragStepResult{}, err
	}
	hold := time.Since(start)
	if debugDefragCheck != nil {
		debugDefragCheck(db, moved, plan.chain)
	}
	db.noteDefragStep(hold)
	st := db.Stats()
	res := DefragStepResult{
		Moved:    moved,
		FileSize: st.FileSize,
		InUse:    st.InUseBytes,
		LockHold: hold,
		SyncTime: tx.syncTime,
		Done:     db.DefragComplete(plan),
	}
	if oldSize > st.FileSize {
		res.Truncated = oldSize - st.FileSize
	}
	if moved == 0 && res.Truncated == 0 && !plan.chain && st.PendingPages == 0 {
		// Nothing could move and no reader holds freed pages that could
		// later let it: the file is as compact as page moves can make it.
		res.Done = true
	}
	return res, nil
}

// noteDefragStep records a defrag step's write-lock hold in the stats
// (Commit counts the step and its pages).
func (db *DB) noteDefragStep(hold time.Duration) {
	for {
		old := db.defragState.maxLockHold.Load()
		if int64(hold) <= old || db.defragState.maxLockHold.CompareAndSwap(old, int64(hold)) {
			break
		}
	}
}

// Defrag runs DefragSteps until the file is compact or ctx is done,
// calling progress (if non-nil) after each step. Between steps it yields
// so the application's writer gets the lock; the batch size adapts so a
// step holds the write lock for about 5 ms.
func (db *DB) Defrag(ctx context.Context, progress func(DefragProgress)) error {
	batch := 128
	var p DefragProgress
	idle := 0
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		r, err := db.DefragStep(batch)
		if err != nil {
			return err
		}
		p.Steps++
		p.MovedPages += r.Moved
		p.FileSize, p.InUseBytes, p.Done, p.LockHold, p.SyncTime = r.FileSize, r.InUse, r.Done, r.LockHold, r.SyncTime
		if progress != nil {
			progress(p)
		}
		if r.Done {
			return nil
		}
		switch {
		case r.LockHold-r.SyncTime > 5*time.Millisecond && batch > 8:
			batch /= 2
		case r.Moved >= batch/2 && r.LockHold-r.SyncTime < 2*time.Millisecond && batch < 512:
			batch *= 2
		}
		if r.Moved == 0 && r.Truncated == 0 {
			// Waiting for readers to release freed tail pages.
			if idle++; idle > 5000 {
				return errors.New("pagestore: defrag made no progress (a long-running reader holds freed pages?)")
			}
			time.Sleep(time.Millisecond)
		} else {
			idle = 0
			time.Sleep(100 * time.Microsecond)
		}
	}
}

// defragCandidates lists pages at or above target that belong to a tree,
// highest first, at most limit; chain reports whether a freelist log
// record lies there.
func (tx *Tx) defragCandidates(target pgid, limit int) ([]defragMove, bool, error) {
	chain := false
	for id, n := tx.meta.flHead, 0; id != 0 && n < 2*checkpointEvery; n++ {
		p, err := tx.page(id)
		if err != nil {
			return nil, false, err
		}
		if id+pgid(pgOverflow(p)) >= target {
			chain = true
		}
		id = pgid(le.Uint64(p[flOffPrev:]))
	}
	// Early in a defrag most of the tree lies above the target, and a tree
	// written in key order meets its pages in ascending id order. Keep only
	// the limit highest pages: candidates are appended (their keys still
	// point into the mapped pages of this read transaction), and whenever
	// 2*limit have gathered they are cut back to the limit highest, which
	// also raises the floor below which a page is not even appended. Keys
	// are copied only for the pages kept. Amortized, a candidate costs
	// O(log limit) and no allocation.
	var cands []defragMove
	floor := pgid(0)
	// cut sorts the candidates highest first and keeps the limit highest.
	cut := func() {
		slices.SortFunc(cands, func(a, b defragMove) int { return cmp.Compare(b.id, a.id) })
		if len(cands) > limit {
			cands = cands[:limit]
			floor = cands[limit-1].id
		}
	}
	walk := func(b *Bucket, dir bool) error {
		add := func(key []byte, id pgid) {
			if id <= floor && len(cands) >= limit {
				return
			}
			cands = append(cands, defragMove{dir: dir, bucket: b.name, key: key, id: id})
			if len(cands) >= 2*limit {
				cut()
			}
		}
		in, err := tx.reachesTail(b.root, target)
		if err != nil {
			return err
		}
		if in {
			add(nil, b.root)
		}
		return tx.walkBranches(b.root, target, add, 0)
	}
	if err := walk(tx.root, true); err != nil {
		return nil, false, err
	}
	err := tx.ForEach(func(name []byte, b *Bucket) error { return walk(b, false) })
	if err != nil {
		return nil, false, err
	}
	cut()
	for i := range cands {
		// An empty key, like a root's, is nil: relocate then looks the
		// page up as its bucket's root.
		cands[i].key = append([]byte(nil), cands[i].key...)
	}
	return cands, chain, nil
}

// straddleWindow is how far below the target a page run may start and still
// reach into the tail: a leaf holding a large value is a run of several
// pages, and one that starts just below the target but ends above it would
// keep the tail from being truncated. Runs are read only within this window
// (16 MiB, beyond any value etcd's request limit admits), so planning still
// reads branch pages only, plus a few leaves near the target.
const straddleWindow = 4096

// reachesTail reports whether the run at id has a page at or above target.
func (tx *Tx) reachesTail(id, target pgid) (bool, error) {
	if id >= target {
		return true, nil
	}
	if id+straddleWindow < target {
		return false, nil
	}
	p, err := tx.page(id)
	if err != nil {
		return false, err
	}
	return id+pgid(pgOverflow(p)) >= target, nil
}

// walkBranches calls add for every child reaching target or above in the
// subtree at id, reading branch pages only.
func (tx *Tx) walkBranches(id, target pgid, add func(key []byte, id pgid), depth int) error {
	if depth > 64 {
		return corruptf(tx.db.path, "page %d: tree deeper than 64 levels", id)
	}
	p, err := tx.page(id)
	if err != nil {
		return err
	}
	if pgFlags(p) != flagBranch {
		return nil
	}
	n := pgCount(p)
	_, first := branchElem(p, 0)
	fp, err := tx.page(first)
	if err != nil {
		return err
	}
	childrenAreBranches := pgFlags(fp) == flagBranch
	for i := 0; i < n; i++ {
		k, c := branchElem(p, i)
		in, err := tx.reachesTail(c, target)
		if err != nil {
			return err
		}
		if in {
			add(k, c)
		}
		if childrenAreBranches {
			if err := tx.walkBranches(c, target, add, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// relocate materialises each planned page (if it is still where the plan
// found it) so the commit rewrites it lower down, as long as room (the
// free pages below the target not yet promised) takes the page and the
// ancestors that move with it.
func (tx *Tx) relocate(moves []defragMove, room int) (int, error) {
	moved := 0
	// A multi-page run (a large value) moves only if a hole below it can
	// take it whole; otherwise the commit would put it back at the end of
	// the file and the next step would move it again. The run's header is
	// read only once the page is known to still be in the tree: a stale
	// plan may name a page the writer has since freed and reused, maybe
	// inside another run.
	fits := func(p []byte) bool {
		ovf := pgOverflow(p)
		return ovf == 0 || tx.db.fl.free.fitsBelow(1+uint64(ovf), pgID(p))
	}
	for _, mv := range moves {
		b := tx.root
		if !mv.dir {
			var err error
			if b, err = tx.Bucket(mv.bucket); err != nil {
				if errors.Is(err, ErrBucketNotFound) {
					continue
				}
				return moved, err
			}
		}
		if mv.key == nil {
			if b.root == mv.id && b.rootNode == nil {
				p, err := tx.page(mv.id)
				if err != nil {
					return moved, err
				}
				if !fits(p) || 1+int(pgOverflow(p)) > room {
					continue
				}
				if _, err := b.materializeRoot(); err != nil {
					return moved, err
				}
				room -= 1 + int(pgOverflow(p))
				moved++
			}
			continue
		}
		c := Cursor{b: b}
		if err := c.search(mv.key); err != nil {
			return moved, err
		}
		level := -1
		for i := range c.stack {
			r := &c.stack[i]
			if r.n == nil && pgID(r.p) == mv.id {
				level = i
				break
			}
		}
		if level < 0 {
			continue // already moved, or rewritten by the writer
		}
		if !fits(c.stack[level].p) {
			continue
		}
		// The page and each ancestor not yet materialised are rewritten.
		cost := 0
		for i := 0; i <= level; i++ {
			if r := &c.stack[i]; r.n == nil {
				cost += 1 + int(pgOverflow(r.p))
			}
		}
		if cost > room {
			continue
		}
		room -= cost
		n, err := b.materializeRoot()
		if err != nil {
			return moved, err
		}
		for i := 0; i < level; i++ {
			if n, err = b.childNode(n, c.stack[i].idx); err != nil {
				return moved, err
			}
		}
		if !bytes.Equal(n.key, mv.key) && level > 0 {
			continue
		}
		moved++
	}
	return moved, nil
}

// truncateTailPages drops the free extent that ends at the high-water mark,
// if any, so the commit lowers hwm and the file is truncated after it.
func (tx *Tx) truncateTailPages() {
	fl := tx.db.fl
	if len(fl.free.ext) == 0 {
		return
	}
	last := fl.free.ext[len(fl.free.ext)-1]
	if last.end() != tx.meta.hwm || last.start < numMetaPages+2 {
		return
	}
	fl.free.remove(last.start, last.n)
	tx.truncated = append(tx.truncated, last)
	tx.meta.hwm = last.start
	tx.truncHWM = last.start
}
