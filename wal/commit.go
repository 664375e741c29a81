package wal

import (
	"fmt"
	"io"
	"runtime"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/vfs"
)

// marshalOpts marshals deterministically, so equal messages encode equally.
var marshalOpts = proto.MarshalOptions{Deterministic: true}

// batch is what accumulates between two writes of the syncer: the encoded
// records of every unit enqueued meanwhile, where each unit starts (a
// segment may be cut in front of any of them), and who is waiting.
type batch struct {
	// num is written into every record of the batch. It only advances past
	// a batch that was fdatasync'd, so records numbered n+1 are always
	// written after every record numbered n is durable (see scanSegment).
	num      uint64
	buf      []byte
	units    []unitMark // ascending by off
	waiters  []*Future  // in enqueue order
	needSync bool
}

// unitMark is where a unit starts in a batch's buf, with what the head of
// a segment cut in front of it needs.
type unitMark struct {
	off        int
	firstIndex uint64            // the segment's name: its first entry's index
	state      *raftpb.HardState // the hard state before the unit, for the head
}

func (b *batch) reset(num uint64) {
	b.num = num
	b.buf = b.buf[:0]
	clear(b.units)
	b.units = b.units[:0]
	clear(b.waiters)
	b.waiters = b.waiters[:0]
	b.needSync = false
}

// Future is the outcome of an asynchronous append.
type Future struct {
	w    *WAL // nil for futures completed at creation
	done chan struct{}
	err  error
}

func doneFuture(err error) *Future {
	f := &Future{done: make(chan struct{}), err: err}
	close(f.done)
	return f
}

// Wait blocks until the append is written (and, if it needed a sync,
// durable) or has failed. If no batch is in flight when it is called, the
// caller writes the queued batch itself rather than waking the syncer, so
// a lone writer pays no goroutine handoff.
func (f *Future) Wait() error {
	select {
	case <-f.done:
		return f.err
	default:
	}
	if f.w != nil {
		f.w.mu.Lock()
		f.w.runInline()
	}
	<-f.done
	return f.err
}

// SaveAsync, SaveSnapshot and Sync only enqueue; the batch starts when a
// waiter calls Wait with the log idle, when the batch in flight finishes
// (its owner wakes the syncer), or at Close. So a write always starts no
// later than its own Wait.

// Done is closed when Wait would return.
func (f *Future) Done() <-chan struct{} { return f.done }

// Save appends the entries and hard state of one raft Ready as a unit and
// returns once they are durable, or, when raft.MustSync says no sync is
// needed, once they are written.
func (w *WAL) Save(st *raftpb.HardState, ents []*raftpb.Entry) error {
	return w.SaveAsync(st, ents).Wait()
}

// SaveAsync enqueues what Save would write and returns at once. Units are
// written in the order of the calls. The write starts no later than the
// future's Wait, which must be called before acknowledging anything.
func (w *WAL) SaveAsync(st *raftpb.HardState, ents []*raftpb.Entry) *Future {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.enqueueSave(st, ents)
}

// enqueueSave encodes a Save's unit into the queue. Called with mu held.
func (w *WAL) enqueueSave(st *raftpb.HardState, ents []*raftpb.Entry) *Future {
	if err := w.checkOpen(); err != nil {
		return doneFuture(err)
	}
	stEmpty := raft.IsEmptyHardState(st)
	if stEmpty && len(ents) == 0 {
		return doneFuture(nil)
	}
	mustSync := raft.MustSync(st, w.state, len(ents))
	b := w.queue
	start := len(b.buf)
	for i, e := range ents {
		data, err := marshalOpts.MarshalAppend(w.scratch[:0], e)
		if err != nil {
			b.buf = b.buf[:start]
			return doneFuture(fmt.Errorf("wal: marshal entry %d: %w", e.GetIndex(), err))
		}
		w.scratch = data
		if len(data) > MaxRecordSize {
			b.buf = b.buf[:start]
			return doneFuture(fmt.Errorf("%w: entry %d is %d bytes", ErrTooLarge, e.GetIndex(), len(data)))
		}
		b.buf = appendRecord(b.buf, TypeEntry, b.num, data, w.opts.CompressThreshold, stEmpty && i == len(ents)-1)
	}
	firstIndex := w.lastIndex + 1
	if len(ents) > 0 {
		firstIndex = ents[0].GetIndex()
	}
	prevState := w.state
	if !stEmpty {
		data, _ := marshalOpts.Marshal(st)
		b.buf = appendRecord(b.buf, TypeState, b.num, data, -1, true)
		w.state = proto.Clone(st).(*raftpb.HardState)
	}
	b.units = append(b.units, unitMark{off: start, firstIndex: firstIndex, state: prevState})
	if len(ents) > 0 {
		w.lastIndex = ents[len(ents)-1].GetIndex()
	}
	return w.enqueued(b, mustSync)
}

// SaveSnapshot appends a snapshot marker and returns once it is durable.
// The raft layer calls it after the state machine has captured the
// snapshot, so that Open can start reading at it.
func (w *WAL) SaveSnapshot(s Snapshot) error {
	w.mu.Lock()
	if err := w.checkOpen(); err != nil {
		w.mu.Unlock()
		return err
	}
	b := w.queue
	start := len(b.buf)
	b.buf = appendRecord(b.buf, TypeSnapshot, b.num, encodeSnapshot(s), -1, true)
	b.units = append(b.units, unitMark{off: start, firstIndex: w.lastIndex + 1, state: w.state})
	if s.Index > w.lastIndex {
		w.lastIndex = s.Index
	}
	f := w.enqueued(b, true)
	w.mu.Unlock()
	return f.Wait()
}

// Sync makes everything enqueued so far durable.
func (w *WAL) Sync() error {
	w.mu.Lock()
	if err := w.checkOpen(); err != nil {
		w.mu.Unlock()
		return err
	}
	f := w.enqueued(w.queue, true)
	w.mu.Unlock()
	return f.Wait()
}

func (w *WAL) checkOpen() error {
	if w.err != nil {
		return fmt.Errorf("%w: %w", ErrFailed, w.err)
	}
	if w.closing {
		return ErrClosed
	}
	return nil
}

// enqueued registers a waiter for batch b and wakes the syncer. Called
// with mu held.
func (w *WAL) enqueued(b *batch, sync bool) *Future {
	f := &Future{w: w, done: make(chan struct{})}
	b.waiters = append(b.waiters, f)
	b.needSync = b.needSync || sync
	return f
}

func (w *WAL) startSyncer() {
	w.syncerDone = make(chan struct{})
	go w.syncLoop()
}

// syncLoop is the syncer: it takes whatever has been enqueued, writes it
// with one write call per segment touched, issues one fdatasync if any
// waiter needs durability, and releases the waiters in order. It never
// waits for more work once some is queued, so a lone writer's append is
// written at once; batches grow only while a previous write or sync is in
// flight. At most one fdatasync is in flight because a batch is run only
// by whoever set busy: this goroutine, or a waiter that found the log idle
// (see Future.Wait).
func (w *WAL) syncLoop() {
	defer close(w.syncerDone)
	for {
		w.mu.Lock()
		for len(w.queue.waiters) == 0 || w.busy {
			if w.closing && len(w.queue.waiters) == 0 && !w.busy {
				w.mu.Unlock()
				return
			}
			w.cond.Wait()
		}
		if w.prevWaiters > 1 {
			w.gather(w.prevWaiters, w.lastBatchTime)
		}
		b := w.takeBatch()
		w.mu.Unlock()
		w.runBatch(b)
	}
}

// runInline runs the queued batch in the calling goroutine when no batch
// is in flight (see Future.Wait). Called with mu held; returns with it
// released.
func (w *WAL) runInline() {
	if w.busy || len(w.queue.waiters) == 0 {
		// The owner of the batch in flight wakes the syncer when done.
		w.mu.Unlock()
		return
	}
	if w.prevWaiters > 1 {
		// Under load: let the syncer gather the returning writers.
		w.cond.Signal()
		w.mu.Unlock()
		return
	}
	b := w.takeBatch()
	w.mu.Unlock()
	w.runBatch(b)
}

// takeBatch swaps the queue for an empty batch and marks the log busy.
// Called with mu held and busy false.
func (w *WAL) takeBatch() *batch {
	b := w.queue
	next := w.spare
	if next == nil {
		next = &batch{}
	}
	w.spare = nil
	num := b.num
	if b.needSync {
		num++
	}
	next.reset(num)
	w.queue = next
	w.busy = true
	return b
}

// runBatch writes b, releases its waiters in order, and clears busy,
// waking the syncer if more work queued meanwhile. Called without mu by
// whoever took b.
func (w *WAL) runBatch(b *batch) {
	w.mu.Lock()
	err := w.err
	w.mu.Unlock()
	start := time.Now()
	if err == nil {
		err = w.writeBatch(b)
	}
	elapsed := time.Since(start)
	if err != nil {
		// Not logged here: every waiter gets the error, and the owner of
		// the log (the server) reports it once and exits.
		w.mu.Lock()
		if w.err == nil {
			w.err = err
		}
		w.mu.Unlock()
		err = fmt.Errorf("%w: %w", ErrFailed, err)
	}
	for _, f := range b.waiters {
		f.err = err
		close(f.done)
	}
	w.statBatches.Add(1)
	w.statUnits.Add(uint64(len(b.waiters)))
	w.mu.Lock()
	w.prevWaiters, w.lastBatchTime = len(b.waiters), elapsed
	w.spare = b
	w.busy = false
	if len(w.queue.waiters) > 0 || w.closing {
		w.cond.Signal()
	}
	w.mu.Unlock()
}

// gather runs only under load, when the previous batch released more
// than one waiter: those writers are about to append again, and taking the
// queue before they do would halve every later batch (half the writers in
// the sync in flight, half queued behind it). It yields until as many
// waiters as last time are queued, for at most a quarter of the last
// write-and-sync time, so a batch costs at most 25% more latency to double
// in size, and never longer than Options.GroupCommitWindow when that is
// set. A lone writer never gets here. Called with mu held.
func (w *WAL) gather(want int, lastSync time.Duration) {
	deadline := time.Now().Add(gatherWait(lastSync, w.opts.GroupCommitWindow))
	for len(w.queue.waiters) < want && !w.closing && time.Now().Before(deadline) {
		w.mu.Unlock()
		runtime.Gosched()
		w.mu.Lock()
	}
}

// gatherWait is gather's longest wait: a quarter of the last
// write-and-sync time, capped by window when it is positive.
func gatherWait(lastSync, window time.Duration) time.Duration {
	d := lastSync / 4
	if window > 0 && d > window {
		d = window
	}
	return d
}

// writeBatch writes b's records, then fdatasyncs if any waiter needs it.
//
// Segments are cut here, in front of the first unit that would end past
// the current segment's preallocated size, if the preallocator has a
// spare (a unit never spans two segments). Without a spare (the disk is
// short of space) the unit goes into the current segment, which grows
// past its size, and the next units try again, so the log moves to a new
// segment as soon as one is ready. A segment that holds only its head is
// never cut: a unit larger than a segment gets a segment of its own.
func (w *WAL) writeBatch(b *batch) error {
	if c := w.pre.capacity(); c < w.curCap {
		w.curCap = c // the segment could not grow: cut at what it holds
	}
	pos := 0
	for i, u := range b.units {
		end := len(b.buf)
		if i+1 < len(b.units) {
			end = b.units[i+1].off
		}
		start := w.curOff + int64(u.off-pos)
		if start <= w.curHead || start+int64(end-u.off) <= w.curCap {
			continue
		}
		pf := w.pre.tryTake()
		if pf == nil {
			continue
		}
		if err := w.cut(b, pos, u, pf); err != nil {
			return err
		}
		pos = u.off
	}
	if err := w.write(b.buf[pos:]); err != nil {
		return err
	}
	if !w.spareAsked && w.curOff >= w.curCap-w.curCap/4 {
		// Three quarters full: time to prepare the next segment.
		w.spareAsked = true
		w.pre.want()
	}
	if b.needSync {
		w.opts.Metrics.observeGroup(len(b.units))
		return w.timedSync(w.cur)
	}
	return nil
}

// cut writes b.buf[pos:u.off] to the current segment, makes it durable and
// installs pf as the next segment, whose first unit is u. Everything in
// the finished segment is durable before the next segment exists:
// recovery relies on only the last segment ever having a torn tail.
func (w *WAL) cut(b *batch, pos int, u unitMark, pf *preparedFile) error {
	// The segment's growth stops first, so its final fdatasync below is
	// the last write to it.
	w.pre.detach()
	err := w.write(b.buf[pos:u.off])
	if err == nil {
		err = w.timedSync(w.cur)
	}
	if err != nil {
		pf.f.Close()
		_ = w.fs.Remove(pf.f.Name())
		return err
	}
	seq := w.curSeq + 1
	return w.installSegment(seq, u.firstIndex, w.segmentHead(seq, u.firstIndex, b.num, u.state), pf)
}

func (w *WAL) write(p []byte) error {
	if len(p) == 0 {
		return nil
	}
	start := time.Now()
	off := w.curOff
	w.pre.beforeWrite(off, off+int64(len(p)))
	n, err := w.cur.WriteAt(p, off)
	w.curOff += int64(n)
	w.statBytes.Add(uint64(n))
	w.opts.Metrics.observeWrite(time.Since(start), n)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return &IOError{Op: "write", File: w.curPath, Offset: off, Err: err}
	}
	return nil
}

// slowFsync is etcd's threshold for warning about a slow WAL sync.
const slowFsync = time.Second

func (w *WAL) timedSync(f vfs.File) error {
	start := time.Now()
	err := f.Sync()
	d := time.Since(start)
	w.statSyncs.Add(1)
	w.opts.Metrics.observeFsync(d)
	if err != nil {
		return &IOError{Op: "fdatasync", File: f.Name(), Offset: -1, Err: err}
	}
	if d > slowFsync {
		w.log.Warn("slow fdatasync", "took", d, "expected-duration", slowFsync, "file", f.Name())
	}
	return nil
}
