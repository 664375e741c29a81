package etcdsnap

// Reading etcd's database format (bbolt, version 2) without bbolt, for a
// member that receives an etcd leader's snapshot: the core module does not
// link bbolt. The reader is read-only and careful: every page it reads is
// checked (its id, its type, its element offsets inside the page, its
// overflow inside the file's high-water mark), a page met twice in one
// tree is a cycle, and every error names the file and the byte offset.
//
// The layout is the one bolt.go describes for the writer, read in bbolt's
// generality: any page size, free pages anywhere, branch pages at any
// depth, inline buckets (a bucket header with root 0 followed by the
// bucket's only leaf page) and overflow pages.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/strata-db/strata/membership"
	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/schema"
)

// ErrCorrupt marks an etcd database that cannot be read.
var ErrCorrupt = errors.New("etcdsnap: corrupt etcd database")

// BoltFile is an etcd database opened for reading.
type BoltFile struct {
	f        *os.File
	path     string
	size     int64
	pageSize int64
	hwm      uint64 // pages [0, hwm) are the file's
	root     uint64 // the page of the bucket tree's root
	txid     uint64
}

// OpenBolt opens the etcd database (bbolt) at path: the valid meta page
// with the larger transaction id decides the tree, as bbolt decides.
func OpenBolt(path string) (*BoltFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	b := &BoltFile{f: f, path: path, size: st.Size()}
	if err := b.readMeta(); err != nil {
		f.Close()
		return nil, err
	}
	return b, nil
}

// Close closes the file.
func (b *BoltFile) Close() error { return b.f.Close() }

// TxID is the transaction id of the meta page in use.
func (b *BoltFile) TxID() uint64 { return b.txid }

func (b *BoltFile) corrupt(off int64, format string, args ...any) error {
	return fmt.Errorf("%w: %s: offset %d: %s", ErrCorrupt, b.path, off, fmt.Sprintf(format, args...))
}

// readMeta picks the meta page bbolt would use.
func (b *BoltFile) readMeta() error {
	head := make([]byte, pageHeaderSize+64)
	if _, err := b.f.ReadAt(head, 0); err != nil {
		return b.corrupt(0, "too short for an etcd database (%d bytes)", b.size)
	}
	if schema.Detect(head) != schema.FormatEtcd {
		return b.corrupt(metaOffMagic, "not an etcd database (no bbolt magic)")
	}
	ps := int64(le.Uint32(head[metaOffPageSize:]))
	if ps < 1024 || ps > 1<<20 || ps&(ps-1) != 0 {
		return b.corrupt(metaOffPageSize, "page size %d is not a power of two between 1 KiB and 1 MiB", ps)
	}
	b.pageSize = ps
	var best []byte
	var problems []string
	for i := int64(0); i < 2; i++ {
		p := make([]byte, pageHeaderSize+64)
		if _, err := b.f.ReadAt(p, i*ps); err != nil {
			problems = append(problems, fmt.Sprintf("meta page %d (offset %d): %v", i, i*ps, err))
			continue
		}
		if why := checkMeta(p); why != "" {
			problems = append(problems, fmt.Sprintf("meta page %d (offset %d): %s", i, i*ps, why))
			continue
		}
		if best == nil || le.Uint64(p[metaOffTxid:]) > le.Uint64(best[metaOffTxid:]) {
			best = p
		}
	}
	if best == nil {
		return fmt.Errorf("%w: %s: no valid meta page: %v", ErrCorrupt, b.path, problems)
	}
	b.root = le.Uint64(best[metaOffRoot:])
	b.hwm = le.Uint64(best[metaOffPgid:])
	b.txid = le.Uint64(best[metaOffTxid:])
	if need := int64(b.hwm) * ps; b.hwm > uint64(b.size/ps) || need > b.size {
		return b.corrupt(b.size, "the file ends before its high-water mark (page %d, %d bytes of %d)", b.hwm, b.size, need)
	}
	if b.root < 2 || b.root >= b.hwm {
		return b.corrupt(metaOffRoot, "root page %d outside the file's pages [2, %d)", b.root, b.hwm)
	}
	return nil
}

// checkMeta returns why a meta page is invalid, or "".
func checkMeta(p []byte) string {
	if le.Uint16(p[offFlags:])&flagMeta == 0 {
		return fmt.Sprintf("not a meta page (flags %#x)", le.Uint16(p[offFlags:]))
	}
	if m := le.Uint32(p[metaOffMagic:]); m != schema.BoltMagic {
		return fmt.Sprintf("bad magic %#x", m)
	}
	if v := le.Uint32(p[metaOffVersion:]); v != boltVersion {
		return fmt.Sprintf("format version %d, want %d", v, boltVersion)
	}
	if got, want := le.Uint64(p[metaOffChecksum:]), metaChecksum(p); got != want {
		return fmt.Sprintf("checksum %#x, computed %#x", got, want)
	}
	return ""
}

// node is one page (with its overflow) or an inline bucket's page.
type node struct {
	buf  []byte
	off  int64 // the file offset of buf[0], for errors
	leaf bool
	n    int
}

// page reads page id with its overflow pages.
func (b *BoltFile) page(id uint64) (*node, error) {
	if id < 2 || id >= b.hwm {
		return nil, b.corrupt(int64(id)*b.pageSize, "page %d outside the file's pages [2, %d)", id, b.hwm)
	}
	off := int64(id) * b.pageSize
	head := make([]byte, pageHeaderSize)
	if _, err := b.f.ReadAt(head, off); err != nil {
		return nil, b.corrupt(off, "page %d: %v", id, err)
	}
	if got := le.Uint64(head[offID:]); got != id {
		return nil, b.corrupt(off, "page %d holds the id %d", id, got)
	}
	over := uint64(le.Uint32(head[offOverflow:]))
	if id+over >= b.hwm {
		return nil, b.corrupt(off, "page %d: %d overflow pages run past the high-water mark %d", id, over, b.hwm)
	}
	buf := make([]byte, int64(1+over)*b.pageSize)
	if _, err := b.f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
		return nil, b.corrupt(off, "page %d: %v", id, err)
	}
	return b.parse(buf, off, fmt.Sprintf("page %d", id))
}

// parse checks a node's header and that its element table fits.
func (b *BoltFile) parse(buf []byte, off int64, what string) (*node, error) {
	if len(buf) < pageHeaderSize {
		return nil, b.corrupt(off, "%s: %d bytes, shorter than a page header", what, len(buf))
	}
	flags := le.Uint16(buf[offFlags:])
	nd := &node{buf: buf, off: off, n: int(le.Uint16(buf[offCount:]))}
	switch {
	case flags&flagLeaf != 0:
		nd.leaf = true
	case flags&flagBranch != 0:
	default:
		return nil, b.corrupt(off, "%s: flags %#x, neither a branch nor a leaf", what, flags)
	}
	if pageHeaderSize+nd.n*leafElemSize > len(buf) {
		return nil, b.corrupt(off, "%s: %d elements do not fit in %d bytes", what, nd.n, len(buf))
	}
	return nd, nil
}

// leafElem returns element i of a leaf: flags, key, value.
func (b *BoltFile) leafElem(nd *node, i int) (uint32, []byte, []byte, error) {
	e := pageHeaderSize + i*leafElemSize
	flags := le.Uint32(nd.buf[e:])
	pos, ks, vs := int64(le.Uint32(nd.buf[e+4:])), int64(le.Uint32(nd.buf[e+8:])), int64(le.Uint32(nd.buf[e+12:]))
	start := int64(e) + pos
	if start+ks+vs > int64(len(nd.buf)) || ks == 0 {
		return 0, nil, nil, b.corrupt(nd.off+int64(e), "leaf element %d: key of %d and value of %d bytes at %d do not fit in %d bytes", i, ks, vs, pos, len(nd.buf))
	}
	return flags, nd.buf[start : start+ks], nd.buf[start+ks : start+ks+vs], nil
}

// branchChild returns the child page of element i of a branch.
func (b *BoltFile) branchChild(nd *node, i int) uint64 {
	return le.Uint64(nd.buf[pageHeaderSize+i*branchElemSize+8:])
}

// walk calls fn for every leaf element of the tree at root, in key order.
func (b *BoltFile) walk(root uint64, fn func(nd *node, i int) error) error {
	seen := map[uint64]bool{}
	var rec func(id uint64, depth int) error
	rec = func(id uint64, depth int) error {
		if seen[id] {
			return b.corrupt(int64(id)*b.pageSize, "page %d is reached twice: the tree has a cycle", id)
		}
		seen[id] = true
		if depth > 64 {
			return b.corrupt(int64(id)*b.pageSize, "page %d: the tree is deeper than 64", id)
		}
		nd, err := b.page(id)
		if err != nil {
			return err
		}
		return b.visit(nd, func(child uint64) error { return rec(child, depth+1) }, fn)
	}
	return rec(root, 0)
}

// visit walks one node: leaf elements to fn, branch children to down.
func (b *BoltFile) visit(nd *node, down func(uint64) error, fn func(nd *node, i int) error) error {
	for i := 0; i < nd.n; i++ {
		var err error
		if nd.leaf {
			err = fn(nd, i)
		} else {
			err = down(b.branchChild(nd, i))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// BoltBucket is a top-level bucket of an etcd database.
type BoltBucket struct {
	Name   []byte
	root   uint64 // 0 for an inline bucket
	inline []byte // the inline bucket's page
	off    int64
}

// Buckets lists the top-level buckets, in name order.
func (b *BoltFile) Buckets() ([]BoltBucket, error) {
	var out []BoltBucket
	err := b.walk(b.root, func(nd *node, i int) error {
		flags, k, v, err := b.leafElem(nd, i)
		if err != nil {
			return err
		}
		if flags&bucketLeafFlag == 0 {
			return b.corrupt(nd.off, "the root tree holds a plain key %q, which etcd never writes", k)
		}
		if len(v) < bucketHeaderSize {
			return b.corrupt(nd.off, "bucket %q: header of %d bytes", k, len(v))
		}
		bk := BoltBucket{Name: append([]byte(nil), k...), root: le.Uint64(v), off: nd.off}
		if bk.root == 0 {
			bk.inline = append([]byte(nil), v[bucketHeaderSize:]...)
		}
		out = append(out, bk)
		return nil
	})
	return out, err
}

// ForEach calls fn for every key and value of bucket bk, in key order,
// with the file offset of the record's leaf element (for fn's errors to
// name). The slices are valid only during the call.
func (b *BoltFile) ForEach(bk BoltBucket, fn func(k, v []byte, off int64) error) error {
	leafFn := func(nd *node, i int) error {
		flags, k, v, err := b.leafElem(nd, i)
		if err != nil {
			return err
		}
		if flags&bucketLeafFlag != 0 {
			return b.corrupt(nd.off, "bucket %q holds a nested bucket %q, which etcd never writes", bk.Name, k)
		}
		return fn(k, v, nd.off+int64(pageHeaderSize+i*leafElemSize))
	}
	if bk.root != 0 {
		return b.walk(bk.root, leafFn)
	}
	nd, err := b.parse(bk.inline, bk.off, fmt.Sprintf("inline bucket %q", bk.Name))
	if err != nil {
		return err
	}
	if !nd.leaf {
		return b.corrupt(bk.off, "inline bucket %q is not a leaf", bk.Name)
	}
	return b.visit(nd, func(uint64) error { return nil }, leafFn)
}

// convertBatchBytes bounds the data one page-store transaction of
// ToPageStore writes.
const convertBatchBytes = 16 << 20

// ToPageStore writes the etcd database at src as a Strata page store at
// dst (which must not exist): every bucket, record for record, in
// transactions of at most convertBatchBytes. Both formats hold etcd's
// schema, so the result is the same state: the key space, leases, auth,
// membership, alarms and the raft position (meta's consistent index and
// term). Only the membership's keys change: etcd names a member's
// records by its id in hex without leading zeros, Strata with all 16
// digits (membership.Key), under which it later updates and removes
// them. opts are the page store's (its file system, for tests that cut
// the power). progress, if not nil, sees the bytes copied so far.
func ToPageStore(src, dst string, opts *pagestore.Options, progress func(int64)) error {
	in, err := OpenBolt(src)
	if err != nil {
		return err
	}
	defer in.Close()
	buckets, err := in.Buckets()
	if err != nil {
		return err
	}
	out, err := pagestore.Open(dst, opts)
	if err != nil {
		return err
	}
	var done int64
	for _, bk := range buckets {
		var batch [][2][]byte
		size := 0
		flush := func() error {
			err := out.Update(func(tx *pagestore.Tx) error {
				b, err := tx.CreateBucketIfNotExists(bk.Name)
				if err != nil {
					return err
				}
				for _, kv := range batch {
					if err := b.Put(kv[0], kv[1]); err != nil {
						return fmt.Errorf("bucket %q, key %x: %w", bk.Name, kv[0], err)
					}
				}
				return nil
			})
			done += int64(size)
			batch, size = batch[:0], 0
			if progress != nil {
				progress(done)
			}
			return err
		}
		rekey := bytes.Equal(bk.Name, schema.Members) || bytes.Equal(bk.Name, schema.MembersRemoved)
		err := in.ForEach(bk, func(k, v []byte, off int64) error {
			if rekey {
				id, err := strconv.ParseUint(string(k), 16, 64)
				if err != nil {
					return in.corrupt(off, "bucket %q: member key %q is not a hex id", bk.Name, k)
				}
				k = membership.Key(id)
			}
			kv := make([]byte, len(k)+len(v))
			copy(kv, k)
			copy(kv[len(k):], v)
			batch = append(batch, [2][]byte{kv[:len(k):len(k)], kv[len(k):]})
			size += len(k) + len(v)
			if size >= convertBatchBytes {
				return flush()
			}
			return nil
		})
		if err == nil {
			err = flush() // also creates an empty bucket
		}
		if err != nil {
			out.Close()
			return err
		}
	}
	return out.Close()
}
