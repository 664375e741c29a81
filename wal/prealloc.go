package wal

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/strata-db/strata/vfs"
)

// Preallocation retry schedule after a failure: the first retry after
// preallocBackoffMin, doubling up to preallocBackoffMax. Variables so the
// package's tests can shorten them; read once per preallocator.
var (
	preallocBackoffMin = 100 * time.Millisecond
	preallocBackoffMax = 5 * time.Second
)

// minSegmentFloor is the smallest segment the preallocator falls back to
// when the disk has no room for a full one (never more than SegmentSize).
const minSegmentFloor = 1 << 20

// growPiece is the most the preallocator zero-fills of the current segment
// at once: the writer waits for a piece in flight only if it has caught
// up with it. It is written from growZeros zero bytes kept for the
// purpose (a small buffer: it lives as long as the log).
const (
	growPiece = 1 << 20
	growZeros = 64 << 10
)

// growChunk is how much of a segment is allocated at a time: an eighth of
// the segment size (8 MiB of 64), in whole 4 KiB blocks, at least one.
func growChunk(segmentSize int64) int64 {
	c := (segmentSize/8 + 4095) &^ 4095
	return min(max(c, 4096), segmentSize)
}

// preallocator prepares the disk space the log writes into, off the hot
// path, so that appends overwrite allocated, written blocks and fdatasync
// has no metadata to flush: it allocates (fallocate) and, unless
// disabled, writes zeros and fdatasyncs.
//
// A new log's first segment grows: it starts with one chunk (growChunk,
// an eighth of a segment: 8 MiB of 64) and grows by a chunk whenever the
// writer comes within half a chunk of its allocated end (see grow). So a
// new member's WAL takes 8 MiB of disk and then about what it holds plus
// a chunk, instead of a zeroed 64 MiB segment from the start (etcd's is
// two: its first segment and 0.tmp), which matters on small disks and
// for the many members that never write 64 MiB. Every later segment (the
// spare) is allocated whole before the log moves to it, so a member that
// has been writing has up to a segment of space reserved ahead of it: if
// its disk fills, it keeps appending until that segment ends (the
// full-disk behaviour below). Growth costs the writer nothing measurable:
// a 320-byte write and an fdatasync in a loop over 30 MiB had the same
// mean and p99 fdatasync with growth as with a whole segment, and a lower
// maximum (6 ms against 24-28 ms while a whole spare was zeroed).
//
// At most one file is prepared ahead: the spare. It is prepared only once
// wanted: when the segment being written is three quarters full (want),
// or when a cut or a new log needs it and none is ready. So a log that
// fits in its current segment holds no second, zeroed one on the disk
// (etcd always keeps one, 0.tmp); a quarter of a segment, 16 MiB, is
// ample time to zero the next 64 MiB off the hot path.
//
// A disk short of space does not stop the log:
//   - If a full-size file does not fit (ENOSPC, EDQUOT), smaller ones are
//     tried, halving down to minSize, but never taking more than half of
//     the free space the file system reports; the next preparation tries
//     the full size again, so segments grow back once space returns.
//   - If nothing fits, or the disk fails otherwise, the attempt's file is
//     removed, the failure is logged once, and preparation is retried with
//     exponential backoff. Meanwhile the syncer does not wait for a spare:
//     it keeps appending to the current segment past its size (see
//     WAL.writeBatch) and cuts at the first unit boundary after a spare is
//     ready. A failed preparation is not a failed write.
//
// Growth of the current segment never overwrites a record: the writer
// announces each write (beforeWrite) and the preallocator fills only from
// the end of what is allocated or written, one piece at a time, and a
// write that reaches the piece in flight waits for it. A segment that
// cannot grow (no space) has its cap cut to what it holds (capacity), so
// the writer moves to the next segment as it would at a full one; past
// the cap without a spare, appends extend the file themselves.
//
// Lock protocol: mu guards every field below it; run is the only writer of
// n, and of ready (set), failing and lastErr; takers clear ready and wake
// run through cond.
type preallocator struct {
	fs      vfs.FS
	dir     string
	size    int64 // the full segment size
	minSize int64
	chunk   int64 // growChunk(size)
	// growFirst: the next file prepared is a new log's first segment,
	// which grows; growAll (tests only): every segment grows.
	growFirst, growAll bool
	zeroFill           bool
	zero               []byte // growZeros zeros, once needed
	log                *slog.Logger
	// freeSpace reports the bytes available to the WAL directory's file
	// system, if known; a hint that keeps a reduced segment from taking
	// the last free bytes (the page store may share the disk).
	freeSpace              func(dir string) (int64, bool)
	backoffMin, backoffMax time.Duration

	stop chan struct{} // closed by close
	done chan struct{} // closed when run returns

	mu   sync.Mutex
	cond *sync.Cond
	// ready is the prepared spare, or nil.
	ready *preparedFile
	// wanted is set by want, tryTake and takeFirst and cleared when the
	// spare is taken: run prepares a spare only while it is set.
	wanted bool
	// failing is set when the latest preparation failed and cleared by the
	// next success; takers do not wait for an attempt while it is set.
	failing bool
	lastErr error
	// attempts counts finished preparations (success or failure).
	attempts int
	stopped  bool
	n        int // files created so far, for unique temporary names
	// reduced is set once a segment had to be smaller than size (a
	// smaller spare, or a segment that could not grow) and cleared when a
	// segment grows to full size again, so each change is logged once.
	reduced bool

	// The current segment, which grows (see grow), and the preallocator's
	// own handle on it, opened by grow. Its own open file description, so
	// that a writeback error its fdatasync reports is still reported to
	// the writer's next fdatasync (Linux reports such an error once to
	// each open file description): a failed sync here can never hide the
	// loss of the writer's unsynced records.
	curPath string
	growF   vfs.File
	// busy is set while grow uses cur; detaching asks it to stop early,
	// because the log is moving to the next segment (attach waits).
	busy, detaching bool
	// filled: [0, filled) of cur is allocated and written (zeros or
	// records). limit: its cap, the most it grows to.
	filled, limit int64
	// writeEnd is the end of the writer's last write into cur.
	writeEnd int64
	// [fillFrom, fillTo) is the piece being filled now; fillTo == 0: none.
	fillFrom, fillTo int64
	// growing is set when cur should grow and cleared when run is done.
	growing bool
	// growFailed is set when cur could not grow: its cap is now filled.
	growFailed bool

	// onWriterWait (tests only) runs, under mu, each time the writer is
	// about to wait for the preallocator: onPiece when its write overlaps
	// the piece being filled. It must not block. Read by writer-side
	// methods only.
	onWriterWait func(onPiece bool)
}

// preparedFile is a temporary segment file ready to be installed: its
// first filled bytes are allocated, and the segment may grow to size.
type preparedFile struct {
	f      vfs.File
	size   int64
	filled int64
}

// tmpSuffix ends the names of prepared segment files. Each prepared file
// gets a fresh name, so the preallocator never touches a file the writer
// has taken but not yet renamed. Open removes any left behind by a crash.
const tmpSuffix = ".wal.tmp"

// startPreallocator starts preparing segments of size bytes in dir.
// newLog: the first file prepared is a new log's first segment, which
// grows. growAll (tests only): every segment grows.
func startPreallocator(fs vfs.FS, dir string, size int64, zeroFill, newLog, growAll bool, log *slog.Logger) *preallocator {
	p := &preallocator{
		fs: fs, dir: dir, size: size, minSize: min(size, minSegmentFloor), chunk: growChunk(size),
		growFirst: newLog, growAll: growAll, zeroFill: zeroFill, log: log,
		freeSpace:  statfsFree,
		backoffMin: preallocBackoffMin, backoffMax: preallocBackoffMax,
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	p.cond = sync.NewCond(&p.mu)
	go p.run()
	return p
}

func (p *preallocator) run() {
	defer close(p.done)
	backoff := p.backoffMin
	loggedFailure := false
	for {
		p.mu.Lock()
		for (p.ready != nil || !p.wanted) && !p.growing && !p.stopped {
			p.cond.Wait()
		}
		if p.stopped {
			p.mu.Unlock()
			return
		}
		if p.growing {
			p.mu.Unlock()
			p.grow()
			continue
		}
		p.mu.Unlock()

		pf, err := p.prepareFitting()

		p.mu.Lock()
		if p.stopped {
			p.mu.Unlock()
			p.discard(pf)
			return
		}
		p.attempts++
		if err == nil {
			p.growFirst = false
			p.ready = pf
			wasFailing, wasReduced := p.failing, p.reduced
			p.failing, p.lastErr = false, nil
			p.cond.Broadcast()
			p.mu.Unlock()
			switch {
			case wasFailing:
				p.log.Info("preallocated the next WAL segment again; the log moves to it at the next append",
					"dir", p.dir, "segment-size", pf.size)
			case pf.size < p.size && !wasReduced:
				p.reduced = true
				p.log.Warn("the WAL disk has no room for a full segment; using a smaller one until space returns",
					"dir", p.dir, "segment-size", pf.size, "wanted", p.size)
			case pf.size == p.size && pf.filled == pf.size && wasReduced:
				p.reduced = false
				p.log.Info("the WAL disk has room again; back to full-size segments", "dir", p.dir, "segment-size", pf.size)
			}
			loggedFailure = false
			backoff = p.backoffMin
			continue
		}
		p.failing, p.lastErr = true, err
		p.cond.Broadcast()
		p.mu.Unlock()
		if !loggedFailure {
			loggedFailure = true
			p.log.Warn("cannot preallocate the next WAL segment; appending to the current segment past its size "+
				"and retrying with backoff (free space on the WAL disk)",
				"dir", p.dir, "segment-size", p.size, "error", err)
		}
		select {
		case <-time.After(backoff):
		case <-p.stop:
			return
		}
		backoff = min(2*backoff, p.backoffMax)
	}
}

// prepareFitting prepares a full-size file or, if the disk is out of
// space, the largest smaller one that fits (see preallocator).
func (p *preallocator) prepareFitting() (*preparedFile, error) {
	size := p.size
	var pf *preparedFile
	var err error
	if free, ok := p.freeSpace(p.dir); ok && free < size {
		// It cannot fit, so it is not tried: on tmpfs a fallocate that
		// fails holds the free pages while it runs, and the log's own
		// writes past its segment's size would fail meanwhile.
		err = fmt.Errorf("wal: %d bytes for the next segment in %s, %d free: %w", size, p.dir, free, syscall.ENOSPC)
	} else {
		pf, err = p.prepare(size)
	}
	for err != nil && isNoSpace(err) {
		size /= 2
		if free, ok := p.freeSpace(p.dir); ok {
			for size >= p.minSize && size > free/2 {
				size /= 2
			}
		}
		if size < p.minSize {
			break
		}
		pf, err = p.prepare(size)
	}
	if err != nil {
		return nil, err
	}
	return pf, nil
}

// prepare builds one temporary segment file for a segment of size bytes:
// whole, or only its first chunk for a segment that grows. On failure the
// file is removed, so a full disk does not keep a partial file.
func (p *preallocator) prepare(size int64) (*preparedFile, error) {
	p.n++
	path := filepath.Join(p.dir, fmt.Sprintf("prealloc-%d%s", p.n, tmpSuffix))
	f, err := p.fs.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	filled := size
	if p.growFirst || p.growAll {
		filled = min(size, p.chunk)
	}
	if err := fillFile(f, filled, p.zeroFill, p.stop); err != nil {
		f.Close()
		if rerr := p.fs.Remove(path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
		return nil, err
	}
	return &preparedFile{f: f, size: size, filled: filled}, nil
}

func (p *preallocator) discard(pf *preparedFile) {
	if pf != nil {
		pf.f.Close()
		_ = p.fs.Remove(pf.f.Name())
	}
}

// isNoSpace reports whether err means the file system is out of space or
// quota, the errors a smaller file may avoid.
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// statfsFree returns the bytes available to unprivileged users on dir's
// file system.
func statfsFree(dir string) (int64, bool) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, false
	}
	return int64(st.Bavail) * int64(st.Bsize), true
}

// fillFile reserves size bytes for f. With zeroFill it writes zeros and
// fdatasyncs, so later appends are plain overwrites.
func fillFile(f vfs.File, size int64, zeroFill bool, stop <-chan struct{}) error {
	if err := f.Preallocate(0, size); err != nil {
		return err
	}
	if !zeroFill {
		return nil
	}
	const chunk = 1 << 20
	zero := make([]byte, chunk)
	for off := int64(0); off < size; off += chunk {
		select {
		case <-stop:
			return fmt.Errorf("wal: preallocation stopped")
		default:
		}
		n := int64(chunk)
		if size-off < n {
			n = size - off
		}
		if _, err := f.WriteAt(zero[:n], off); err != nil {
			return err
		}
	}
	return f.Sync()
}

// takeFirst returns a prepared file for the first segment of a new log,
// waiting for the preallocator's first attempt. It fails only when not
// even a minimum-size file fits.
func (p *preallocator) takeFirst() (*preparedFile, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.wantLocked()
	for p.ready == nil && p.attempts == 0 && !p.stopped {
		p.writerWaits(false)
		p.cond.Wait()
	}
	if p.ready == nil {
		if p.lastErr == nil {
			return nil, fmt.Errorf("wal: preallocator closed")
		}
		return nil, fmt.Errorf("wal: cannot create the first segment in %s (at least %d bytes): %w", p.dir, p.minSize, p.lastErr)
	}
	return p.takeLocked(), nil
}

// tryTake returns the spare for a segment cut, or nil if there is none to
// be had now. While preparation is healthy it waits for the attempt in
// progress, as a cut always did; while preparation is failing it returns
// at once, so the syncer keeps appending to the current segment.
func (p *preallocator) tryTake() *preparedFile {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.wantLocked()
	for p.ready == nil && !p.failing && !p.stopped {
		p.writerWaits(false)
		p.cond.Wait()
	}
	if p.ready == nil {
		return nil
	}
	return p.takeLocked()
}

func (p *preallocator) takeLocked() *preparedFile {
	pf := p.ready
	p.ready, p.wanted = nil, false
	p.cond.Broadcast()
	return pf
}

// want asks for the next spare to be prepared, if it is not already.
func (p *preallocator) want() {
	p.mu.Lock()
	p.wantLocked()
	p.mu.Unlock()
}

func (p *preallocator) wantLocked() {
	if !p.wanted {
		p.wanted = true
		p.cond.Broadcast()
	}
}

func (p *preallocator) close() {
	p.mu.Lock()
	p.stopped = true
	p.cond.Broadcast()
	p.mu.Unlock()
	close(p.stop)
	<-p.done
	p.mu.Lock()
	pf := p.ready
	p.ready = nil
	if p.growF != nil {
		p.growF.Close()
		p.growF = nil
	}
	p.mu.Unlock()
	p.discard(pf)
}

// detach stops the growth of the current segment and waits for a piece in
// progress (and its fdatasync): the writer calls it before the segment's
// final fdatasync at a cut, so nothing writes to a segment once the log
// has moved past it. Writes into the segment until attach no longer grow
// it.
func (p *preallocator) detach() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopGrowthLocked()
	p.curPath, p.growing = "", false
}

// stopGrowthLocked asks a growth in progress to stop and waits for it.
func (p *preallocator) stopGrowthLocked() {
	p.detaching = true
	for p.busy {
		p.writerWaits(false)
		p.cond.Wait()
	}
	p.detaching = false
}

// attach makes f the current segment: its records end at writeEnd, its
// first filled bytes are allocated, and it may grow to limit. The previous
// segment's growth was stopped by detach at the cut; one still running
// (none should be) is stopped and waited for here.
func (p *preallocator) attach(path string, writeEnd, filled, limit int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopGrowthLocked()
	if p.growF != nil {
		p.growF.Close()
		p.growF = nil
	}
	p.curPath = path
	p.writeEnd, p.filled, p.limit = writeEnd, max(filled, writeEnd), limit
	p.growing, p.growFailed = false, false
	p.maybeGrowLocked()
}

// beforeWrite is called by the writer before it writes [off, end) of the
// current segment: it waits if a piece being zero-filled overlaps, records
// the write, and asks for growth once the allocated end is near.
func (p *preallocator) beforeWrite(off, end int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.fillTo != 0 && off < p.fillTo && end > p.fillFrom {
		p.writerWaits(true)
		p.cond.Wait()
	}
	p.writeEnd = max(p.writeEnd, end)
	p.filled = max(p.filled, end) // a write past the allocated end extends the file
	p.maybeGrowLocked()
}

func (p *preallocator) writerWaits(onPiece bool) {
	if p.onWriterWait != nil {
		p.onWriterWait(onPiece)
	}
}

func (p *preallocator) maybeGrowLocked() {
	if !p.growing && !p.growFailed && p.curPath != "" && p.filled < p.limit && p.filled-p.writeEnd < p.chunk/2 {
		p.growing = true
		p.cond.Broadcast()
	}
}

// capacity is the current segment's cap: its limit, or what it holds once
// it could not grow.
func (p *preallocator) capacity() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.growFailed {
		return min(p.filled, p.limit)
	}
	return p.limit
}

// grow allocates (and zero-fills) the current segment's next chunk, a
// piece at a time, then fdatasyncs, so the writer's appends into it are
// overwrites with no metadata to flush. Run by run only.
func (p *preallocator) grow() {
	p.mu.Lock()
	if !p.growing || p.curPath == "" {
		// detach stopped it between run's look and this one.
		p.growing = false
		p.mu.Unlock()
		return
	}
	path, f := p.curPath, p.growF
	target := min(p.limit, p.filled+p.chunk)
	p.busy = true
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.busy = false
		p.cond.Broadcast()
		p.mu.Unlock()
	}()
	var err error
	if f == nil {
		// Only grow touches growF; attach and close change it only while
		// grow is not running (busy).
		if f, err = p.fs.OpenFile(path, os.O_RDWR, 0); err == nil {
			p.mu.Lock()
			p.growF = f
			p.mu.Unlock()
		}
	}
	for err == nil {
		p.mu.Lock()
		if p.detaching || p.stopped {
			p.growing = false
			p.mu.Unlock()
			return // the log moves on (the cut syncs this segment), or is closing
		}
		from := p.filled
		if from >= target {
			p.mu.Unlock()
			break
		}
		to := min(target, from+growPiece)
		p.fillFrom, p.fillTo = from, to
		p.mu.Unlock()

		err = p.fillRange(f, from, to-from)

		p.mu.Lock()
		p.fillTo = 0
		if err == nil {
			p.filled = max(p.filled, to)
		}
		p.cond.Broadcast()
		p.mu.Unlock()
	}
	if err == nil {
		err = f.Sync()
	}
	p.mu.Lock()
	p.growing = false
	if p.detaching || p.stopped {
		p.mu.Unlock()
		return
	}
	full := p.filled >= p.size
	if err != nil {
		p.growFailed = true
		p.cond.Broadcast()
	}
	filled := p.filled
	p.mu.Unlock()
	switch {
	case err != nil && !isNoSpace(err):
		p.log.Warn("cannot grow the WAL segment; the log moves to the next one at its current size",
			"file", path, "segment-size", filled, "error", err)
	case err != nil && !p.reduced:
		p.reduced = true
		p.log.Warn("the WAL disk has no room for a full segment; cutting segments short until space returns",
			"file", path, "segment-size", filled, "wanted", p.size, "error", err)
	case err == nil && full && p.reduced:
		p.reduced = false
		p.log.Info("the WAL disk has room again; back to full-size segments", "dir", p.dir, "segment-size", filled)
	}
}

// fillRange allocates n bytes of f from off and, with zero-filling,
// writes zeros over them. A disk that cannot spare twice n is not tried
// (see prepareFitting).
func (p *preallocator) fillRange(f vfs.File, off, n int64) error {
	if free, ok := p.freeSpace(p.dir); ok && free < 2*n {
		return fmt.Errorf("wal: %d bytes to grow %s, %d free: %w", n, f.Name(), free, syscall.ENOSPC)
	}
	if err := f.Preallocate(off, n); err != nil {
		return err
	}
	if !p.zeroFill {
		return nil
	}
	if p.zero == nil {
		p.zero = make([]byte, growZeros)
	}
	for end := off + n; off < end; {
		m := min(end-off, int64(len(p.zero)))
		if _, err := f.WriteAt(p.zero[:m], off); err != nil {
			return err
		}
		off += m
	}
	return nil
}

// removeTempFiles deletes prepared segment files left by a crash.
func removeTempFiles(fs vfs.FS, dir string) error {
	ents, err := fs.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), tmpSuffix) {
			if err := fs.Remove(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}
