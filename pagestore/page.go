package pagestore

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/cespare/xxhash/v2"
)

// pgid is a page number; the byte offset of page id is id*pageSize.
type pgid uint64

var le = binary.LittleEndian

// Page header accessors. p is the whole page run (first page plus its
// overflow pages).
func pgChecksum(p []byte) uint64 { return le.Uint64(p[offChecksum:]) }
func pgID(p []byte) pgid         { return pgid(le.Uint64(p[offID:])) }
func pgFlags(p []byte) uint16    { return le.Uint16(p[offFlags:]) }
func pgCount(p []byte) int       { return int(le.Uint32(p[offCount:])) }
func pgOverflow(p []byte) uint32 { return le.Uint32(p[offOverflow:]) }
func pgOwner(p []byte) uint32    { return le.Uint32(p[offOwner:]) }

func putHeader(p []byte, id pgid, flags uint16, count int, overflow uint32, owner uint32) {
	le.PutUint64(p[offID:], uint64(id))
	le.PutUint16(p[offFlags:], flags)
	le.PutUint16(p[offFlags+2:], 0)
	le.PutUint32(p[offCount:], uint32(count))
	le.PutUint32(p[offOverflow:], overflow)
	le.PutUint32(p[offOwner:], owner)
}

// sealPage writes the checksum of the run p. It must be the last change.
func sealPage(p []byte) { le.PutUint64(p[offChecksum:], xxhash.Sum64(p[offID:])) }

// Leaf element i of page p: flags, key, value.
func leafElem(p []byte, i int) (flags uint32, k, v []byte) {
	e := p[pageHeaderSize+i*elemSize:]
	flags = le.Uint32(e[0:])
	pos := le.Uint32(e[4:])
	ks := le.Uint32(e[8:])
	vs := le.Uint32(e[12:])
	k = p[pos : pos+ks : pos+ks]
	v = p[pos+ks : pos+ks+vs : pos+ks+vs]
	return
}

func leafKey(p []byte, i int) []byte {
	e := p[pageHeaderSize+i*elemSize:]
	pos := le.Uint32(e[4:])
	return p[pos : pos+le.Uint32(e[8:])]
}

// Branch element i of page p: key and child page.
func branchElem(p []byte, i int) (k []byte, child pgid) {
	e := p[pageHeaderSize+i*elemSize:]
	pos := le.Uint32(e[0:])
	ks := le.Uint32(e[4:])
	return p[pos : pos+ks : pos+ks], pgid(le.Uint64(e[8:]))
}

func branchKey(p []byte, i int) []byte {
	e := p[pageHeaderSize+i*elemSize:]
	pos := le.Uint32(e[0:])
	return p[pos : pos+le.Uint32(e[4:])]
}

// validatePage checks the structure of a tree or freelist page run whose
// checksum already matched: every element must lie inside the run. With
// this done once per page, the accessors above can index without checks.
func validatePage(p []byte, hwm pgid) error {
	flags := pgFlags(p)
	n := pgCount(p)
	switch flags {
	case flagLeaf, flagBranch:
		if n < 0 || pageHeaderSize+n*elemSize > len(p) {
			return fmt.Errorf("element count %d does not fit", n)
		}
		// Bounds only: they are what keeps the accessors from faulting.
		// Key order is the checker's job (Tx.Check), not every read's.
		for i := 0; i < n; i++ {
			e := p[pageHeaderSize+i*elemSize:]
			var pos, ks, vs uint64
			if flags == flagLeaf {
				if f := le.Uint32(e[0:]); f&^elemFlagsKnown != 0 || f&elemFlagsCompressed == elemFlagsCompressed ||
					f&elemFlagBucket != 0 && f&elemFlagsCompressed != 0 {
					return fmt.Errorf("element %d has flags %#x", i, f)
				}
				pos, ks, vs = uint64(le.Uint32(e[4:])), uint64(le.Uint32(e[8:])), uint64(le.Uint32(e[12:]))
			} else {
				pos, ks = uint64(le.Uint32(e[0:])), uint64(le.Uint32(e[4:]))
				if c := pgid(le.Uint64(e[8:])); c < numMetaPages || c >= hwm {
					return fmt.Errorf("element %d: child page %d out of range [2,%d)", i, c, hwm)
				}
			}
			if pos < uint64(pageHeaderSize+n*elemSize) || pos+ks+vs > uint64(len(p)) {
				return fmt.Errorf("element %d out of bounds (pos %d key %d value %d)", i, pos, ks, vs)
			}
		}
	case flagLeafPacked:
		return validatePacked(p)
	case flagFreelist:
		if n < 0 || flHeaderSize+n*extentSize > len(p) {
			return fmt.Errorf("freelist extent count %d does not fit", n)
		}
	default:
		return fmt.Errorf("unexpected page flags %#x", flags)
	}
	return nil
}

// meta is the decoded content of a meta page.
type meta struct {
	pageSize     uint32
	root         pgid   // root page of the bucket directory tree
	flHead       pgid   // newest freelist log record (0: none)
	hwm          pgid   // high-water mark: pages [0,hwm) are in use or free
	txid         uint64 // transaction that wrote this meta
	nextBucketID uint32
}

func (m *meta) encode(p []byte, slot pgid) {
	clear(p)
	putHeader(p, slot, flagMeta, 0, 0, 0)
	le.PutUint32(p[metaOffMagic:], magic)
	le.PutUint32(p[metaOffVersion:], formatVersion)
	le.PutUint32(p[metaOffPageSize:], m.pageSize)
	le.PutUint32(p[metaOffNextBucket:], m.nextBucketID)
	le.PutUint64(p[metaOffRoot:], uint64(m.root))
	le.PutUint64(p[metaOffFreelist:], uint64(m.flHead))
	le.PutUint64(p[metaOffHWM:], uint64(m.hwm))
	le.PutUint64(p[metaOffTxID:], m.txid)
	sealPage(p)
}

// decodeMeta parses and validates meta slot `slot` from buf, which holds at
// least metaEnd bytes of the page; the page size comes from the meta itself.
func decodeMeta(buf []byte, slot pgid) (*meta, error) {
	if len(buf) < metaEnd {
		return nil, fmt.Errorf("short meta page (%d bytes)", len(buf))
	}
	if le.Uint32(buf[metaOffMagic:]) != magic {
		return nil, fmt.Errorf("bad magic %#x", le.Uint32(buf[metaOffMagic:]))
	}
	if v := le.Uint32(buf[metaOffVersion:]); v < oldestVersion || v > formatVersion {
		return nil, fmt.Errorf("unsupported format version %d (this build reads %d to %d)", v, oldestVersion, formatVersion)
	}
	ps := le.Uint32(buf[metaOffPageSize:])
	if ps < minPageSize || ps > maxPageSize || ps&(ps-1) != 0 {
		return nil, fmt.Errorf("bad page size %d", ps)
	}
	if int(ps) > len(buf) {
		return nil, fmt.Errorf("short meta page (%d bytes, page size %d)", len(buf), ps)
	}
	p := buf[:ps]
	if got, want := xxhash.Sum64(p[offID:]), pgChecksum(p); got != want {
		return nil, fmt.Errorf("meta checksum mismatch (stored %#x, computed %#x)", want, got)
	}
	if pgID(p) != slot || pgFlags(p) != flagMeta {
		return nil, fmt.Errorf("meta header names page %d flags %#x", pgID(p), pgFlags(p))
	}
	m := &meta{
		pageSize:     ps,
		root:         pgid(le.Uint64(p[metaOffRoot:])),
		flHead:       pgid(le.Uint64(p[metaOffFreelist:])),
		hwm:          pgid(le.Uint64(p[metaOffHWM:])),
		txid:         le.Uint64(p[metaOffTxID:]),
		nextBucketID: le.Uint32(p[metaOffNextBucket:]),
	}
	if m.hwm > pgid(math.MaxInt64/int64(ps)) {
		// Its byte size would overflow an int64: no file is that long.
		return nil, fmt.Errorf("meta hwm %d pages of %d bytes is beyond any file", m.hwm, ps)
	}
	if m.hwm < numMetaPages+1 || m.root < numMetaPages || m.root >= m.hwm || m.flHead >= m.hwm || (m.flHead != 0 && m.flHead < numMetaPages) {
		return nil, fmt.Errorf("meta fields out of range (root %d freelist %d hwm %d)", m.root, m.flHead, m.hwm)
	}
	return m, nil
}

// Bucket header: the value stored under a bucket's name in the directory.
func encodeBucketHeader(root pgid, id uint32) []byte {
	b := make([]byte, bucketHeaderSize)
	le.PutUint64(b[0:], uint64(root))
	le.PutUint32(b[8:], id)
	return b
}

func decodeBucketHeader(v []byte) (root pgid, id uint32, ok bool) {
	if len(v) != bucketHeaderSize {
		return 0, 0, false
	}
	return pgid(le.Uint64(v[0:])), le.Uint32(v[8:]), true
}
