// Package btreeidx is Strata's in-memory index: a generic copy-on-write
// B-tree (BTree) and, on top of it, the MVCC key index (Index) that maps
// each user key to the revisions of its generations.
//
// # BTree
//
// BTree[T] is an ordered set with point operations, ordered walks in both
// directions (Ascend*, Descend*, All, Backward), a bidirectional cursor
// (Iter: First, Last, SeekGE, SeekLE, Next, Prev) and an O(1) Clone. Clone
// shares every node; each tree carries an ownership token stamped on the
// nodes it created since its last Clone, and a tree writes only nodes that
// carry its token, copying any other node (and so the path above it) first.
// The ownership rule is on the BTree type.
//
// # Index
//
// Index follows etcd's key index exactly, because clients (kube-apiserver
// above all) depend on the observable results:
//
//   - A revision is (main, sub): main is the store revision of a write
//     transaction, sub orders the changes inside it.
//   - A key's history is a list of generations. A generation starts with the
//     put that creates the key (its create_revision), continues with each
//     put, and ends with the tombstone of a delete. The next put after a
//     delete starts a new generation, so create_revision resets and version
//     restarts at 1.
//   - version is the number of puts in the current generation, 1 on create.
//   - A read at revision R returns, from the generation live at R, the
//     newest revision <= R. A read in the gap between a tombstone and the
//     next create (or before the first create) finds nothing.
//   - Compact(R) keeps exactly what reads at revisions >= R need: for each
//     key, generations that ended before R are dropped, and in the
//     generation live at R every revision older than the newest one <= R is
//     dropped. The revisions <= R that stay are returned, so the store can
//     delete every other record <= R. A tombstone at exactly R stays, as in
//     etcd (its record is the delete event of revision R itself), and goes at
//     the next compaction above R.
//   - Keep(R) is the set Compact(R) would return, less such tombstones; it
//     is what HashKV hashes at or below the compact revision.
//
// Ranges use etcd's range_end conventions: a nil end is the single key, an
// end of "\x00" (or empty and non-nil) is every key >= key, and otherwise the
// range is [key, end).
//
// # Base
//
// An Index may rest on a Base (base.go): a read-only, mapped file holding
// every key's history as of one revision, so that a store need neither
// hold all its keys in memory nor rebuild them from its records when it
// opens. The tree then holds only what changed since the base was
// written; a tree entry for a key hides the base's, and a "gone" entry
// says the key's history was compacted away. A read looks in the tree,
// then in the base; a write reads the base's entry into the tree first.
// A range walks the two in key order. A base entry it passes is decoded
// into one scratch entry, or, for a read at or after the key's last
// change (what most reads are: the base's keys changed before the base
// was written), not decoded at all: the answer is the key's last
// generation, read off the encoding (peekAt).
//
// A compaction must not walk the base's keys, or its cost would follow
// the live data again. The base carries a schedule: for each revision it
// holds, the compaction revision at and above which that revision is
// garbage. A compaction reads in only the keys scheduled to lose
// something in (last compaction, rev], then walks the tree.
//
// A new base is written from a Clone (WriteBase) while writes go on, then
// swapped in with ReplaceBase, which drops from the tree the entries that
// have not changed since the Clone. Which file goes with which store is
// the caller's business: WriteBase records a token the caller chooses and
// Base.Token hands it back.
//
// Concurrency is documented on Index: writes from one apply goroutine in
// revision order, reads from anywhere, and Clone for long reads.
package btreeidx
