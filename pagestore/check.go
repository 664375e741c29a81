package pagestore

import (
	"bytes"
	"errors"
	"fmt"
)

// Check verifies the whole snapshot this transaction sees and returns an
// error wrapping ErrCorrupt describing every problem found (up to a
// limit), each with its page and byte offset. It checks that every page
// below the high-water mark is either reachable exactly once (meta, tree
// and freelist-log pages) or free according to the freelist log, never
// both; that the bytes in use the quota counts (hwm minus free pages) are
// the bytes in reachable pages; that every checksum is valid (recomputed,
// ignoring the verified-page cache); that keys are sorted within pages and
// within the bounds their parent gives; that each branch key equals its
// child's first key; that all leaves of a tree are at the same depth; and
// that each tree page is laid out as the writer lays it out (elements
// packed in order, in the fewest pages that hold them). It costs
// O(database size). CheckFile does the same for a file, offline.
func (tx *Tx) Check() error {
	if err := tx.check(false); err != nil {
		return err
	}
	if tx.writable {
		return errors.New("pagestore: Check needs a read transaction")
	}
	c := newChecker(tx.db, &tx.meta, 20)
	return c.run()
}

// checkLatest checks the latest commit, and also that the writer's
// in-memory free set and pending pages match the on-disk freelist. The
// caller holds writeMu.
func (db *DB) checkLatest() error {
	m := db.meta.Load()
	c := newChecker(db, m, 20)
	if err := c.run(); err != nil {
		return err
	}
	mem := db.fl.free.clone()
	for _, p := range db.fl.pending {
		for _, e := range p.ext {
			if !mem.add(e.start, e.n) {
				return corruptf(db.path, "in-memory pending pages [%d,+%d) overlap the free set", e.start, e.n)
			}
		}
	}
	if len(mem.ext) != len(c.free.ext) || mem.count != c.free.count {
		return corruptf(db.path, "tx %d: in-memory free space (%d pages in %d extents) differs from the freelist log (%d pages in %d extents)",
			m.txid, mem.count, len(mem.ext), c.free.count, len(c.free.ext))
	}
	for i := range mem.ext {
		if mem.ext[i] != c.free.ext[i] {
			return corruptf(db.path, "tx %d: in-memory free extent %v differs from the log's %v", m.txid, mem.ext[i], c.free.ext[i])
		}
	}
	return nil
}

// Problem is one inconsistency the checker found.
type Problem struct {
	// Page is the first page concerned, or -1 when the problem is not
	// about a page (the bytes-in-use figure, say).
	Page int64 `json:"page"`
	// Offset is Page's byte offset in the file, or -1.
	Offset int64  `json:"offset"`
	What   string `json:"problem"`
}

func (p Problem) String() string {
	if p.Page < 0 {
		return p.What
	}
	return fmt.Sprintf("page %d (offset %d): %s", p.Page, p.Offset, p.What)
}

// CheckReport is what a check found: the shape of the database and its
// problems. The counts describe the part of the file that could be read.
type CheckReport struct {
	Path     string `json:"path"`
	PageSize int    `json:"pageSize"`
	FileSize int64  `json:"fileSize"`
	TxID     uint64 `json:"txid"`
	// Pages is the high-water mark: pages [0, Pages) are in use or free.
	Pages         uint64 `json:"pages"`
	MetaPages     uint64 `json:"metaPages"`
	BranchPages   uint64 `json:"branchPages"`
	LeafPages     uint64 `json:"leafPages"`
	OverflowPages uint64 `json:"overflowPages"` // the extra pages of multi-page runs
	FreelistPages uint64 `json:"freelistPages"` // the freelist log's records
	FreePages     uint64 `json:"freePages"`
	// FreeListUnreadable means the freelist log could not be read, so
	// free and leaked pages were not checked.
	FreeListUnreadable bool `json:"freeListUnreadable,omitempty"`
	// TreeUnreadable means a tree page could not be read, so the pages
	// below it were not reached and leaks were not checked.
	TreeUnreadable bool              `json:"treeUnreadable,omitempty"`
	Buckets        int               `json:"buckets"`
	Keys           uint64            `json:"keys"` // keys in all buckets
	BucketKeys     map[string]uint64 `json:"bucketKeys"`
	// CompressedValues counts values stored compressed (each decoded by
	// the check).
	CompressedValues uint64 `json:"compressedValues"`
	// InUseBytes is the bytes of the pages reachable from the meta (meta,
	// tree and freelist-log pages): what the quota must count.
	InUseBytes int64 `json:"inUseBytes"`
	// LeafFill is the fraction of leaf page bytes holding data.
	LeafFill float64   `json:"leafFill"`
	Problems []Problem `json:"problems"`
	// Omitted counts problems found beyond the listing limit.
	Omitted int `json:"omittedProblems,omitempty"`
}

// OK reports whether no problem was found.
func (r *CheckReport) OK() bool { return len(r.Problems) == 0 }

// Err returns nil for a clean report, or an error wrapping ErrCorrupt
// that names the file and lists the problems.
func (r *CheckReport) Err() error {
	if r.OK() {
		return nil
	}
	var b bytes.Buffer
	for i, p := range r.Problems {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(p.String())
	}
	if r.Omitted > 0 {
		fmt.Fprintf(&b, "; and %d more", r.Omitted)
	}
	return corruptf(r.Path, "check of tx %d failed: %s", r.TxID, b.String())
}

const noPage = ^pgid(0)

type checker struct {
	db    *DB
	m     *meta
	seen  []byte   // per page below hwm: 0 not seen, 1 reachable, 2 free
	free  *freeSet // from the freelist log; nil if it could not be read
	depth map[uint32]int
	rep   *CheckReport
	limit int // problems listed; more are counted in rep.Omitted

	progress func(done, total int64)
	done     int64 // pages accounted for, for progress
	leafUsed int64
	leafCap  int64
}

func newChecker(db *DB, m *meta, limit int) *checker {
	return &checker{db: db, m: m, seen: make([]byte, m.hwm), depth: map[uint32]int{}, limit: limit,
		rep: &CheckReport{Path: db.path, PageSize: db.pageSize, TxID: m.txid, Pages: uint64(m.hwm),
			BucketKeys: map[string]uint64{}}}
}

// problem records a problem at page id (noPage: none).
func (c *checker) problem(id pgid, format string, args ...any) {
	if len(c.rep.Problems) >= c.limit {
		c.rep.Omitted++
		return
	}
	p := Problem{Page: -1, Offset: -1, What: fmt.Sprintf(format, args...)}
	if id != noPage {
		p.Page, p.Offset = int64(id), int64(id)*int64(c.db.pageSize)
	}
	c.rep.Problems = append(c.rep.Problems, p)
}

// problemErr records a read error, at its page when it names one.
func (c *checker) problemErr(err error) {
	var pe *PageError
	if errors.As(err, &pe) {
		c.problem(pgid(pe.Page), "%s", pe.Reason)
		return
	}
	msg := err.Error()
	if prefix := fmt.Sprintf("%v: %s: ", ErrCorrupt, c.db.path); len(msg) > len(prefix) && msg[:len(prefix)] == prefix {
		msg = msg[len(prefix):]
	}
	c.problem(noPage, "%s", msg)
}

func (c *checker) tick(n uint64) {
	c.done += int64(n)
	if c.progress != nil && (c.done>>12 != (c.done-int64(n))>>12) {
		c.progress(c.done, int64(c.m.hwm))
	}
}

// mark records a reachable run; it reports false if it was seen before.
func (c *checker) mark(id pgid, n uint64, what string) bool {
	ok := true
	for i := uint64(0); i < n; i++ {
		p := id + pgid(i)
		if p >= c.m.hwm {
			c.problem(id, "%s: page %d beyond hwm %d", what, p, c.m.hwm)
			return false
		}
		if c.seen[p] != 0 {
			c.problem(p, "%s: reachable more than once", what)
			ok = false
			continue
		}
		c.seen[p] = 1
		c.rep.InUseBytes += int64(c.db.pageSize)
		c.tick(1)
	}
	return ok
}

func (c *checker) run() error {
	c.check()
	return c.rep.Err()
}

func (c *checker) check() {
	db, r := c.db, c.rep
	c.mark(0, numMetaPages, "meta")
	r.MetaPages = numMetaPages
	fl, err := loadFreelist(db.path, c.m, db.pageSize, func(id pgid) ([]byte, error) { return db.verifyPage(id, c.m.hwm, false) })
	if err != nil {
		c.problemErr(err)
		r.FreeListUnreadable = true
	} else {
		c.free = fl.free
		for _, e := range fl.chain {
			c.mark(e.start, e.n, "freelist log")
			r.FreelistPages += e.n
		}
	}
	// The directory, then every bucket it names.
	type bk struct {
		name []byte
		root pgid
		id   uint32
	}
	var buckets []bk
	c.walk(c.m.root, rootBucketOwner, nil, nil, nil, 0, func(id pgid, flags uint32, k, v []byte) {
		root, bid, ok := decodeBucketHeader(v)
		if !ok || flags&elemFlagBucket == 0 {
			c.problem(id, "directory entry %q is not a bucket header", k)
			return
		}
		buckets = append(buckets, bk{append([]byte(nil), k...), root, bid})
	})
	r.Buckets = len(buckets)
	for _, b := range buckets {
		if b.root == 0 {
			c.problem(noPage, "bucket %q has no root page", b.name)
			continue
		}
		before := r.Keys
		c.walk(b.root, b.id, b.name, nil, nil, 0, nil)
		r.BucketKeys[string(b.name)] = r.Keys - before
	}
	if c.leafCap > 0 {
		r.LeafFill = float64(c.leafUsed) / float64(c.leafCap)
	}
	if c.free == nil {
		return
	}
	r.FreePages = c.free.count
	for _, e := range c.free.ext {
		for i := uint64(0); i < e.n; i++ {
			p := e.start + pgid(i)
			if p >= c.m.hwm {
				c.problem(noPage, "free page %d beyond hwm %d", p, c.m.hwm)
				continue
			}
			if c.seen[p] != 1 {
				c.tick(1)
			}
			c.seen[p] |= 2
		}
	}
	c.pageRuns(3, "both reachable and free")
	if r.TreeUnreadable {
		return
	}
	c.pageRuns(0, "neither reachable nor free (leaked)")
	// The quota counts hwm minus the free (and pending) pages; it must
	// be the bytes of what is reachable.
	if quota := (int64(c.m.hwm) - int64(c.free.count)) * int64(db.pageSize); quota != r.InUseBytes {
		c.problem(noPage, "bytes in use: the free list makes it %d (%d pages below hwm minus %d free), but the pages reachable from the meta hold %d",
			quota, c.m.hwm, c.free.count, r.InUseBytes)
	}
}

// pageRuns reports each run of consecutive pages whose seen state is
// state as one problem.
func (c *checker) pageRuns(state byte, what string) {
	for p := pgid(0); p < c.m.hwm; p++ {
		if c.seen[p] != state {
			continue
		}
		end := p + 1
		for end < c.m.hwm && c.seen[end] == state {
			end++
		}
		if end-p == 1 {
			c.problem(p, "page is %s", what)
		} else {
			c.problem(p, "pages %d-%d are %s", p, end-1, what)
		}
		p = end
	}
}

// walk checks the subtree at id, whose keys must lie in [lo, hi) and whose
// first key must equal first (when non-nil).
func (c *checker) walk(id pgid, owner uint32, bucket, lo, hi []byte, depth int, leafFn func(id pgid, flags uint32, k, v []byte)) {
	if depth > 64 {
		c.problem(id, "bucket %q: tree deeper than 64 levels", bucket)
		return
	}
	p, err := c.db.verifyPage(id, c.m.hwm, false)
	if err != nil {
		c.problemErr(err)
		// What lies below is unknown, so unreached pages prove no leak.
		c.rep.TreeUnreadable = true
		if id < c.m.hwm && c.seen[id] == 0 {
			c.seen[id] = 1
		}
		return
	}
	what := fmt.Sprintf("bucket %q", bucket)
	if bucket == nil {
		what = "bucket directory"
	}
	if !c.mark(id, 1+uint64(pgOverflow(p)), what) {
		return
	}
	c.rep.OverflowPages += uint64(pgOverflow(p))
	if pgOwner(p) != owner {
		c.problem(id, "%s: page owner %d, want %d", what, pgOwner(p), owner)
	}
	n := pgCount(p)
	inRange := func(k []byte, i int) {
		if lo != nil && bytes.Compare(k, lo) < 0 || hi != nil && bytes.Compare(k, hi) >= 0 {
			c.problem(id, "%s: element %d key %x outside [%x,%x)", what, i, k, lo, hi)
		}
	}
	switch pgFlags(p) {
	case flagLeaf, flagLeafPacked:
		c.rep.LeafPages++
		c.layout(id, p, what)
		if d, ok := c.depth[owner]; ok && d != depth {
			c.problem(id, "%s: leaf at depth %d, others at %d", what, depth, d)
		}
		c.depth[owner] = depth
		if n == 0 && depth > 0 {
			c.problem(id, "%s: empty non-root leaf", what)
		}
		var prev []byte
		for i := 0; i < n; i++ {
			f, v := leafValue(p, i)
			k := appendLeafKey(nil, p, i)
			if i == 0 && lo != nil && !bytes.Equal(k, lo) {
				c.problem(id, "%s: leaf first key %x differs from the parent's key %x", what, k, lo)
			}
			if i > 0 && bytes.Compare(prev, k) >= 0 {
				c.problem(id, "%s: element %d key %x not after the previous key %x", what, i, k, prev)
			}
			prev = k
			inRange(k, i)
			switch {
			case leafFn != nil:
				leafFn(id, f, k, v)
			case f&^elemFlagsCompressed != 0:
				c.problem(id, "%s: element %d has flags %#x", what, i, f)
			case f != 0:
				c.rep.CompressedValues++
				if _, err := c.db.inflatePage(p, i, f, v); err != nil {
					c.problem(id, "%s: %v", what, err)
				}
			}
		}
		if bucket != nil {
			c.rep.Keys += uint64(n)
		}
	case flagBranch:
		c.rep.BranchPages++
		c.layout(id, p, what)
		if n == 0 {
			c.problem(id, "%s: empty branch", what)
		}
		for i := 0; i < n; i++ {
			k, child := branchElem(p, i)
			if i == 0 && lo != nil && !bytes.Equal(k, lo) {
				c.problem(id, "%s: branch first key %x differs from the parent's key %x", what, k, lo)
			}
			inRange(k, i)
			var next []byte = hi
			if i+1 < n {
				next = branchKey(p, i+1)
				if bytes.Compare(k, next) >= 0 {
					c.problem(id, "%s: element %d key %x not before the next key %x", what, i, k, next)
					continue
				}
			}
			c.walk(child, owner, bucket, k, next, depth+1, leafFn)
		}
	default:
		c.problem(id, "%s: page has flags %#x, want leaf or branch", what, pgFlags(p))
	}
}

// layout checks that a tree page is laid out as node.write lays it out:
// the element array, then each element's key and value in element order
// with no gap or overlap, in the fewest pages that hold them. (There is
// no minimum fill: after deletes a page may hold little, as in bbolt, and
// the report gives the average leaf fill instead.)
func (c *checker) layout(id pgid, p []byte, what string) {
	n := pgCount(p)
	if pgFlags(p) == flagLeafPacked {
		c.packedLayout(id, p, what)
		return
	}
	leaf := pgFlags(p) == flagLeaf
	end := pageHeaderSize + n*elemSize
	for i := 0; i < n; i++ {
		e := p[pageHeaderSize+i*elemSize:]
		var pos, size int
		if leaf {
			pos, size = int(le.Uint32(e[4:])), int(le.Uint32(e[8:]))+int(le.Uint32(e[12:]))
		} else {
			pos, size = int(le.Uint32(e[0:])), int(le.Uint32(e[4:]))
		}
		if pos != end {
			c.problem(id, "%s: element %d data at byte %d of the page, want %d (elements are packed in order)", what, i, pos, end)
			return
		}
		end += size
	}
	ps := c.db.pageSize
	if pages, need := len(p)/ps, (end+ps-1)/ps; pages != need {
		c.problem(id, "%s: %d bytes of elements in a run of %d pages (want %d)", what, end, pages, need)
	}
	if leaf {
		c.leafUsed += int64(end)
		c.leafCap += int64(len(p))
	}
}

// packedLayout is layout for a packed leaf (packed.go): its prefix and
// suffix must be the ones node.write picks for its keys, so that a page
// the writer would lay out differently is reported.
func (c *checker) packedLayout(id pgid, p []byte, what string) {
	n := pgCount(p)
	end := int(le.Uint16(p[packedOffsets+2*n:]))
	c.leafUsed += int64(end)
	c.leafCap += int64(len(p))
	if n == 0 {
		return
	}
	inodes := make([]inode, n)
	for i := range inodes {
		in := &inodes[i]
		in.flags, in.value = leafValue(p, i)
		in.key = appendLeafKey(nil, p, i)
	}
	s := packedLayout(inodes)
	ml := int(p[packedOffMid])
	if ml == packedVariable {
		ml = -1
	}
	if pl, sl := int(p[pageHeaderSize]), int(p[pageHeaderSize+1]); pl != s.pl || sl != s.sl || ml != s.ml || end != s.size {
		c.problem(id, "%s: packed leaf with prefix %d suffix %d middles %d (-1: variable) and %d bytes, want %d, %d, %d and %d",
			what, pl, sl, ml, end, s.pl, s.sl, s.ml, s.size)
	}
}
