package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/vfs"
)

// Snapshot identifies a raft snapshot recorded in the WAL by a marker.
type Snapshot struct {
	Index uint64
	Term  uint64
	// ConfState is the membership at Index. Nil writes an empty one.
	ConfState *raftpb.ConfState
}

// WAL is an open write-ahead log, ready for appends.
//
// Appends (Save, SaveAsync, SaveSnapshot) may be called from any number of
// goroutines; records are written in the order their calls took the
// enqueue lock. One goroutine, the syncer, does all writes and fdatasyncs.
type WAL struct {
	dir      string
	opts     Options
	fs       vfs.FS
	log      *slog.Logger
	lock     io.Closer
	metadata []byte

	// recovered is what Open read, handed out once by ReadAll.
	recovered *recovered

	// mu guards the enqueue side: the fields from here to scratch. Callers
	// encode their records into queue under mu; the syncer swaps queue
	// for an empty batch under mu and then writes without holding it, so
	// appenders never wait for I/O to enqueue.
	mu      sync.Mutex
	cond    *sync.Cond // signalled when queue gains a waiter or on close
	queue   *batch     // records not yet taken by the syncer
	spare   *batch     // the last written batch, kept to reuse its buffer
	err     error      // sticky: set once by a failed write or sync
	closing bool
	// busy is set while a batch is being written and synced, by the
	// syncer or an inline caller; whoever sets it owns the fields from cur
	// to curCap until clearing it.
	busy          bool
	prevWaiters   int               // waiters released by the last batch
	lastBatchTime time.Duration     // write-and-sync time of the last batch
	state         *raftpb.HardState // last hard state enqueued; never nil, never mutated
	// lastIndex is the index of the last entry enqueued, or of the
	// snapshot the log was opened at if none since.
	lastIndex uint64
	scratch   []byte // marshal buffer for entries

	// Owned by whoever holds busy (by Open and Create before the syncer
	// starts). Segment cuts are decided here, at write time, because only
	// the writer knows whether a spare segment is ready (see writeBatch).
	cur     vfs.File
	curPath string
	curOff  int64  // bytes of cur that hold records
	curSeq  uint64 // sequence number of cur
	// curHead is where cur's first unit starts (its head's length); a
	// segment holding only its head is never cut. 0 when unknown (after
	// Open), which counts as holding units.
	curHead int64
	// curCap is the size cur was preallocated to: a unit that would end
	// past it goes to a new segment if a spare is ready, and past it into
	// cur otherwise.
	curCap int64
	// spareAsked is set once the preallocator has been asked for the
	// segment after cur (see preallocator.want).
	spareAsked bool

	// segMu guards segs. The syncer appends on cut; Purge removes.
	segMu sync.Mutex
	segs  []segmentInfo

	pre        *preallocator
	syncerDone chan struct{}

	// Counters for Stats, updated by the syncer.
	statSyncs   atomic.Uint64
	statBatches atomic.Uint64
	statUnits   atomic.Uint64
	statBytes   atomic.Uint64
}

// Stats are cumulative counters since Open or Create.
type Stats struct {
	Syncs   uint64 // fdatasync calls on segments
	Batches uint64 // group-commit batches written
	Units   uint64 // appends (Save, SaveSnapshot, Sync calls) completed
	Bytes   uint64 // record bytes written
}

// Stats returns the WAL's counters.
func (w *WAL) Stats() Stats {
	return Stats{Syncs: w.statSyncs.Load(), Batches: w.statBatches.Load(), Units: w.statUnits.Load(), Bytes: w.statBytes.Load()}
}

type recovered struct {
	metadata []byte
	state    *raftpb.HardState
	ents     []*raftpb.Entry
}

// Exist reports whether dir holds WAL segments.
func Exist(fs vfs.FS, dir string) bool {
	if fs == nil {
		fs = vfs.Default
	}
	segs, err := listSegments(fs, dir)
	return err == nil && len(segs) > 0
}

const lockName = "LOCK"

// Create makes a new WAL in dir (created with mode 0700 if missing), with
// metadata stored in every segment header, and returns it open for
// appends.
func Create(dir string, metadata []byte, opts *Options) (*WAL, error) {
	o := opts.withDefaults()
	if err := o.FS.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("wal: create %s: %w", dir, err)
	}
	if Exist(o.FS, dir) {
		return nil, fmt.Errorf("%w: %s", ErrExist, dir)
	}
	lock, err := o.FS.Lock(filepath.Join(dir, lockName))
	if err != nil {
		return nil, fmt.Errorf("wal: lock %s: %w", dir, err)
	}
	w := newWAL(dir, o, lock, metadata)
	ok := false
	defer func() {
		if !ok {
			w.abort()
		}
	}()
	if err := removeTempFiles(o.FS, dir); err != nil {
		return nil, err
	}
	w.pre = startPreallocator(o.FS, dir, o.SegmentSize, !o.NoZeroFill, !o.wholeSegments, o.growAll, o.Logger)
	w.pre.onWriterWait = o.onWriterWait // run never reads it
	pf, err := w.pre.takeFirst()
	if err != nil {
		return nil, err
	}
	// A first segment smaller than SegmentSize (a small disk) was logged
	// by the preallocator; later segments grow back to full size.
	if err := w.installSegment(0, 0, w.segmentHead(0, 0, 0, w.state), pf); err != nil {
		return nil, err
	}
	// The directory entry of dir itself must survive a crash too.
	if err := o.FS.SyncDir(filepath.Dir(filepath.Clean(dir))); err != nil {
		return nil, err
	}
	w.startSyncer()
	ok = true
	w.log.Info("created WAL", "dir", dir, "segment-size", o.SegmentSize, "first-segment-size", w.curCap)
	return w, nil
}

func newWAL(dir string, o Options, lock io.Closer, metadata []byte) *WAL {
	w := &WAL{
		dir: dir, opts: o, fs: o.FS, log: o.Logger, lock: lock,
		metadata: append([]byte(nil), metadata...),
		queue:    &batch{num: 1},
		state:    &raftpb.HardState{},
	}
	w.cond = sync.NewCond(&w.mu)
	return w
}

// segmentHead encodes the records that open a segment: its header and the
// hard state current at the cut, so reading can start at any segment.
func (w *WAL) segmentHead(seq, firstIndex, batchNum uint64, state *raftpb.HardState) []byte {
	h := segmentHeader{seq: seq, firstIndex: firstIndex, metadata: w.metadata}
	b := appendRecord(nil, typeSegment, batchNum, h.marshal(), -1, true)
	if !raft.IsEmptyHardState(state) {
		st, _ := marshalOpts.Marshal(state) // HardState marshaling cannot fail
		b = appendRecord(b, TypeState, batchNum, st, -1, true)
	}
	return b
}

// installSegment writes head into the prepared file pf, makes it durable,
// and renames it into place as segment seq. Order: data, then fdatasync,
// then rename, then directory fsync, so a segment name never points at a
// file without its header. pf is consumed, also on error.
func (w *WAL) installSegment(seq, firstIndex uint64, head []byte, pf *preparedFile) error {
	f := pf.f
	tmp := f.Name()
	if _, err := f.WriteAt(head, 0); err != nil {
		f.Close()
		return &IOError{Op: "write", File: tmp, Err: err}
	}
	if err := w.timedSync(f); err != nil {
		f.Close()
		return err
	}
	path := filepath.Join(w.dir, segmentName(seq, firstIndex))
	if err := w.fs.Rename(tmp, path); err != nil {
		f.Close()
		return fmt.Errorf("wal: install segment: %w", err)
	}
	if err := w.fs.SyncDir(w.dir); err != nil {
		f.Close()
		return err
	}
	// Reopen under the final name, so the file's name (in errors, logs and
	// fault-injection events) is the segment's.
	f.Close()
	f, err := w.fs.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("wal: open new segment: %w", err)
	}
	// The preallocator moves to the new segment (and stops growing the
	// old one) before the old one is closed.
	w.pre.attach(path, int64(len(head)), pf.filled, pf.size)
	if w.cur != nil {
		w.cur.Close()
	}
	w.cur, w.curPath, w.curOff = f, path, int64(len(head))
	w.curSeq, w.curHead, w.curCap, w.spareAsked = seq, int64(len(head)), pf.size, false
	w.segMu.Lock()
	w.segs = append(w.segs, segmentInfo{seq: seq, firstIndex: firstIndex, path: path})
	w.segMu.Unlock()
	return nil
}

// Open opens the WAL in dir for appends after reading it from the segment
// that holds snap onward. A torn tail in the last segment is truncated and
// logged; corruption anywhere else fails with ErrCorrupt. Call ReadAll to
// get what was read.
func Open(dir string, snap Snapshot, opts *Options) (*WAL, error) {
	o := opts.withDefaults()
	lock, err := o.FS.Lock(filepath.Join(dir, lockName))
	if err != nil {
		return nil, fmt.Errorf("wal: lock %s: %w", dir, err)
	}
	w := newWAL(dir, o, lock, nil)
	ok := false
	defer func() {
		if !ok {
			w.abort()
		}
	}()
	if err := removeTempFiles(o.FS, dir); err != nil {
		return nil, err
	}
	r, err := readLog(o.FS, dir, snap)
	if err != nil {
		return nil, err
	}
	last := r.segs[len(r.segs)-1]
	f, err := o.FS.OpenFile(last.path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	w.cur, w.curPath, w.curOff = f, last.path, r.tail
	if r.torn != nil {
		w.log.Warn("truncating torn WAL tail", "file", last.path, "offset", r.torn.offset,
			"reason", r.torn.reason, "entries-recovered", len(r.ents))
		if err := f.Truncate(r.tail); err != nil {
			return nil, fmt.Errorf("wal: truncate torn tail of %s: %w", last.path, err)
		}
	}
	// What was read may so far live only in the page cache (the previous
	// process died, the machine did not); make it durable before raft is
	// told it is persisted.
	if err := w.timedSync(f); err != nil {
		return nil, err
	}
	w.metadata = r.metadata
	w.recovered = &recovered{metadata: r.metadata, state: r.state, ents: r.ents}
	w.state = r.state
	w.lastIndex = snap.Index
	if n := len(r.ents); n > 0 {
		w.lastIndex = r.ents[n-1].GetIndex()
	}
	w.queue.num = r.lastBatch + 1
	w.curSeq, w.curHead, w.curCap = last.seq, 0, o.SegmentSize
	w.segs = r.allSegs
	w.pre = startPreallocator(o.FS, dir, o.SegmentSize, !o.NoZeroFill, false, o.growAll, o.Logger)
	w.pre.onWriterWait = o.onWriterWait // run never reads it
	// The last segment grows on from its size, as it did before the
	// restart (a disk short of space cuts it short again).
	size, err := f.Size()
	if err != nil {
		return nil, fmt.Errorf("wal: size of %s: %w", last.path, err)
	}
	w.pre.attach(last.path, w.curOff, size, o.SegmentSize)
	w.startSyncer()
	ok = true
	return w, nil
}

// ReadAll returns what Open read: the metadata, the latest hard state and
// the entries after the snapshot. It returns the data once; later calls
// return an error.
func (w *WAL) ReadAll() (metadata []byte, st *raftpb.HardState, ents []*raftpb.Entry, err error) {
	r := w.recovered
	if r == nil {
		return nil, st, nil, errors.New("wal: ReadAll called twice or after Create")
	}
	w.recovered = nil
	return r.metadata, r.state, r.ents, nil
}

// Dir returns the WAL's directory.
func (w *WAL) Dir() string { return w.dir }

// Close waits for queued appends, syncs, and releases the directory lock.
func (w *WAL) Close() error {
	w.mu.Lock()
	if w.closing {
		w.mu.Unlock()
		return nil
	}
	w.closing = true
	w.cond.Broadcast()
	w.mu.Unlock()
	<-w.syncerDone

	w.mu.Lock()
	failed := w.err
	w.mu.Unlock()
	var err error
	if w.cur != nil && failed == nil {
		err = w.timedSync(w.cur)
	}
	w.abort()
	return err
}

// abort releases resources without flushing.
func (w *WAL) abort() {
	if w.pre != nil {
		w.pre.close()
		w.pre = nil
	}
	if w.cur != nil {
		w.cur.Close()
		w.cur = nil
	}
	if w.lock != nil {
		w.lock.Close()
		w.lock = nil
	}
}

// encodeSnapshot encodes a snapshot marker payload (wire format): term u64,
// index u64, marshaled ConfState.
func encodeSnapshot(s Snapshot) []byte {
	cs := s.ConfState
	if cs == nil {
		cs = &raftpb.ConfState{}
	}
	csb, _ := marshalOpts.Marshal(cs)
	b := make([]byte, 16+len(csb))
	binary.LittleEndian.PutUint64(b[0:], s.Term)
	binary.LittleEndian.PutUint64(b[8:], s.Index)
	copy(b[16:], csb)
	return b
}

func decodeSnapshot(b []byte) (Snapshot, error) {
	if len(b) < 16 {
		return Snapshot{}, errors.New("snapshot marker shorter than 16 bytes")
	}
	s := Snapshot{Term: binary.LittleEndian.Uint64(b[0:]), Index: binary.LittleEndian.Uint64(b[8:])}
	s.ConfState = &raftpb.ConfState{}
	if err := proto.Unmarshal(b[16:], s.ConfState); err != nil {
		return Snapshot{}, fmt.Errorf("snapshot marker conf state: %v", err)
	}
	return s, nil
}
