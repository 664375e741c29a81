package mvcc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/strata-db/strata/pagestore"
)

// Backend batches the apply goroutine's writes into page-store commits and
// lets readers see committed pages plus the not-yet-committed batch.
//
// Locks and ownership:
//   - batchMu is held by the apply goroutine from BeginWrite to End, and
//     briefly by the committer to seal the current batch and to drop
//     committed ones. Readers never take it.
//   - commitMu serializes commits (the periodic committer, ForceCommit)
//     and guards the commit-health fields (see backend_health.go).
//     Lock order: commitMu before batchMu.
//   - durable is the index up to which the WAL holds the log (see
//     SetDurableIndex). A commit takes the sealed batches in order and
//     stops at the first whose consistent index is above it: nothing
//     durable runs ahead of the WAL.
//   - state is the readers' view: the uncommitted key records, published
//     atomically under batchMu after each write transaction and after each
//     commit. A reader loads state first and then begins its page-store
//     transaction; a batch leaves state only after its commit, so every
//     record a reader may need is in one place or the other.
type Backend struct {
	// dbp is the page store. It changes only when a follower installs a
	// leader's image (SwapDB), under commitMu and batchMu; readers load
	// it once per read view.
	dbp      atomic.Pointer[pagestore.DB]
	log      *slog.Logger
	metrics  *Metrics
	interval time.Duration
	limit    int

	batchMu     sync.Mutex
	cur         *batch   // being filled; guarded by batchMu
	uncommitted []*batch // sealed, not yet committed, in order; guarded by batchMu
	ci          uint64   // consistent index of the newest write; guarded by batchMu
	// lastKeyRev is the main revision of the newest key record written
	// since the backend opened or swapped its page store; guarded by
	// batchMu (see Quiesce).
	lastKeyRev int64

	state atomic.Pointer[readState]

	commitMu     sync.Mutex
	committedCI  atomic.Uint64 // consistent index in the page store
	durable      atomic.Uint64 // the WAL holds the log up to here (SetDurableIndex)
	pendingBytes atomic.Int64  // bytes written but not yet committed
	commitBytes  int64         // pendingBytes that trigger an early commit; 0: none
	commitErr    atomic.Pointer[error]
	kick         chan struct{}
	stop         chan struct{}
	done         chan struct{}
	commitHook   func(time.Duration)
	commits      atomic.Uint64
	health       commitHealth // guarded by commitMu, except its atomics

	// defrag is a defrag step waiting to ride along with the next commit
	// (see Defrag).
	defrag atomic.Pointer[defragReq]
	// defragSem admits one Defrag at a time: there is one slot for a
	// step request, and a plan is only valid until another call's step
	// truncates the file.
	defragSem chan struct{}
}

// defragReq is one defrag step handed to the committer.
type defragReq struct {
	plan *pagestore.DefragPlan
	done chan defragResult // buffered; receives exactly one result
}

type defragResult struct {
	moved int
	apply time.Duration // time spent moving pages inside the commit
	err   error
}

// batch is one group of writes committed together.
type batch struct {
	keyRecs []keyRec // "key" bucket records, ascending revision
	ops     []bucketOp
	ci      uint64
	term    uint64
	bytes   int64 // key and value bytes written, for PendingBytes
}

// keyRec is a record of the key bucket: a revision and its encoded
// mvccpb.KeyValue (an empty value for a tombstone).
type keyRec struct {
	rev       Revision
	tombstone bool
	value     []byte
	meta      []byte // the record's RevMetaBucket value
}

type bucketOp struct {
	bucket, key, value []byte
	del                bool
}

// readState is what readers see of the uncommitted writes.
type readState struct {
	pending [][]keyRec // uncommitted key records by batch, ascending
}

// BackendConfig configures a Backend.
type BackendConfig struct {
	// BatchInterval is the longest a write waits in memory before being
	// committed (etcd's --backend-batch-interval, default 100 ms).
	BatchInterval time.Duration
	// BatchLimit is the number of writes that triggers an early commit
	// (etcd's --backend-batch-limit, default 10000).
	BatchLimit int
	Logger     *slog.Logger
	// OnCommit observes each commit's duration (for
	// etcd_disk_backend_commit_duration_seconds).
	OnCommit func(time.Duration)
	// CommitBytes is the size of pending writes (PendingBytes) that
	// triggers an early commit, so large values do not pile up in memory
	// for a whole BatchInterval. 0 (default): no byte trigger.
	CommitBytes int64
	// Metrics receives the defragmentation figures; nil records nothing.
	Metrics *Metrics
	// OnCommitHealth is called when commits start failing (with the
	// error) and when one succeeds again (with nil), from the goroutine
	// that committed, with the commit lock held: it must not call back
	// into the Backend's commit methods. The server raises and clears its
	// disk-full alarm from it.
	OnCommitHealth func(err error)
}

// NewBackend wraps an open page store and starts the committer.
func NewBackend(db *pagestore.DB, cfg BackendConfig) (*Backend, error) {
	if cfg.BatchInterval <= 0 {
		cfg.BatchInterval = 100 * time.Millisecond
	}
	if cfg.BatchLimit <= 0 {
		cfg.BatchLimit = 10000
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	b := &Backend{
		log: cfg.Logger, interval: cfg.BatchInterval, limit: cfg.BatchLimit,
		cur:  &batch{},
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		commitHook:  cfg.OnCommit,
		commitBytes: cfg.CommitBytes,
		metrics:     cfg.Metrics,
		health:      commitHealth{onChange: cfg.OnCommitHealth},
		defragSem:   make(chan struct{}, 1),
	}
	b.dbp.Store(db)
	b.state.Store(&readState{})
	err := db.Update(func(tx *pagestore.Tx) error {
		for _, name := range [][]byte{KeyBucket, MetaBucket, RevMetaBucket} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := db.View(func(tx *pagestore.Tx) error {
		meta, err := tx.Bucket(MetaBucket)
		if err != nil {
			return err
		}
		v, err := meta.Get(metaConsistentIndex)
		if err != nil {
			return err
		}
		if len(v) == 8 {
			b.ci = binary.BigEndian.Uint64(v)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	b.committedCI.Store(b.ci)
	b.durable.Store(math.MaxUint64) // no WAL (offline tools) until SetDurableIndex
	b.cur.ci = b.ci
	go b.commitLoop()
	return b, nil
}

// DB returns the page store.
func (b *Backend) DB() *pagestore.DB { return b.dbp.Load() }

// update runs fn in a page-store write transaction outside the batches,
// serialized with commits. For work before any apply (opening, restoring)
// that the batches must not interleave with.
func (b *Backend) update(fn func(tx *pagestore.Tx) error) error {
	b.commitMu.Lock()
	defer b.commitMu.Unlock()
	return b.DB().Update(fn)
}

// ConsistentIndex is the index of the last entry whose writes are in the
// page store.
func (b *Backend) ConsistentIndex() uint64 { return b.committedCI.Load() }

// SetDurableIndex tells the backend that the WAL durably holds the log up
// to idx (raft.StateMachine.Persisted). Commits take batches only up to
// the last one whose consistent index is at or below it; later batches
// stay in memory (and visible to readers) until the WAL holds them. It may
// go down (a follower's uncommitted tail replaced), never below an index
// already written. Until the first call nothing is held back: a backend
// without a WAL (offline tools, tests) commits everything; raft calls it
// before its first apply.
func (b *Backend) SetDurableIndex(idx uint64) { b.durable.Store(idx) }

// WriteTx collects the writes of one applied request. Only the apply
// goroutine uses it, one at a time.
type WriteTx struct {
	b     *Backend
	nRecs int // key records added by this transaction
}

// BeginWrite starts a write transaction, holding batchMu until End.
func (b *Backend) BeginWrite() *WriteTx {
	b.batchMu.Lock()
	return &WriteTx{b: b}
}

// PutKeyRecord writes a key-bucket record, and meta under the same key in
// the revision metadata bucket (revmeta.go). Revisions must ascend.
func (w *WriteTx) PutKeyRecord(rev Revision, tombstone bool, value, meta []byte) {
	c := w.b.cur
	c.keyRecs = append(c.keyRecs, keyRec{rev: rev, tombstone: tombstone, value: value, meta: meta})
	c.bytes += int64(markedRevKeyLen + len(value))
	w.b.pendingBytes.Add(int64(markedRevKeyLen + len(value)))
	w.nRecs++
	w.b.lastKeyRev = max(w.b.lastKeyRev, rev.Main)
}

// Quiesce runs fn between two write transactions: no write transaction
// is in progress while it runs, so whatever a transaction changes beside
// the backend (the store's key index) holds exactly the transactions
// whose records the backend has. fn gets the main revision of the newest
// key record written since the backend opened or swapped its page store
// (0: none). fn must be short: writes wait for it.
func (b *Backend) Quiesce(fn func(lastKeyRev int64)) {
	b.batchMu.Lock()
	defer b.batchMu.Unlock()
	fn(b.lastKeyRev)
}

// Put writes key=value into bucket. The slices must not change afterwards.
func (w *WriteTx) Put(bucket, key, value []byte) {
	w.b.cur.ops = append(w.b.cur.ops, bucketOp{bucket: bucket, key: key, value: value})
	w.b.cur.bytes += int64(len(key) + len(value))
	w.b.pendingBytes.Add(int64(len(key) + len(value)))
}

// Delete deletes key from bucket.
func (w *WriteTx) Delete(bucket, key []byte) {
	w.b.cur.ops = append(w.b.cur.ops, bucketOp{bucket: bucket, key: key, del: true})
}

// End records the consistent index (and term) of the request, publishes
// the transaction's key records to readers, and releases batchMu.
func (w *WriteTx) End(ci, term uint64) {
	b := w.b
	c := b.cur
	if ci > b.ci {
		b.ci = ci
	}
	c.ci = b.ci
	if term > c.term {
		c.term = term
	}
	if w.nRecs > 0 {
		b.publishLocked()
	}
	full := len(c.keyRecs)+len(c.ops) >= b.limit || b.commitBytes > 0 && b.pendingBytes.Load() >= b.commitBytes
	b.batchMu.Unlock()
	if full {
		select {
		case b.kick <- struct{}{}:
		default:
		}
	}
}

// publishLocked republishes the readers' view. Called with batchMu held.
func (b *Backend) publishLocked() {
	p := make([][]keyRec, 0, len(b.uncommitted)+1)
	for _, u := range b.uncommitted {
		if len(u.keyRecs) > 0 {
			p = append(p, u.keyRecs)
		}
	}
	if len(b.cur.keyRecs) > 0 {
		// A fixed-length slice: later appends by the apply goroutine go past
		// its end and are invisible until the next publish.
		p = append(p, b.cur.keyRecs[:len(b.cur.keyRecs):len(b.cur.keyRecs)])
	}
	b.state.Store(&readState{pending: p})
}

func (b *Backend) commitLoop() {
	defer close(b.done)
	t := time.NewTicker(b.interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-b.kick:
		case <-b.stop:
			return
		}
		// While commits fail (a full disk), retries follow a backoff and
		// ignore early-commit kicks: each attempt rebuilds the whole
		// backlog into a transaction. Failures are logged by commit.
		if !b.retryDue(time.Now()) {
			continue
		}
		_ = b.commit()
	}
}

// ForceCommit commits everything written so far that the WAL holds (see
// SetDurableIndex) and returns once it is durable in the page store.
// Writes of entries past the WAL's durable index (on a follower, at most
// those of the Ready being fdatasync'd) stay in memory for a later commit.
func (b *Backend) ForceCommit() error { return b.commit() }

// ErrBackendClosed is returned by Defrag when the backend closes under it.
var ErrBackendClosed = errors.New("mvcc: backend closed")

// ErrCommitFailed wraps the page store's error when a batch cannot be
// committed; the batch stays in memory and the commit is retried.
var ErrCommitFailed = errors.New("mvcc: backend commit failed")

func (b *Backend) commit() error {
	b.commitMu.Lock()
	defer b.commitMu.Unlock()
	b.batchMu.Lock()
	if len(b.cur.keyRecs) > 0 || len(b.cur.ops) > 0 || b.cur.ci != b.committedCI.Load() {
		sealed := b.cur
		b.uncommitted = append(b.uncommitted, sealed)
		b.cur = &batch{ci: sealed.ci, term: sealed.term}
	}
	// Only batches the WAL holds: a batch at or below the page store's own
	// index (writes outside raft, compaction deletes) is always safe.
	limit := max(b.durable.Load(), b.committedCI.Load())
	n := 0
	for n < len(b.uncommitted) && b.uncommitted[n].ci <= limit {
		n++
	}
	todo := append([]*batch(nil), b.uncommitted[:n]...)
	b.batchMu.Unlock()
	dreq := b.defrag.Swap(nil)
	if len(todo) == 0 && dreq == nil {
		return nil
	}
	start := time.Now()
	var dres defragResult
	err := b.DB().Update(func(tx *pagestore.Tx) error {
		if dreq != nil {
			t := time.Now()
			dres.moved, dres.err = tx.ApplyDefrag(dreq.plan)
			dres.apply = time.Since(t)
			if dres.err != nil {
				return dres.err
			}
		}
		if len(todo) == 0 {
			return nil
		}
		kb, err := tx.Bucket(KeyBucket)
		if err != nil {
			return err
		}
		mb, err := tx.Bucket(RevMetaBucket)
		if err != nil {
			return err
		}
		buckets := map[string]*pagestore.Bucket{}
		var kbuf []byte
		for _, bt := range todo {
			for _, r := range bt.keyRecs {
				kbuf = appendRevKey(kbuf[:0], r.rev, r.tombstone)
				if err := kb.Put(kbuf, r.value); err != nil {
					return err
				}
				if err := mb.Put(kbuf, r.meta); err != nil {
					return err
				}
			}
			for _, op := range bt.ops {
				bk, ok := buckets[string(op.bucket)]
				if !ok {
					if bk, err = tx.CreateBucketIfNotExists(op.bucket); err != nil {
						return err
					}
					buckets[string(op.bucket)] = bk
				}
				if op.del {
					err = bk.Delete(op.key)
				} else {
					err = bk.Put(op.key, op.value)
				}
				if err != nil {
					return err
				}
			}
		}
		last := todo[len(todo)-1]
		meta, err := tx.Bucket(MetaBucket)
		if err != nil {
			return err
		}
		if err := meta.Put(metaConsistentIndex, u64bytes(last.ci)); err != nil {
			return err
		}
		if last.term > 0 {
			return meta.Put(metaTerm, u64bytes(last.term))
		}
		return nil
	})
	if dreq != nil {
		if err != nil && dres.err == nil {
			dres.err = err
		}
		dreq.done <- dres
	}
	if err != nil {
		err = fmt.Errorf("%w: %w", ErrCommitFailed, err)
		b.commitErr.Store(&err)
		b.noteFailure(err, time.Now())
		return err
	}
	b.commitErr.Store(nil)
	d := time.Since(start)
	b.commits.Add(1)
	if b.commitHook != nil {
		b.commitHook(d)
	}
	if len(todo) == 0 {
		b.noteSuccess(time.Now(), 0)
		return nil
	}
	b.committedCI.Store(todo[len(todo)-1].ci)
	var flushed int64
	for _, bt := range todo {
		flushed += bt.bytes
	}
	b.pendingBytes.Add(-flushed)
	b.batchMu.Lock()
	b.uncommitted = b.uncommitted[len(todo):]
	b.publishLocked()
	b.batchMu.Unlock()
	b.noteSuccess(time.Now(), flushed)
	return nil
}

// Defrag compacts the page store online by folding defrag steps into the
// backend's own commits: each commit also moves a bounded number of live
// pages from the tail of the file into free pages lower down and truncates
// the free tail. Under load the steps ride along with the commits the
// batch interval makes anyway, so defrag adds no fdatasync and no write-lock
// hand-off of its own to the write path; when the backend is idle each step
// is committed at once. progress, if set, is called after each step.
// Defrag returns when the file is as compact as it can be made, when steps
// stop making progress (pages an open reader still sees cannot move), or
// when ctx is done.
func (b *Backend) Defrag(ctx context.Context, progress func(pagestore.DefragProgress)) (err error) {
	// Pages moved per step. Idle, steps grow (up to idleMax) while a
	// step's page moves take under 3 ms, so defrag runs at disk speed.
	// Under load a step rides along with each batch commit (one every
	// --backend-batch-interval) and moves at most loadMax pages, about
	// 1 MiB: spread out like that, defrag costs the write path little.
	const minPages, loadMax, idleMax = 64, 256, 4096
	select {
	case b.defragSem <- struct{}{}:
		defer func() { <-b.defragSem }()
	case <-ctx.Done():
		return ctx.Err()
	case <-b.stop:
		return ErrBackendClosed
	}
	if m := b.metrics; m != nil {
		// etcd_disk_defrag_inflight while it runs; a finished defrag (not
		// one that failed or was interrupted) is timed, as in etcd.
		m.DefragInflight.Set(1)
		defer m.DefragInflight.Set(0)
		start := time.Now()
		defer func() {
			if err == nil {
				m.Defrag.Observe(time.Since(start).Seconds())
			}
		}()
	}
	pages := loadMax
	var p pagestore.DefragProgress
	stalled, lastSize := 0, int64(-1)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		idle := b.PendingBytes() == 0
		n := pages
		if !idle {
			n = min(n, loadMax)
		}
		plan, err := b.DB().PlanDefrag(n)
		if err != nil {
			return err
		}
		req := &defragReq{plan: plan, done: make(chan defragResult, 1)}
		b.defrag.Store(req)
		if idle {
			// Idle: no commit is coming soon, make one now.
			select {
			case b.kick <- struct{}{}:
			default:
			}
		}
		var r defragResult
		select {
		case r = <-req.done:
		case <-b.stop:
			b.defrag.CompareAndSwap(req, nil)
			return ErrBackendClosed
		case <-ctx.Done():
			if !b.defrag.CompareAndSwap(req, nil) {
				<-req.done // the committer took it; wait for its commit
			}
			return ctx.Err()
		}
		if r.err != nil {
			return r.err
		}
		st := b.DB().Stats()
		p.Steps++
		p.MovedPages += r.moved
		if m := b.metrics; m != nil {
			m.DefragMovedPages.Add(float64(r.moved))
		}
		p.FileSize, p.InUseBytes, p.LockHold = st.FileSize, st.InUseBytes, r.apply
		p.Done = b.DB().DefragComplete(plan)
		if progress != nil {
			progress(p)
		}
		if p.Done {
			return nil
		}
		switch {
		case r.apply > 10*time.Millisecond && pages > minPages:
			pages /= 2
		case idle && r.moved >= n/2 && r.apply < 3*time.Millisecond && pages < idleMax:
			pages *= 2
		}
		if r.moved == 0 && st.FileSize == lastSize && st.PendingPages == 0 {
			// Nothing could move and no reader holds freed pages that
			// might later let it: as compact as it gets.
			return nil
		}
		if r.moved == 0 && st.FileSize == lastSize {
			// Freed tail pages still visible to a reader: wait for it.
			if stalled++; stalled >= 50 {
				return nil
			}
			select {
			case <-time.After(20 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
		} else {
			stalled = 0
		}
		lastSize = st.FileSize
	}
}

// PendingBytes is the size of writes not yet committed to the page store,
// which the quota adds to the page store's bytes in use.
func (b *Backend) PendingBytes() int64 { return b.pendingBytes.Load() }

// LastCommitError returns the error of the last failed commit, or nil once
// a commit succeeds again.
func (b *Backend) LastCommitError() error {
	if e := b.commitErr.Load(); e != nil {
		return *e
	}
	return nil
}

// Close stops the committer, commits what is pending and closes nothing
// else: the caller owns the page store.
func (b *Backend) Close() error {
	close(b.stop)
	<-b.done
	return b.commit()
}

// ReadTx is a consistent read view: a page-store read transaction plus
// the uncommitted key records published before it began.
type ReadTx struct {
	tx      *pagestore.Tx
	kb      *pagestore.Bucket
	pending [][]keyRec
}

// BeginRead starts a read view. End it with Close.
func (b *Backend) BeginRead() (*ReadTx, error) {
	st := b.state.Load()
	tx, err := b.DB().Begin(false)
	if err != nil {
		return nil, err
	}
	kb, err := tx.Bucket(KeyBucket)
	if err != nil {
		tx.Rollback()
		return nil, err
	}
	return &ReadTx{tx: tx, kb: kb, pending: st.pending}, nil
}

// Close ends the read view.
func (r *ReadTx) Close() { r.tx.Rollback() }

// Tx returns the underlying page-store transaction (committed data only).
func (r *ReadTx) Tx() *pagestore.Tx { return r.tx }

// findPending returns the pending record of rev, if any.
func (r *ReadTx) findPending(rev Revision) (keyRec, bool) {
	for i := len(r.pending) - 1; i >= 0; i-- {
		recs := r.pending[i]
		if len(recs) == 0 || recs[0].rev.Compare(rev) > 0 {
			continue
		}
		j := sort.Search(len(recs), func(j int) bool { return recs[j].rev.Compare(rev) >= 0 })
		if j < len(recs) && recs[j].rev == rev {
			return recs[j], true
		}
		return keyRec{}, false
	}
	return keyRec{}, false
}

// GetRevision returns the stored value of a put at rev. The result is
// valid until Close.
func (r *ReadTx) GetRevision(rev Revision) ([]byte, error) {
	v, _, err := r.GetRevisionBuf(rev, nil)
	return v, err
}

// GetRevisionBuf is GetRevision for a caller that copies each value
// before reading the next: a value the page store keeps compressed is
// decoded into buf (pagestore.Bucket.GetBuf), and is valid only until buf
// is used again. It returns the buffer to pass next time.
func (r *ReadTx) GetRevisionBuf(rev Revision, buf []byte) (value, next []byte, err error) {
	if rec, ok := r.findPending(rev); ok {
		return rec.value, buf, nil
	}
	var kbuf [markedRevKeyLen]byte
	return r.kb.GetBuf(appendRevKey(kbuf[:0], rev, false), buf)
}

// GetRevisionStored is GetRevision for a reader that sizes one buffer
// for many values before copying them out with AppendRevision
// (pagestore.StoredValue): found is false if the store has no record of
// rev. The result is valid until Close.
func (r *ReadTx) GetRevisionStored(rev Revision) (sv pagestore.StoredValue, found bool, err error) {
	if rec, ok := r.findPending(rev); ok {
		return pagestore.PlainValue(rec.value), true, nil
	}
	var kbuf [markedRevKeyLen]byte
	return r.kb.GetStored(appendRevKey(kbuf[:0], rev, false))
}

// AppendRevision appends the value GetRevisionStored returned for rev to
// dst, inflated: exactly sv.Len() bytes.
func (r *ReadTx) AppendRevision(dst []byte, rev Revision, sv pagestore.StoredValue) ([]byte, error) {
	var kbuf [markedRevKeyLen]byte
	return r.kb.AppendValue(dst, appendRevKey(kbuf[:0], rev, false), sv)
}

// ScanRevisions calls fn for every key record with from <= main <= to in
// revision order, committed ones first, then pending ones. fn's slices are
// valid until Close. Returning false stops the scan.
func (r *ReadTx) ScanRevisions(from, to int64, fn func(rev Revision, tombstone bool, value []byte) bool) error {
	firstPending := Revision{Main: 1 << 62}
	for _, p := range r.pending {
		if len(p) > 0 {
			firstPending = p[0].rev
			break
		}
	}
	c := r.kb.Cursor()
	start := revKey(Revision{Main: from}, false)
	for k, v := c.Seek(start); k != nil; k, v = c.Next() {
		rev, tomb, err := parseRevKey(k)
		if err != nil {
			return err
		}
		if rev.Main > to || rev.Compare(firstPending) >= 0 {
			break
		}
		if !fn(rev, tomb, v) {
			return nil
		}
	}
	if err := c.Err(); err != nil {
		return err
	}
	for _, p := range r.pending {
		for _, rec := range p {
			if rec.rev.Main < from {
				continue
			}
			if rec.rev.Main > to {
				return nil
			}
			if !fn(rec.rev, rec.tombstone, rec.value) {
				return nil
			}
		}
	}
	return nil
}
