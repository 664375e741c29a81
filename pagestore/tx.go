package pagestore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"
)

// Tx is a transaction: a read-only snapshot, or the single writer.
// A Tx must be used by one goroutine at a time.
type Tx struct {
	db       *DB
	writable bool
	meta     meta // snapshot; for a writer, the meta being built
	closed   bool
	root     *Bucket   // the bucket directory
	buckets  []*Bucket // buckets opened in this tx (a handful: searched in order)

	// Storage for the directory, the first bucket opened and the list,
	// so that a reader that opens one bucket costs one allocation, not
	// five (a 1-key range is a read tx, so this is paid per read).
	rootB    Bucket
	firstB   Bucket // in use once its tx is set
	bucketsA [4]*Bucket

	// Writer state, discarded on rollback.
	freed           []extent // pages freed by this tx
	allocd          []extent // pages taken from the free set by this tx
	truncated       []extent // free tail pages dropped below hwm by defrag
	dirty           []dirtyPage
	grew            bool // a Put or CreateBucket ran: the quota applies
	forceCheckpoint bool
	truncateTail    bool // defrag: drop the free tail before writing
	defragMoved     int  // pages ApplyDefrag rewrote, for the stats
	truncHWM        pgid // hwm right after that drop (0: none)
	lockWait        time.Duration
	syncTime        time.Duration // time the commit spent in fdatasync
	// Commit phases, for Options.OnCommit (see CommitTimes).
	rebalanceTime, spillTime, writePhase time.Duration
	shrinkTo                             int64 // defrag: file size to cut to after unlocking
	published                            bool  // the commit is durable: dirty becomes db.recent
}

type dirtyPage struct {
	id  pgid
	buf []byte
}

func newTx(db *DB, m meta, writable bool) *Tx {
	tx := &Tx{db: db, writable: writable, meta: m}
	tx.rootB = Bucket{tx: tx, id: rootBucketOwner, root: m.root}
	tx.root = &tx.rootB
	tx.buckets = tx.bucketsA[:0]
	return tx
}

// opened returns the position and the bucket named name among those this
// tx opened, or -1.
func (tx *Tx) opened(name []byte) (int, *Bucket) {
	for i, b := range tx.buckets {
		if bytes.Equal(b.name, name) {
			return i, b
		}
	}
	return -1, nil
}

// newBucket returns storage for a bucket opened in this tx.
func (tx *Tx) newBucket() *Bucket {
	if tx.firstB.tx == nil {
		return &tx.firstB
	}
	return &Bucket{}
}

// ID returns the transaction id: for a reader the id of the commit it
// sees, for the writer the id its commit will have.
func (tx *Tx) ID() uint64 { return tx.meta.txid }

// Writable reports whether tx is the write transaction.
func (tx *Tx) Writable() bool { return tx.writable }

// DB returns the database.
func (tx *Tx) DB() *DB { return tx.db }

// Size returns the size in bytes of the database as this transaction sees
// it (its high-water mark); WriteTo writes exactly this many bytes.
func (tx *Tx) Size() int64 { return int64(tx.meta.hwm) * int64(tx.db.pageSize) }

func (tx *Tx) page(id pgid) ([]byte, error) {
	if tx.writable {
		if p := tx.db.recentPage(id); p != nil {
			return p, nil
		}
	}
	return tx.db.page(id, tx.meta.hwm)
}

// pageBuf returns a buffer for a dirty page run of n bytes, from the
// current transaction's arena. Caller holds writeMu.
func (db *DB) pageBuf(n int) []byte { return db.arenas[db.arenaCur].getRun(n) }

// recentPage returns the latest commit's buffer for the run at id, or
// nil. Only the writer may use it (the buffers are recycled by the next
// commit but one). Caller holds writeMu.
func (db *DB) recentPage(id pgid) []byte {
	r := db.recent
	i := sort.Search(len(r), func(i int) bool { return r[i].id >= id })
	if i < len(r) && r[i].id == id {
		return r[i].buf
	}
	return nil
}

func (tx *Tx) check(write bool) error {
	if tx.closed {
		return ErrTxClosed
	}
	if write && !tx.writable {
		return ErrTxNotWritable
	}
	return nil
}

// Bucket returns the named bucket, or an error wrapping ErrBucketNotFound.
func (tx *Tx) Bucket(name []byte) (*Bucket, error) {
	if err := tx.check(false); err != nil {
		return nil, err
	}
	if _, b := tx.opened(name); b != nil {
		return b, nil
	}
	e, err := tx.lookupBucket(name)
	if err != nil {
		return nil, err
	}
	b := tx.newBucket()
	*b = Bucket{tx: tx, name: e.name, id: e.id, root: e.root}
	tx.buckets = append(tx.buckets, b)
	return b, nil
}

// lookupBucket reads name's entry in this tx's directory. A reader takes
// it from DB.lastBucket when the last reader to look one up saw the same
// commit and name, and leaves its own there otherwise.
func (tx *Tx) lookupBucket(name []byte) (*dirEntry, error) {
	if !tx.writable {
		if e := tx.db.lastBucket.Load(); e != nil && e.txid == tx.meta.txid && bytes.Equal(e.name, name) {
			return e, nil
		}
	}
	v, flags, err := tx.root.get(name)
	if err != nil {
		return nil, err
	}
	if v == nil {
		return nil, fmt.Errorf("%w: %q", ErrBucketNotFound, name)
	}
	root, id, ok := decodeBucketHeader(v)
	if !ok || flags&elemFlagBucket == 0 {
		return nil, corruptf(tx.db.path, "directory entry %q is not a bucket header", name)
	}
	e := &dirEntry{txid: tx.meta.txid, name: append([]byte(nil), name...), id: id, root: root}
	if !tx.writable {
		tx.db.lastBucket.Store(e)
	}
	return e, nil
}

// dirEntry is a bucket's directory entry as of commit txid (DB.lastBucket).
// name is shared by the readers' Buckets and never changed.
type dirEntry struct {
	txid uint64
	name []byte
	id   uint32
	root pgid
}

// CreateBucket creates a bucket; ErrBucketExists if it is there already.
func (tx *Tx) CreateBucket(name []byte) (*Bucket, error) {
	if err := tx.check(true); err != nil {
		return nil, err
	}
	if len(name) == 0 {
		return nil, ErrBucketNameRequired
	}
	if len(name) > MaxKeySize {
		return nil, ErrKeyTooLarge
	}
	if v, _, err := tx.root.get(name); err != nil {
		return nil, err
	} else if v != nil {
		return nil, fmt.Errorf("%w: %q", ErrBucketExists, name)
	}
	b := tx.newBucket()
	*b = Bucket{tx: tx, name: append([]byte(nil), name...), id: tx.meta.nextBucketID}
	tx.meta.nextBucketID++
	b.rootNode = &node{b: b, leaf: true, appendOnly: true}
	if err := tx.root.put(b.name, encodeBucketHeader(0, b.id), elemFlagBucket); err != nil {
		return nil, err
	}
	tx.buckets = append(tx.buckets, b)
	tx.grew = true
	return b, nil
}

// CreateBucketIfNotExists returns the bucket, creating it if needed.
func (tx *Tx) CreateBucketIfNotExists(name []byte) (*Bucket, error) {
	b, err := tx.Bucket(name)
	if err == nil || !isNotFound(err) {
		return b, err
	}
	return tx.CreateBucket(name)
}

func isNotFound(err error) bool { return err != nil && errors.Is(err, ErrBucketNotFound) }

// DeleteBucket deletes a bucket and frees all its pages.
func (tx *Tx) DeleteBucket(name []byte) error {
	if err := tx.check(true); err != nil {
		return err
	}
	b, err := tx.Bucket(name)
	if err != nil {
		return err
	}
	// Free the committed tree; in-memory nodes die with the Bucket.
	if b.root != 0 {
		if err := tx.freeTree(b.root, 0); err != nil {
			return err
		}
	}
	if i, _ := tx.opened(name); i >= 0 {
		tx.buckets = append(tx.buckets[:i], tx.buckets[i+1:]...)
	}
	b.deleted = true
	b.rootNode, b.nodes = nil, nil
	return tx.root.del(name)
}

func (tx *Tx) freeTree(id pgid, depth int) error {
	if depth > 64 {
		return corruptf(tx.db.path, "page %d: tree deeper than 64 levels", id)
	}
	p, err := tx.page(id)
	if err != nil {
		return err
	}
	if pgFlags(p) == flagBranch {
		for i := 0; i < pgCount(p); i++ {
			_, c := branchElem(p, i)
			if err := tx.freeTree(c, depth+1); err != nil {
				return err
			}
		}
	}
	tx.freed = append(tx.freed, extent{id, 1 + uint64(pgOverflow(p))})
	return nil
}

// ForEach calls fn for every bucket, in name order.
func (tx *Tx) ForEach(fn func(name []byte, b *Bucket) error) error {
	if err := tx.check(false); err != nil {
		return err
	}
	var names [][]byte
	c := tx.root.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		names = append(names, k)
	}
	if c.err != nil {
		return c.err
	}
	for _, n := range names {
		b, err := tx.Bucket(n)
		if err != nil {
			return err
		}
		if err := fn(n, b); err != nil {
			return err
		}
	}
	return nil
}

// free records that the committed page run at id is no longer used.
func (tx *Tx) free(id pgid) error {
	p, err := tx.page(id)
	if err != nil {
		return err
	}
	tx.freed = append(tx.freed, extent{id, 1 + uint64(pgOverflow(p))})
	return nil
}

// allocate returns n contiguous pages: the lowest free run that fits, or
// new pages at the high-water mark.
func (tx *Tx) allocate(n int) (pgid, error) {
	if id, ok := tx.db.fl.free.alloc(uint64(n)); ok {
		tx.allocd = append(tx.allocd, extent{id, uint64(n)})
		return id, nil
	}
	id := tx.meta.hwm
	if (int64(id)+int64(n))*int64(tx.db.pageSize) > tx.db.opts.MaxMapSize {
		return 0, fmt.Errorf("%w: %s would need %d pages", ErrMapFull, tx.db.path, int64(id)+int64(n))
	}
	tx.meta.hwm += pgid(n)
	return id, nil
}

// Rollback ends the transaction, discarding a writer's changes. It returns
// ErrTxClosed if the transaction already ended.
func (tx *Tx) Rollback() error {
	if tx.closed {
		return ErrTxClosed
	}
	tx.end(false)
	return nil
}

func (tx *Tx) end(committed bool) {
	tx.closed = true
	if !tx.writable {
		tx.db.endRead(tx.meta.txid)
		return
	}
	if !committed {
		tx.undo()
	}
	if db := tx.db; tx.published {
		// This commit's pages become recent and the arena that held the
		// previous commit's is free again; unless the commit was too big
		// to be worth keeping until the next one.
		db.recent = nil
		if a := &db.arenas[db.arenaCur]; len(a.list) <= a.keep {
			db.recent = tx.dirty
			db.arenaCur ^= 1
		}
	}
	tx.buckets, tx.root, tx.dirty = nil, nil, nil
	tx.db.arenas[tx.db.arenaCur].reset()
	tx.db.slab.reset()
	tx.db.inodes.reset()
	tx.db.writeMu.Unlock()
}

// undo gives back the pages this tx took from the free set.
func (tx *Tx) undo() {
	for _, list := range [][]extent{tx.allocd, tx.truncated} {
		for _, e := range list {
			tx.db.fl.free.add(e.start, e.n)
		}
	}
	tx.allocd, tx.truncated = nil, nil
}

// WriteTo writes a consistent copy of the database as this transaction
// sees it: both meta slots hold this transaction's meta, and every page
// below its high-water mark follows. The copy opens as a normal database.
func (tx *Tx) WriteTo(w io.Writer) (int64, error) {
	if err := tx.check(false); err != nil {
		return 0, err
	}
	if tx.writable {
		return 0, fmt.Errorf("pagestore: WriteTo needs a read transaction")
	}
	db := tx.db
	ps := db.pageSize
	// Pages free in this snapshot may since have been cut off the end of
	// the file by online defrag; reading them through the mapping would
	// fault. Hold off truncation while copying, and copy zeros for
	// whatever lies past the file's end now (it is free in this snapshot).
	db.sizeMu.Lock()
	db.copiers++
	limit := db.fileSize
	db.sizeMu.Unlock()
	defer func() {
		db.sizeMu.Lock()
		db.copiers--
		db.sizeMu.Unlock()
	}()
	buf := make([]byte, 2*ps)
	m := tx.meta
	m.encode(buf[:ps], 0)
	m.encode(buf[ps:], 1)
	var total int64
	n, err := w.Write(buf)
	total += int64(n)
	if err != nil {
		return total, err
	}
	const chunk = 1 << 20
	end := int64(tx.meta.hwm) * int64(ps)
	var zeros []byte
	for off := int64(2 * ps); off < end; off += chunk {
		e := min(off+chunk, end)
		src := db.data[off:max(off, min(e, limit))]
		if len(src) < int(e-off) {
			if zeros == nil {
				zeros = make([]byte, chunk)
			}
			src = append(append([]byte(nil), src...), zeros[:int(e-off)-len(src)]...)
		}
		n, err := w.Write(src)
		total += int64(n)
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// sortedBuckets returns the buckets with in-memory changes, by name.
func (tx *Tx) sortedBuckets() []*Bucket {
	var bs []*Bucket
	for _, b := range tx.buckets {
		if b.rootNode != nil && !b.deleted {
			bs = append(bs, b)
		}
	}
	sort.Slice(bs, func(i, j int) bool { return bytes.Compare(bs[i].name, bs[j].name) < 0 })
	return bs
}
