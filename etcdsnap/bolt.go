package etcdsnap

import (
	"encoding/binary"
	"hash/fnv"

	"github.com/strata-db/strata/schema"
)

// bbolt's on-disk format, version 2, as bbolt v1.4 reads and writes it.
// Wire format, never change: these are facts about files etcd and bbolt
// open. All integers are little-endian (bbolt writes its structs in the
// machine's order; every platform etcd supports is little-endian).
const (
	// PageSize is the page size of the files written here: etcd's on
	// every platform it supports (the OS page size, 4096 on amd64 and
	// arm64).
	PageSize = 4096

	boltVersion = 2

	// Page header: id u64, flags u16, count u16, overflow u32.
	pageHeaderSize = 16
	offID          = 0
	offFlags       = 8
	offCount       = 10
	offOverflow    = 12

	flagBranch   = 0x01
	flagLeaf     = 0x02
	flagMeta     = 0x04
	flagFreelist = 0x10

	// Leaf element: flags u32, pos u32, ksize u32, vsize u32; pos is the
	// distance from the element itself to its key, the value follows the
	// key.
	leafElemSize = 16
	// Branch element: pos u32, ksize u32, child pgid u64.
	branchElemSize = 16
	// A leaf element with this flag is a bucket: its value is a bucket
	// header (root pgid u64, sequence u64), followed, when the root pgid
	// is 0, by the bucket's only leaf page ("inline" bucket).
	bucketLeafFlag   = 0x01
	bucketHeaderSize = 16

	// Meta, after the page header: magic u32, version u32, page size u32,
	// flags u32, root bucket header (16 bytes), freelist pgid u64, high
	// water mark pgid u64 (pages [0, pgid) are in use or free), txid u64,
	// then checksum u64: FNV-1a 64 over the meta from magic to txid.
	metaOffMagic    = pageHeaderSize + 0
	metaOffVersion  = pageHeaderSize + 4
	metaOffPageSize = pageHeaderSize + 8
	metaOffFlags    = pageHeaderSize + 12
	metaOffRoot     = pageHeaderSize + 16
	metaOffFreelist = pageHeaderSize + 32
	metaOffPgid     = pageHeaderSize + 40
	metaOffTxid     = pageHeaderSize + 48
	metaOffChecksum = pageHeaderSize + 56

	// Page ids of this layout's fixed pages. Meta page i is written by
	// the transactions whose id is i modulo 2.
	pgidMeta0    = 0
	pgidMeta1    = 1
	pgidFreelist = 2
	pgidFirst    = 3 // the first page of the trees

	// Limits bbolt enforces on what it writes (and so may assume when it
	// reads): keys are 1 to 32768 bytes, values at most 2^31-2 bytes, a
	// page holds fewer than 0xFFFF elements. A bucket is stored inline when
	// its only leaf is at most a quarter page.
	maxKeySize   = 32768
	maxValueSize = 1<<31 - 2
	maxElems     = 0xFFFF - 1
	maxInline    = PageSize / 4
)

var le = binary.LittleEndian

// putPageHeader writes a page header at the start of p.
func putPageHeader(p []byte, id uint64, flags uint16, count int, overflow int64) {
	le.PutUint64(p[offID:], id)
	le.PutUint16(p[offFlags:], flags)
	le.PutUint16(p[offCount:], uint16(count))
	le.PutUint32(p[offOverflow:], uint32(overflow))
}

// metaPage returns meta page id (0 or 1) of a file whose root tree has
// its root at root and whose high-water mark is hwm.
func metaPage(id, root, hwm uint64) []byte {
	p := make([]byte, PageSize)
	putPageHeader(p, id, flagMeta, 0, 0)
	le.PutUint32(p[metaOffMagic:], schema.BoltMagic)
	le.PutUint32(p[metaOffVersion:], boltVersion)
	le.PutUint32(p[metaOffPageSize:], PageSize)
	le.PutUint32(p[metaOffFlags:], 0)
	le.PutUint64(p[metaOffRoot:], root)
	le.PutUint64(p[metaOffRoot+8:], 0) // the root bucket's sequence
	le.PutUint64(p[metaOffFreelist:], pgidFreelist)
	le.PutUint64(p[metaOffPgid:], hwm)
	le.PutUint64(p[metaOffTxid:], id) // txid % 2 names the slot
	le.PutUint64(p[metaOffChecksum:], metaChecksum(p))
	return p
}

// metaChecksum is the checksum bbolt stores in meta page p: FNV-1a 64
// over the meta from magic to txid.
func metaChecksum(p []byte) uint64 {
	h := fnv.New64a()
	h.Write(p[metaOffMagic:metaOffChecksum])
	return h.Sum64()
}

// freelistPage returns the (empty) freelist page: no page below the
// high-water mark is free, because the layout wastes none.
func freelistPage() []byte {
	p := make([]byte, PageSize)
	putPageHeader(p, pgidFreelist, flagFreelist, 0, 0)
	return p
}

// pagesFor is the number of pages a node of size bytes occupies: one,
// plus overflow pages that follow it contiguously.
func pagesFor(size int64) int64 { return (size + PageSize - 1) / PageSize }
