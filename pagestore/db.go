package pagestore

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cespare/xxhash/v2"
	"golang.org/x/sys/unix"

	"github.com/strata-db/strata/vfs"
)

// DB is an open page-store file.
//
// Lock protocol:
//   - writeMu is held by the single write transaction from Begin(true) to
//     Commit/Rollback, and by Close. It guards fl, fileSize, metaBuf and
//     failed. It is held across I/O, so readers never take it.
//   - readersMu guards readers and is held only to update that map and to
//     read the published meta; never across I/O. Both readers (Begin,
//     Rollback) and the writer (computing the oldest reader) take it.
//   - meta is published with an atomic store after the commit's meta page
//     is durable; readers load it under readersMu so that registering a
//     reader and choosing its snapshot are one step.
type DB struct {
	path     string
	opts     Options
	fs       vfs.FS
	file     vfs.File
	lock     io.Closer
	log      *slog.Logger
	pageSize int
	data     []byte // read-only mapping of MaxMapSize bytes

	meta atomic.Pointer[meta] // latest durable commit

	// lastBucket is the directory entry a reader last looked up, with the
	// commit it was read at: readers of one commit that open the same
	// bucket (every read of the mvcc store opens its key bucket) skip the
	// directory's descent. A commit's directory never changes, so an
	// entry stays true for its txid.
	lastBucket atomic.Pointer[dirEntry]

	writeMu sync.Mutex
	fl      *freelist // guarded by writeMu
	// sizeMu guards fileSize and reserved and is held around every
	// ftruncate: the writer takes it (under writeMu) to grow the file, and
	// a finished defrag step takes it after releasing writeMu to shrink it.
	sizeMu   sync.Mutex
	fileSize int64         // guarded by sizeMu
	reserved int64         // guarded by sizeMu: bytes the latest commit's pages need
	zeroed   int64         // guarded by sizeMu: see prealloc.go
	zeroBusy bool          // guarded by sizeMu: see prealloc.go
	copiers  int           // guarded by sizeMu: running WriteTo calls; no shrinking meanwhile
	sizeCond *sync.Cond    // on sizeMu: signalled when a zeroing pass ends
	zeroCh   chan struct{} // wakes the preallocator; nil when disabled
	zeroDone chan struct{} // closed when the preallocator exits
	zeroStop atomic.Bool   // asks the preallocator to stop at once
	metaBuf  [2][]byte     // guarded by writeMu: bytes last written to each meta slot
	failed   error         // guarded by writeMu: set when the disk state is unknown
	scratch  []byte        // guarded by writeMu: buffer for coalesced writes
	cbuf     []byte        // guarded by writeMu: Put's compression output
	// arenas hold the writer's dirty-page buffers: the current write
	// transaction spills into arenas[arenaCur], while the other holds the
	// pages of the latest commit, which recent lists (sorted by id). The
	// next writer reads those pages from recent instead of the mapping:
	// its first reads are exactly the pages the last commit rewrote (the
	// directory, the root-to-rightmost-leaf path of an append), and
	// through the mapping each of them was a fresh page fault and a
	// checksum pass, about 30 us per 1,000-key commit on this VM. A
	// buffer in recent is what the file holds at that page: it was
	// written and synced by the published commit, and copy on write never
	// rewrites a page the latest commit uses.
	arenas    [2]chunks     // guarded by writeMu
	arenaCur  int           // guarded by writeMu
	recent    []dirtyPage   // guarded by writeMu
	slab      slab          // guarded by writeMu: the writer's copies of put keys and values
	inodes    inodePool     // guarded by writeMu: the writer's node element arrays
	syncTime  time.Duration // guarded by writeMu: time in fdatasync during the current commit
	writeTime time.Duration // guarded by writeMu: time writing pages during the current commit

	readersMu   sync.Mutex
	readersDone *sync.Cond     // signalled when readers empties
	readers     map[uint64]int // guarded by readersMu: open read txs per snapshot txid
	closing     bool           // guarded by readersMu
	verified    verifiedSet    // bit per page: checksum and structure verified
	closed      atomic.Bool
	st          statCounters
	// Set by open and only read after it, by CheckFile: why each meta
	// slot was invalid (nil if valid) and where it is.
	metaErrs    [2]error
	metaOffs    [2]int64
	checking    bool // opened by CheckFile: a bad freelist is reported, not fatal
	defragState defragCounters
}

// Open opens or creates the database file at path.
func Open(path string, opts *Options) (*DB, error) {
	o := opts.withDefaults()
	db := newDB(path, o)
	if !o.ReadOnly {
		// A read-only open locks the file it opened instead (see open):
		// Lock would create a missing file and needs write permission.
		lk, err := o.FS.Lock(path)
		if err != nil {
			if errors.Is(err, vfs.ErrLocked) {
				return nil, fmt.Errorf("%w: %s", ErrDatabaseLocked, path)
			}
			return nil, fmt.Errorf("pagestore: lock %s: %w", path, err)
		}
		db.lock = lk
	}
	if err := db.open(); err != nil {
		db.closeFiles()
		return nil, err
	}
	if o.Preallocate && !o.ReadOnly {
		db.zeroCh = make(chan struct{}, 1)
		db.zeroDone = make(chan struct{})
		go db.preallocLoop()
		db.sizeMu.Lock()
		db.kickPrealloc(db.reserved)
		db.sizeMu.Unlock()
	}
	return db, nil
}

func newDB(path string, o Options) *DB {
	db := &DB{path: path, opts: o, fs: o.FS, log: o.Logger, readers: map[uint64]int{},
		arenas: [2]chunks{newPageArena(), newPageArena()}, slab: newSlab()}
	db.readersDone = sync.NewCond(&db.readersMu)
	db.sizeCond = sync.NewCond(&db.sizeMu)
	return db
}

func (db *DB) open() error {
	ro := db.opts.ReadOnly
	flag := os.O_RDWR | os.O_CREATE
	if ro {
		flag = os.O_RDONLY
	}
	f, err := db.fs.OpenFile(db.path, flag, 0o600)
	if err != nil {
		return fmt.Errorf("pagestore: open %s: %w", db.path, err)
	}
	db.file = f
	if ro {
		// Shared: read-only opens coexist, and conflict with the
		// exclusive lock a writer holds on the same file.
		if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
			if errors.Is(err, unix.EWOULDBLOCK) {
				return fmt.Errorf("%w: %s", ErrDatabaseLocked, db.path)
			}
			return fmt.Errorf("pagestore: lock %s: %w", db.path, err)
		}
	}
	size, err := f.Size()
	if err != nil {
		return fmt.Errorf("pagestore: stat %s: %w", db.path, err)
	}
	m, err := db.readMetas(size)
	if err != nil {
		if ro && !errors.Is(err, ErrCorrupt) {
			return corruptf(db.path, "%v", err)
		}
		if ro || size >= int64(4*minPageSize) && size >= int64(4*osPageSize) {
			return err
		}
		// Too short to have finished creation: an interrupted create,
		// if what it holds is a prefix of what a create writes (or zeros);
		// anything else is a database cut short, which is refused.
		if size > 0 {
			if !db.interruptedCreate(size) {
				return corruptf(db.path, "file is %d bytes, shorter than any database (%d), and holds data a create "+
					"does not write: it was cut short (%v); restore the member from a snapshot or a peer", size, 4*osPageSize, err)
			}
			db.log.Warn("pagestore: reinitialising interrupted create", "path", db.path, "size", size, "err", err)
		}
		if m, err = db.initFile(); err != nil {
			return err
		}
		size = int64(m.hwm) * int64(m.pageSize)
	}
	db.pageSize = int(m.pageSize)
	if m.hwm > pgid(size/int64(db.pageSize)) {
		return corruptf(db.path, "file is %d bytes but the meta of tx %d needs %d pages of %d bytes", size, m.txid, m.hwm, db.pageSize)
	}
	if ro && size > db.opts.MaxMapSize {
		db.opts.MaxMapSize = size // never grows: map what is there
	}
	if size > db.opts.MaxMapSize {
		return fmt.Errorf("%w: %s is %d bytes, MaxMapSize is %d", ErrMapFull, db.path, size, db.opts.MaxMapSize)
	}
	if db.opts.InitialMmapSize > size && !ro {
		if err := f.Truncate(db.opts.InitialMmapSize); err != nil {
			return fmt.Errorf("pagestore: grow %s: %w", db.path, err)
		}
		size = db.opts.InitialMmapSize
	}
	db.fileSize = size
	data, err := unix.Mmap(int(f.Fd()), 0, int(db.opts.MaxMapSize), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("pagestore: mmap %s (%d bytes): %w", db.path, db.opts.MaxMapSize, err)
	}
	db.data = data
	db.verified = newVerifiedSet(db.opts.MaxMapSize / int64(db.pageSize))
	fl, err := loadFreelist(db.path, m, db.pageSize, func(id pgid) ([]byte, error) { return db.page(id, m.hwm) })
	if err != nil {
		if !db.checking {
			return err
		}
		// CheckFile reports it, and checks the trees anyway.
		fl = &freelist{free: &freeSet{}}
	}
	db.fl = fl
	db.reserved = int64(m.hwm) * int64(db.pageSize)
	db.zeroed = db.reserved
	db.meta.Store(m)
	db.st.txid.Store(m.txid)
	db.publishSpace(m.hwm)
	return nil
}

// readMetas returns the newest valid meta. It also remembers both slots'
// raw bytes so a failed meta sync can restore the slot it overwrote.
func (db *DB) readMetas(size int64) (*meta, error) {
	if size == 0 {
		return nil, errors.New("empty file")
	}
	buf := make([]byte, 2*maxPageSize)
	n, err := db.file.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("pagestore: read meta pages of %s: %w", db.path, err)
	}
	buf = buf[:n]
	m0, err0 := decodeMeta(buf, 0)
	var m1 *meta
	var err1 error
	sizes := []int{osPageSize, 4096, 1024, 2048, 8192, 16384, 32768, 65536}
	if m0 != nil {
		sizes = []int{int(m0.pageSize)}
	}
	// Slot 1's offset is the page size, which only a valid meta knows;
	// without one, the error reported for it is the one at the likeliest
	// offset (the first size tried).
	off1 := sizes[0]
	for i, ps := range sizes {
		if ps >= len(buf) {
			continue
		}
		m, err := decodeMeta(buf[ps:], 1)
		if m != nil && int(m.pageSize) == ps {
			m1, err1, off1 = m, nil, ps
			break
		}
		if err == nil {
			err = errors.New("page size disagrees with slot position")
		}
		if i == 0 || err1 == nil {
			err1 = err
		}
	}
	if m1 == nil && err1 == nil {
		err1 = fmt.Errorf("file too short (%d bytes)", len(buf))
	}
	db.metaErrs = [2]error{err0, err1}
	db.metaOffs = [2]int64{0, int64(off1)}
	var m *meta
	switch {
	case m0 == nil && m1 == nil:
		return nil, corruptf(db.path, "no valid meta page (page 0 at offset 0: %v; page 1 at offset %d: %v)", err0, off1, err1)
	case m0 == nil:
		db.log.Warn("pagestore: meta page 0 invalid, using page 1", "path", db.path, "offset", 0, "err", err0)
		m = m1
	case m1 == nil:
		db.log.Warn("pagestore: meta page 1 invalid, using page 0", "path", db.path, "offset", m0.pageSize, "err", err1)
		m = m0
	case m1.txid > m0.txid:
		m = m1
	default:
		m = m0
	}
	ps := int(m.pageSize)
	for slot := 0; slot < 2; slot++ {
		b := make([]byte, ps)
		if (slot+1)*ps <= len(buf) {
			copy(b, buf[slot*ps:])
		}
		db.metaBuf[slot] = b
	}
	return m, nil
}

// initFile writes an empty database: both metas, an empty directory root
// and an empty freelist checkpoint, then syncs the file and its directory.
func (db *DB) initFile() (*meta, error) {
	ps := osPageSize
	buf, m := initialImage(ps)
	if err := db.file.Truncate(0); err != nil {
		return nil, fmt.Errorf("pagestore: create %s: %w", db.path, err)
	}
	if err := writeFull(db.file, buf, 0); err != nil {
		return nil, fmt.Errorf("pagestore: create %s: %w", db.path, err)
	}
	if err := db.file.Sync(); err != nil {
		return nil, fmt.Errorf("pagestore: create %s: %w", db.path, err)
	}
	if err := db.fs.SyncDir(filepath.Dir(db.path)); err != nil {
		return nil, fmt.Errorf("pagestore: create %s: %w", db.path, err)
	}
	db.metaBuf[0] = append([]byte(nil), buf[:ps]...)
	db.metaBuf[1] = append([]byte(nil), buf[ps:2*ps]...)
	return m, nil
}

// initialImage is the file a create writes (4 pages of ps bytes) and its
// newest meta.
func initialImage(ps int) ([]byte, *meta) {
	buf := make([]byte, 4*ps)
	putHeader(buf[2*ps:], 2, flagLeaf, 0, 0, rootBucketOwner)
	sealPage(buf[2*ps : 3*ps])
	encodeFreelistRecord(buf[3*ps:], 3, flKindCheckpt, 0, 1, 4, 0, nil, nil, ps)
	m := &meta{pageSize: uint32(ps), root: 2, flHead: 3, hwm: 4, nextBucketID: 1}
	m.encode(buf[0:ps], 0)
	m.txid = 1
	m.encode(buf[ps:2*ps], 1)
	return buf, m
}

// interruptedCreate reports whether the first size bytes of the file can
// only be what an interrupted create left: every byte is the create's or
// zero.
func (db *DB) interruptedCreate(size int64) bool {
	img, _ := initialImage(osPageSize)
	if size > int64(len(img)) {
		return false
	}
	got := make([]byte, size)
	if n, err := db.file.ReadAt(got, 0); int64(n) != size && err != nil {
		return false
	}
	for i, b := range got {
		if b != 0 && b != img[i] {
			return false
		}
	}
	return true
}

// writeFull writes all of b at off, treating a silent short write as an
// error.
func writeFull(f vfs.File, b []byte, off int64) error {
	n, err := f.WriteAt(b, off)
	if err != nil {
		return err
	}
	if n != len(b) {
		return fmt.Errorf("short write at offset %d: %d of %d bytes: %w", off, n, len(b), io.ErrShortWrite)
	}
	return nil
}

// page returns the run starting at page id, verifying its checksum and
// structure the first time. hwm is the caller's snapshot high-water mark.
func (db *DB) page(id pgid, hwm pgid) ([]byte, error) {
	if id < numMetaPages || id >= hwm {
		return nil, corruptf(db.path, "reference to page %d outside [2,%d)", id, hwm)
	}
	ps := int64(db.pageSize)
	off := int64(id) * ps
	if db.verified.has(id) {
		return db.data[off : off+(1+int64(pgOverflow(db.data[off:])))*ps], nil
	}
	return db.verifyPage(id, hwm, true)
}

// verifyPage checks the run at id and, if remember, marks it verified.
func (db *DB) verifyPage(id pgid, hwm pgid, remember bool) ([]byte, error) {
	if id < numMetaPages || id >= hwm {
		// Never index the mapping with an unchecked id: past the file's
		// end the mapping faults.
		return nil, corruptf(db.path, "reference to page %d outside [2,%d)", id, hwm)
	}
	ps := int64(db.pageSize)
	off := int64(id) * ps
	hdr := db.data[off : off+ps]
	ovf := int64(pgOverflow(hdr))
	if int64(id)+1+ovf > int64(hwm) {
		return nil, corruptPage(db.path, id, db.pageSize, "overflow %d runs past hwm %d", ovf, hwm)
	}
	p := db.data[off : off+(1+ovf)*ps]
	if got, want := xxhash.Sum64(p[offID:]), pgChecksum(p); got != want {
		return nil, corruptPage(db.path, id, db.pageSize, "checksum mismatch (stored %#x, computed %#x)", want, got)
	}
	if pgID(p) != id {
		return nil, corruptPage(db.path, id, db.pageSize, "header names page %d", pgID(p))
	}
	if err := validatePage(p, hwm); err != nil {
		return nil, corruptPage(db.path, id, db.pageSize, "%v", err)
	}
	if remember {
		db.verified.add(id)
	}
	return p, nil
}

// forget clears the verified bits of pages about to be rewritten.
func (db *DB) forget(id pgid, n uint64) {
	for i := uint64(0); i < n; i++ {
		p := id + pgid(i)
		db.verified.remove(p)
	}
}

// Path returns the file's path.
func (db *DB) Path() string { return db.path }

// PageSize returns the page size recorded in the file.
func (db *DB) PageSize() int { return db.pageSize }

// Sync fdatasyncs the file; only useful with Options.NoSync.
func (db *DB) Sync() error {
	if err := db.file.Sync(); err != nil {
		return fmt.Errorf("pagestore: sync %s: %w", db.path, err)
	}
	return nil
}

// Close waits for the write transaction and every read transaction to
// finish, then unmaps and closes the file and releases its lock.
func (db *DB) Close() error {
	if db.closed.Swap(true) {
		return nil
	}
	db.writeMu.Lock()
	defer db.writeMu.Unlock()
	db.stopPrealloc()
	db.readersMu.Lock()
	db.closing = true
	for len(db.readers) > 0 {
		db.readersDone.Wait()
	}
	db.readersMu.Unlock()
	return db.closeFiles()
}

func (db *DB) closeFiles() error {
	var err error
	if db.data != nil {
		err = unix.Munmap(db.data)
		db.data = nil
	}
	db.sizeMu.Lock()
	if db.file != nil {
		if cerr := db.file.Close(); err == nil {
			err = cerr
		}
		db.file = nil
	}
	db.sizeMu.Unlock()
	if db.lock != nil {
		if cerr := db.lock.Close(); err == nil {
			err = cerr
		}
		db.lock = nil
	}
	return err
}

// Update runs fn in a write transaction, committing if fn returns nil and
// rolling back otherwise.
func (db *DB) Update(fn func(*Tx) error) error {
	tx, err := db.Begin(true)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// TrimMemory gives back what the writer keeps between write transactions
// to make the next one cheaper: its dirty-page arenas, the copies of put
// keys and values, node element arrays, the coalescing buffer, and the
// latest commit's pages kept for the next writer (it then reads them
// through the mapping). After a burst of writes these hold up to tens of
// MiB that an idle store does not need; the next write transaction
// allocates again what it uses. It waits for a write transaction in
// progress to end.
func (db *DB) TrimMemory() {
	db.writeMu.Lock()
	defer db.writeMu.Unlock()
	db.recent = nil
	db.arenas[0].release()
	db.arenas[1].release()
	db.slab.release()
	db.inodes.release()
	db.scratch = nil
}

// KeptBytes is about how much TrimMemory would give back: the bytes the
// writer keeps between write transactions. It waits for a write
// transaction in progress to end.
func (db *DB) KeptBytes() int {
	db.writeMu.Lock()
	defer db.writeMu.Unlock()
	n := cap(db.scratch) + db.inodes.kept*int(unsafe.Sizeof(inode{}))
	for _, c := range []*chunks{&db.arenas[0], &db.arenas[1], &db.slab.chunks} {
		for _, b := range c.list {
			n += cap(b)
		}
	}
	return n
}

// View runs fn in a read transaction.
func (db *DB) View(fn func(*Tx) error) error {
	tx, err := db.Begin(false)
	if err != nil {
		return err
	}
	err = fn(tx)
	if rerr := tx.Rollback(); err == nil && !errors.Is(rerr, ErrTxClosed) {
		err = rerr
	}
	return err
}

// Begin starts a transaction. There is at most one write transaction at a
// time: Begin(true) waits for the previous one to end. Read transactions
// never wait. Every transaction must end with Commit or Rollback.
func (db *DB) Begin(writable bool) (*Tx, error) {
	if db.closed.Load() {
		return nil, ErrDatabaseClosed
	}
	if !writable {
		db.readersMu.Lock()
		if db.closing {
			db.readersMu.Unlock()
			return nil, ErrDatabaseClosed
		}
		m := db.meta.Load()
		db.readers[m.txid]++
		db.readersMu.Unlock()
		db.st.readTxs.Add(1)
		return newTx(db, *m, false), nil
	}
	if db.opts.ReadOnly {
		return nil, fmt.Errorf("%w: %s", ErrReadOnly, db.path)
	}
	start := time.Now()
	db.writeMu.Lock()
	if db.closed.Load() {
		db.writeMu.Unlock()
		return nil, ErrDatabaseClosed
	}
	if db.failed != nil {
		err := db.failed
		db.writeMu.Unlock()
		return nil, fmt.Errorf("%w: %v", ErrFailed, err)
	}
	m := *db.meta.Load()
	if err := db.fl.release(db.oldestReader(m.txid)); err != nil {
		db.writeMu.Unlock()
		return nil, err
	}
	m.txid++
	tx := newTx(db, m, true)
	tx.lockWait = time.Since(start)
	return tx, nil
}

// oldestReader returns the smallest snapshot txid of any open reader, or
// latest when there is none.
func (db *DB) oldestReader(latest uint64) uint64 {
	db.readersMu.Lock()
	defer db.readersMu.Unlock()
	min := latest
	for id := range db.readers {
		if id < min {
			min = id
		}
	}
	return min
}

func (db *DB) endRead(txid uint64) {
	db.readersMu.Lock()
	if db.readers[txid]--; db.readers[txid] <= 0 {
		delete(db.readers, txid)
	}
	if len(db.readers) == 0 && db.closing {
		db.readersDone.Broadcast()
	}
	db.readersMu.Unlock()
}
