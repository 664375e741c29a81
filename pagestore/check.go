package pagestore

import (
	"bytes"
	"errors"
	"fmt"
)

// Check verifies the whole snapshot this transaction sees and returns an
// error wrapping ErrCorrupt describing every problem found (up to a
// limit). It checks that every page below the high-water mark is either
// reachable exactly once (meta, tree and freelist-log pages) or free
// according to the freelist log, never both; that every checksum is valid
// (recomputed, ignoring the verified-page cache); that keys are sorted
// within pages and within the bounds their parent gives; that each branch
// key equals its child's first key; and that all leaves of a tree are at
// the same depth. It costs O(database size).
func (tx *Tx) Check() error {
	if err := tx.check(false); err != nil {
		return err
	}
	if tx.writable {
		return errors.New("pagestore: Check needs a read transaction")
	}
	c := newChecker(tx.db, &tx.meta)
	return c.run()
}

// checkLatest checks the latest commit, and also that the writer's
// in-memory free set and pending pages match the on-disk freelist. The
// caller holds writeMu.
func (db *DB) checkLatest() error {
	m := db.meta.Load()
	c := newChecker(db, m)
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

type checker struct {
	db    *DB
	m     *meta
	seen  []byte
	errs  []string
	free  *freeSet
	depth map[uint32]int
}

func newChecker(db *DB, m *meta) *checker {
	return &checker{db: db, m: m, seen: make([]byte, m.hwm), depth: map[uint32]int{}}
}

func (c *checker) errorf(format string, args ...any) {
	if len(c.errs) < 20 {
		c.errs = append(c.errs, fmt.Sprintf(format, args...))
	}
}

// mark records a reachable run; it reports false if it was seen before.
func (c *checker) mark(id pgid, n uint64, what string) bool {
	ok := true
	for i := uint64(0); i < n; i++ {
		p := id + pgid(i)
		if p >= c.m.hwm {
			c.errorf("%s: page %d beyond hwm %d", what, p, c.m.hwm)
			return false
		}
		if c.seen[p] != 0 {
			c.errorf("%s: page %d reachable more than once", what, p)
			ok = false
		}
		c.seen[p] = 1
	}
	return ok
}

func (c *checker) run() error {
	db := c.db
	c.mark(0, 2, "meta")
	fl, err := loadFreelist(db.path, c.m, db.pageSize, func(id pgid) ([]byte, error) { return db.verifyPage(id, c.m.hwm, false) })
	if err != nil {
		return err
	}
	c.free = fl.free
	for _, e := range fl.chain {
		c.mark(e.start, e.n, "freelist log")
	}
	// The directory, then every bucket it names.
	type bk struct {
		name []byte
		root pgid
		id   uint32
	}
	var buckets []bk
	c.walk(c.m.root, rootBucketOwner, nil, nil, nil, 0, func(flags uint32, k, v []byte) {
		root, id, ok := decodeBucketHeader(v)
		if !ok || flags&elemFlagBucket == 0 {
			c.errorf("directory entry %q is not a bucket header", k)
			return
		}
		buckets = append(buckets, bk{append([]byte(nil), k...), root, id})
	})
	for _, b := range buckets {
		if b.root == 0 {
			c.errorf("bucket %q has no root page", b.name)
			continue
		}
		c.walk(b.root, b.id, b.name, nil, nil, 0, nil)
	}
	for _, e := range c.free.ext {
		for i := uint64(0); i < e.n; i++ {
			p := e.start + pgid(i)
			if p >= c.m.hwm {
				c.errorf("free page %d beyond hwm %d", p, c.m.hwm)
				continue
			}
			if c.seen[p] == 1 {
				c.errorf("page %d is both reachable and free", p)
			}
			c.seen[p] = 2
		}
	}
	for p := pgid(0); p < c.m.hwm; p++ {
		if c.seen[p] == 0 {
			c.errorf("page %d is neither reachable nor free (leaked)", p)
		}
	}
	if len(c.errs) > 0 {
		return corruptf(db.path, "check of tx %d failed: %s", c.m.txid, joinErrs(c.errs))
	}
	return nil
}

func joinErrs(errs []string) string {
	var b bytes.Buffer
	for i, e := range errs {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(e)
	}
	return b.String()
}

// walk checks the subtree at id, whose keys must lie in [lo, hi) and whose
// first key must equal first (when non-nil).
func (c *checker) walk(id pgid, owner uint32, bucket, lo, hi []byte, depth int, leafFn func(flags uint32, k, v []byte)) {
	if depth > 64 {
		c.errorf("bucket %q: tree deeper than 64 levels at page %d", bucket, id)
		return
	}
	p, err := c.db.verifyPage(id, c.m.hwm, false)
	if err != nil {
		c.errorf("bucket %q: %v", bucket, err)
		return
	}
	if !c.mark(id, 1+uint64(pgOverflow(p)), fmt.Sprintf("bucket %q", bucket)) {
		return
	}
	if pgOwner(p) != owner {
		c.errorf("bucket %q: page %d owner %d, want %d", bucket, id, pgOwner(p), owner)
	}
	n := pgCount(p)
	inRange := func(k []byte, i int) {
		if lo != nil && bytes.Compare(k, lo) < 0 || hi != nil && bytes.Compare(k, hi) >= 0 {
			c.errorf("bucket %q: page %d element %d key %x outside [%x,%x)", bucket, id, i, k, lo, hi)
		}
	}
	switch pgFlags(p) {
	case flagLeaf:
		if d, ok := c.depth[owner]; ok && d != depth {
			c.errorf("bucket %q: leaf %d at depth %d, others at %d", bucket, id, depth, d)
		}
		c.depth[owner] = depth
		if n == 0 && depth > 0 {
			c.errorf("bucket %q: empty non-root leaf %d", bucket, id)
		}
		for i := 0; i < n; i++ {
			f, k, v := leafElem(p, i)
			if i == 0 && lo != nil && !bytes.Equal(k, lo) {
				c.errorf("bucket %q: leaf %d first key %x differs from parent key %x", bucket, id, k, lo)
			}
			inRange(k, i)
			if leafFn != nil {
				leafFn(f, k, v)
			} else if f != 0 {
				c.errorf("bucket %q: page %d element %d has flags %#x", bucket, id, i, f)
			}
		}
	case flagBranch:
		if n == 0 {
			c.errorf("bucket %q: empty branch %d", bucket, id)
		}
		for i := 0; i < n; i++ {
			k, child := branchElem(p, i)
			if i == 0 && lo != nil && !bytes.Equal(k, lo) {
				c.errorf("bucket %q: branch %d first key %x differs from parent key %x", bucket, id, k, lo)
			}
			inRange(k, i)
			var next []byte = hi
			if i+1 < n {
				next = branchKey(p, i+1)
			}
			c.walk(child, owner, bucket, k, next, depth+1, leafFn)
		}
	default:
		c.errorf("bucket %q: page %d has flags %#x, want leaf or branch", bucket, id, pgFlags(p))
	}
}
