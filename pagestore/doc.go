// Package pagestore is Strata's page store: a single-file, mmap'd,
// copy-on-write B+tree with named buckets, in the spirit of bbolt and LMDB,
// built to remove four known bbolt pains: stop-the-world defrag, a quota on
// file size instead of live data, a freelist rewritten on every commit, and
// readers stalled behind a remap.
//
// # Using it
//
//	db, err := pagestore.Open(path, &pagestore.Options{MaxInUseBytes: 8 << 30})
//	err = db.Update(func(tx *pagestore.Tx) error {
//		b, err := tx.CreateBucketIfNotExists([]byte("key"))
//		if err != nil {
//			return err
//		}
//		return b.Put(rev, value)
//	})
//
// One writer and many readers run at once. A read transaction is a snapshot
// of the last commit; it never blocks and is never blocked by the writer.
// Byte slices returned by Get, cursors and ForEach point into the mapping
// (or into the writer's buffers) and are valid only until the transaction
// ends; copy them to keep them.
//
// # File format
//
// All integers are little-endian. The page size is the OS page size when
// the file is created and is recorded in the meta pages; the file is always
// a whole number of pages.
//
//	page 0       page 1       page 2 ...                                  hwm
//	+-----------+-----------+-------+-------+----------+-------+-- ... --+
//	| meta A    | meta B    | leaf  |branch | freelist | free  |         |
//	| (even tx) | (odd tx)  |       |       | record   |       |         |
//	+-----------+-----------+-------+-------+----------+-------+-- ... --+
//
// Every page (a "run" when it has overflow pages) starts with a 32-byte
// header, and its checksum covers the whole run after the checksum field:
//
//	0  checksum  u64  xxhash64 of bytes [8, (1+overflow)*pageSize)
//	8  id        u64  the page's own number (catches misdirected writes)
//	16 flags     u16  meta | leaf | packed leaf | branch | freelist
//	18 reserved  u16
//	20 count     u32  number of elements / extents
//	24 overflow  u32  extra pages that follow contiguously (large values)
//	28 owner     u32  bucket id for tree pages (verified by Tx.Check)
//
// Leaf elements (16 bytes each, after the header; key and value bytes are
// packed after the element array): flags u32 (1 = bucket header, 2 = value
// compressed with S2, 4 = value compressed with zstd; see compress.go),
// pos u32 (offset of the key from the page start), ksize u32, vsize u32
// (the stored, possibly compressed, size). Format version 1 files have no
// compressed values and are read as they are; a writer's first commit
// marks the file version 2.
//
// Packed leaves (flag 0x08, format version 3; packed.go has the layout):
// a leaf that fits in one page stores its keys' common prefix and suffix
// once and each element as a 2-byte offset, a 1-2 byte header, the key's
// middle and the value. A revision key then takes 2-3 bytes instead of
// 17 + 16, so a 4 KiB leaf holds 14 of etcd's 281-byte KeyValues instead
// of 13. Leaves that need an overflow run keep the 16-byte elements.
// Versions 1 and 2 have no packed leaves and are read as they are; the
// writer packs each leaf it rewrites, and its first commit marks the
// file version 3, so an older build refuses it rather than misread it.
// Branch elements: pos u32, ksize u32, child pgid u64. A branch key is the
// first key of its child subtree.
//
// Meta page (after the header): magic u32, version u32, page size u32,
// next bucket id u32, directory root pgid u64, newest freelist record pgid
// u64, hwm u64 (pages [0,hwm) are accounted for), txid u64. Meta slot
// txid%2 is written by transaction txid; Open picks the valid meta with the
// larger txid.
//
// The bucket directory is a B+tree of bucket name -> 16-byte header
// (root pgid u64, bucket id u32, reserved u32). Each bucket is its own
// B+tree of user keys.
//
// # Free space
//
// Free pages are kept in memory as a sorted set of extents plus, per
// committing transaction, the pages it freed ("pending" until no open reader
// can still see them: a page freed by transaction F is reusable once every
// open reader's snapshot is at least F). On disk the free set is an
// append-only log of freelist records chained backwards from the meta:
//
//	meta.flHead -> delta(T) -> delta(T-1) -> ... -> checkpoint(C)
//
// A delta record stores only what its transaction changed: the extents it
// took from the free set and the extents it freed, plus its hwm (and, when
// online defrag truncated the file, the lower hwm it cut to). A
// checkpoint stores the whole free set as extents. A commit therefore
// writes O(pages it touched) freelist bytes, independent of database size
// (bbolt rewrites the whole freelist each commit). Every checkpointEvery
// records, or when the deltas since the last checkpoint hold more extents
// than the checkpoint itself, the commit writes a fresh checkpoint and frees
// the old chain; the checkpoint costs O(free extents), amortised over the
// deltas it replaces, and it bounds Open to reading one checkpoint plus at
// most checkpointEvery records. Runs of free pages are stored as one
// extent, so even a large free space after compaction is a few KiB.
//
// Why a log and not a free-page B+tree: a tree keyed by page id would
// make every commit rewrite a path of freelist pages (plus the recursion of
// allocating pages for the freelist while changing it), while the log
// writes one small record whose size is proportional to the pages the
// commit touched. Replay at Open reads at most checkpointEvery records plus
// one checkpoint, bounded by the number of free extents, never by the
// database size. bbolt's NoFreelistSync instead scans the whole file at
// Open (seconds at 8 GB; see bench/RESULTS.md).
//
// # Quota
//
// Options.MaxInUseBytes limits bytes in use: hwm minus free and pending
// pages, i.e. the pages reachable from the new commit. It is checked at
// commit time, after the new pages are allocated; a transaction that put
// or created anything and would end above the quota fails with ErrNoSpace.
// Delete-only transactions are always allowed, and because freed pages are
// reused directly, deleting data makes room again without any defrag
// (etcd #14267).
//
// # Online defrag
//
// DB.Defrag (and DB.DefragStep) move live pages from the end of the file
// into free pages below it: a step finds, in a read transaction without
// the write lock, which tree pages lie above the target size (walking
// branch pages only), then in one small write transaction re-reads each
// one by key, marks it dirty, and commits; copy on write puts it into the
// lowest free page. When the free pages reach the end of the file the step
// lowers hwm (the freelist record carries the cut) and, after releasing
// the write lock, truncates the file. Readers never wait; the
// application's writer waits for at most one step. The batch size adapts
// so a step's own work stays around 5 ms (fdatasync time comes on top).
// The two halves are also exported: PlanDefrag (the read-transaction part,
// keeping only the highest pages it will move) and Tx.ApplyDefrag (the
// moves and the tail cut, inside any write transaction), so an application
// can fold defrag steps into commits it makes anyway, as Strata's mvcc
// backend does; a plan may be stale when applied, and pages rewritten
// meanwhile are skipped. A multi-page run (a large value) that reaches
// into the tail is moved only into a hole that takes it whole; when
// nothing can move and no reader holds freed pages, defrag is done.
// Offline, Compact copies every bucket in key order into a new file.
//
// # Preallocation
//
// With Options.Preallocate, a background goroutine keeps a zero-filled,
// synced region ahead of hwm (see prealloc.go), so commits overwrite
// initialized blocks and their fdatasync need not commit file-system
// metadata. The file is then somewhat larger than hwm; DB.Stats reports
// the file size. It is off by default: on a busy shared disk its extra
// fdatasyncs made commits wait more than they saved.
//
// # Checking
//
// Tx.Check verifies a snapshot completely (reachability exactly once,
// in-use plus free equals hwm, key order and bounds, branch keys equal
// child first keys, uniform leaf depth, tree pages laid out as the writer
// lays them out, every checksum recomputed). Options.StrictMode runs it
// after every commit, and also compares the writer's in-memory free space
// with the on-disk log; the tests run with it on. CheckFile runs the same
// checker on a file offline and read-only (stratautl db check), adds both
// meta pages, keeps going past an unreadable freelist log, and returns a
// report: each problem with its page and byte offset, and the file's
// shape (pages by kind, buckets, keys, bytes in use, free pages). The
// bytes-in-use figure is not stored; it is hwm minus the free pages, and
// the checker compares it with the pages it reached.
//
// # Crash safety
//
// Assumptions: fdatasync makes written data and the file size durable; a
// page-sized write may be torn (any prefix, or any mix of old and new
// sectors) if power fails during it; writes never touch bytes outside the
// range written.
//
// Commit order:
//
//  1. Write every new page (all to pages that are free in the last durable
//     commit, or beyond its hwm), coalescing adjacent pages into one pwrite.
//  2. fdatasync. After this every page reachable from the new meta is
//     durable.
//  3. Write the new meta into slot txid%2, which holds the meta of txid-2;
//     the meta of txid-1 in the other slot is untouched.
//  4. fdatasync. The commit is durable once this returns.
//
// A crash before step 3 leaves the previous meta as the newest valid one,
// and nothing it reaches was overwritten, because a transaction only writes
// pages that are free in the previous commit (and pages freed by a commit
// are not reused until that commit is durable and no reader sees them). A
// crash during step 3 tears at most the slot being written: its checksum
// fails and Open falls back to the other slot, the previous commit. A torn
// data page can only be one that the previous commit considers free, so it
// is never read. If step 4 fails the meta may or may not be durable; the DB
// rewrites the slot with its old content and syncs again, and if that fails
// too it refuses further writes (ErrFailed) until reopened.
//
// A new file is created by writing both metas, an empty directory root and
// an empty freelist checkpoint, fdatasync, then fsync of the parent
// directory so the file's name is durable. A file too short to hold those
// four pages with no valid meta is treated as an interrupted create and
// initialised again, but only if every byte it holds is the create's or
// zero; a database cut short is refused (ErrCorrupt, naming the file and
// its size). An empty file is a new database, as in bbolt.
//
// Writes go through pwrite on the vfs.File (never through the mapping,
// which is read-only), so vfs.FaultFS sees every write and sync. Readers
// verify each page's checksum and structure the first time this process
// reads it (a bitmap remembers verified pages; it is cleared when a page is
// rewritten), so corruption is reported as ErrCorrupt naming the file and
// page id instead of being followed. The writer is the exception for the
// pages the latest commit wrote: it keeps that commit's page buffers until
// the next commit and reads those pages from memory, since they are
// byte for byte what the commit wrote and synced (copy on write never
// rewrites a page the latest commit uses).
//
// # Mapping
//
// Open maps Options.MaxMapSize bytes of virtual address space read-only
// once. The file grows beneath the mapping with pwrite and ftruncate, so no
// reader ever waits for a remap. Truncation (online defrag) only removes
// pages that are free and released, which no reader can reach.
//
// # Locking
//
// Open takes an exclusive flock on the database file itself (vfs.FS.Lock on
// the db path), so a second Open, or stratautl defrag while a server runs,
// fails with ErrDatabaseLocked. Options.ReadOnly opens the file O_RDONLY
// and takes a shared flock on it instead: read-only opens (stratautl db
// check, wal verify) coexist with each other but not with a writer, in
// either order. They must not: the writer reuses pages that only its own
// readers are known not to see, so a reader in another process could read
// a page while it is being rewritten.
package pagestore

// Wire format: these values are written to disk. Never change them; a new
// format gets a new formatVersion and a migration.
const (
	magic         uint32 = 0x53545241 // "STRA"
	formatVersion uint32 = 3
	// oldestVersion is the oldest format Open reads. Version 1 had no
	// compressed values; a writer's first commit rewrites its meta as
	// version 2, after which an older build refuses the file instead of
	// misreading a compressed value. Version 3 added packed leaves, with
	// the same upgrade.
	oldestVersion uint32 = 1

	numMetaPages = 2

	pageHeaderSize = 32
	offChecksum    = 0
	offID          = 8
	offFlags       = 16
	offCount       = 20
	offOverflow    = 24
	offOwner       = 28

	flagBranch   uint16 = 0x01
	flagLeaf     uint16 = 0x02
	flagMeta     uint16 = 0x04
	flagFreelist uint16 = 0x10

	elemSize       = 16
	elemFlagBucket = 1
	// A value stored compressed (compress.go): with S2, or with zstd.
	// Format version 2 added them.
	elemFlagS2          = 2
	elemFlagZstd        = 4
	elemFlagsCompressed = elemFlagS2 | elemFlagZstd
	elemFlagsKnown      = elemFlagBucket | elemFlagsCompressed

	metaOffMagic      = 32
	metaOffVersion    = 36
	metaOffPageSize   = 40
	metaOffNextBucket = 44
	metaOffRoot       = 48
	metaOffFreelist   = 56
	metaOffHWM        = 64
	metaOffTxID       = 72
	metaEnd           = 80

	bucketHeaderSize = 16

	// Freelist record: header, then kind u32, nAlloc u32, nFreed u32,
	// reserved u32, prev pgid u64, txid u64, hwm u64, trunc u64, then
	// extents (start u64, length u64): nAlloc allocated, then nFreed
	// freed. A checkpoint has nAlloc 0 and lists the whole free set as
	// "freed". trunc (0: none) is the lowest hwm the transaction truncated
	// to before it allocated pages at the end again. Replay: drop free
	// pages >= trunc, remove alloc, add freed, drop free pages >= hwm.
	flOffKind       = 32
	flOffNAlloc     = 36
	flOffNFreed     = 40
	flOffPrev       = 48
	flOffTxID       = 56
	flOffHWM        = 64
	flOffTrunc      = 72
	flHeaderSize    = 80
	extentSize      = 16
	flKindCheckpt   = 1
	flKindDelta     = 2
	minPageSize     = 1024
	maxPageSize     = 64 << 10
	rootBucketOwner = 0
)

// Limits on keys and values.
const (
	// MaxKeySize is the largest key Put accepts.
	MaxKeySize = 32 << 10
	// MaxValueSize is the largest value Put accepts.
	MaxValueSize = (1 << 31) - 1
)
