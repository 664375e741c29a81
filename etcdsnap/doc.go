// Package etcdsnap writes etcd's snapshot.db: the file 'etcdctl snapshot
// save' produces and 'etcdutl snapshot status' and 'etcdutl snapshot
// restore' read, a bbolt database in etcd's schema followed by its
// SHA-256. Strata's Maintenance.Snapshot streams it from one read view of
// the page store while the server keeps serving, and 'stratautl snapshot
// export-etcd' writes it offline; both go through PlanEtcd and
// Snapshot.WriteTo. The writer is our own: the core module does not link
// bbolt (its tests open every file written here with the real bbolt and
// run tx.Check).
//
// # The file
//
// A bbolt file (format version 2) of 4096-byte pages, then 32 bytes:
//
//	page 0      page 1      page 2     page 3 ...           page hwm-1
//	+----------+----------+----------+------------------+--------------+
//	| meta     | meta     | freelist | bucket tree      | buckets ...  | SHA-256 of
//	| txid 0   | txid 1   | (empty)  | (root last)      | in name order| pages 0..hwm-1
//	+----------+----------+----------+------------------+--------------+
//
// Every page starts with a 16-byte header: id u64, flags u16 (branch 1,
// leaf 2, meta 4, freelist 0x10), count u16, overflow u32 (the pages that
// follow as part of this node). All integers are little-endian.
//
//   - Meta (pages 0 and 1, identical but for txid and checksum): magic
//     0xED0CDAED, version 2, page size, flags 0, the root bucket header
//     (the bucket tree's root page, sequence 0), freelist page 2, the
//     high-water mark hwm (the page count of the file), txid (0 on page 0,
//     1 on page 1: bbolt writes meta txid%2), and an FNV-1a 64 checksum of
//     the fields before it. bbolt opens the valid meta with the larger
//     txid.
//   - Freelist (page 2): count 0. Every page below hwm is in use.
//   - Leaf: count elements (flags u32, pos u32, ksize u32, vsize u32; pos
//     counts from the element to its key, the value follows the key), then
//     the keys and values in element order.
//   - Branch: count elements (pos u32, ksize u32, child pgid u64), then the
//     keys; each key is the first key of its child.
//   - The bucket tree maps each bucket name (leaf flag 1) to a 16-byte
//     bucket header (root pgid u64, sequence u64). A bucket whose records
//     fit a leaf of at most a quarter page is inline: root pgid 0, and its
//     leaf page (page id 0) follows the header in the value. bbolt stores
//     small buckets so, and etcd's own snapshots have their small buckets
//     (meta, cluster, members, the empty ones) inline.
//
// # Layout: two passes over one read view
//
// The file must be streamed without being built first, on disk or in
// memory, yet a bucket's header (in the bucket tree, near the start) names
// its root page, and the meta names the page count, which depend on every
// record. So the writer reads the records twice, from the same read
// transaction, which sees the same records both times:
//
//  1. Plan: for every bucket, the records are cut into leaves by
//     leafPacker (in key order, as many as fit one page; a record larger
//     than a page alone on a leaf with overflow pages), and the leaves
//     into branch levels by branchPlan (children in order while they fit
//     a page, at least two per node), which needs only each leaf's first
//     key length. The plan keeps one child count per branch node (about
//     one per hundred leaves) and the page counts; small buckets are kept
//     (a quarter page each) to be written inline. The bucket tree is
//     planned the same way from the bucket headers' sizes, then page ids
//     are handed out: the bucket tree from page 3, then each bucket that
//     is not inline, in name order.
//  2. Write: the meta pages, the freelist, the bucket tree (whose values
//     are now known) and every bucket, in page-id order. Each tree is
//     written in post-order: a leaf as soon as it is full, and a branch
//     node right after its last child, so the writer holds one open leaf
//     and one open branch node per level, and a tree's root is its last
//     page. The same leafPacker cuts the same leaves; the writer checks
//     every tree ends on the page the plan said, and fails with ErrChanged
//     otherwise rather than write an inconsistent file.
//
// Memory is a few words per bucket and per branch node (0.1% of the
// leaves' count), the open leaf and one open branch node per level, never
// the database's records; bytes go out through a 64 KiB buffer and the
// SHA-256 is computed on the way. Values are not copied into pages: a
// leaf's header and elements are built, then its keys and values are
// written from where the read transaction holds them.
//
// # What bbolt requires, and how the layout meets it
//
//   - Keys are 1 to 32768 bytes and strictly increasing in a bucket;
//     values at most 2^31-2 bytes (checked; ErrInvalid otherwise).
//   - A page holds fewer than 0xFFFF elements (a 4 KiB leaf holds at most
//     240).
//   - tx.Check: every page below hwm is reachable exactly once or free
//     (the layout has no free page); each branch key is the first key of
//     its child; keys are ordered within and across pages.
//   - Branch nodes have at least two children, leaves at least one record
//     (bbolt's minimum keys per node); an empty bucket is inline. A node
//     larger than a page (a large value, keys near the 32 KiB limit) gets
//     overflow pages, as bbolt gives it.
//
// # etcd's schema
//
// PlanEtcd presents a page store's read view in etcd 3.7's schema (see
// there); the file is what etcd 3.7.3's own 'snapshot save' gives for the
// same data, up to page layout.
package etcdsnap
