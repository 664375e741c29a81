// Package mvcc is Strata's revision-keyed multi-version store, with etcd's
// semantics: one global revision, (main, sub) revisions per change,
// generations per key, compaction, and etcd's Range/Put/DeleteRange/Txn
// request rules (kv.go), shared by the server and the tests.
//
// # Layout
//
// The page store holds the data in etcd's schema, so snapshots convert to
// and from etcd's without re-keying:
//
//	bucket "key":  main u64 BE | '_' | sub u64 BE [| 't' for a tombstone]
//	               -> marshaled mvccpb.KeyValue (for a tombstone: the key only)
//	bucket "meta": consistent_index -> u64 BE, term -> u64 BE,
//	               scheduledCompactRev / finishedCompactRev -> revision key
//
// and, Strata's own and derived from the key bucket (left out of etcd
// snapshots, rebuilt when absent; revmeta.go):
//
//	bucket "strata_revmeta": each key of "key" -> crc u32 LE, record
//	               length, create revision, version, lease (uvarints),
//	               user key; "complete" -> a random 16-byte token once it
//	               covers every record
//
// The key index (btreeidx) maps each user key to its generations. It rests
// on a base file beside the page store (StoreConfig.IndexBase, the
// server's member/snap/db.index; indexbase.go): the index as of one
// revision, mapped read-only, written again as writes and compactions
// accumulate. Opening reads only the revision metadata written after the
// base; without a base (none yet, or one that does not go with the page
// store), it reads the metadata of every record, which is a small
// fraction of the records' bytes.
//
// # Writes and the consistent index
//
// The apply goroutine applies one raft entry at a time. Its writes go into
// the Backend's current batch together with the entry's index; the batch
// is committed to the page store every BatchInterval (100 ms) or
// BatchLimit (10000) writes, in one page-store transaction that also
// stores the consistent index. So the page store always holds exactly the
// effects of entries up to its consistent index: on restart, raft replays
// the WAL from the next index, and applying is idempotent by index.
// Requests that fail (a compacted revision, a missing lease) still advance
// the consistent index, as they are applied entries too.
//
// Nothing durable runs ahead of the WAL: raft may hand apply an entry
// before the local WAL has it (see raft's package doc), so the Backend
// commits sealed batches only up to the index the WAL holds
// (SetDurableIndex, from raft.StateMachine.Persisted); later batches stay
// in memory, visible to readers, until the WAL catches up. Without a WAL
// (offline tools) nothing is held back.
//
// A commit that fails (a full disk) keeps its batches in memory and is
// retried with backoff; the failure is logged once (then once a minute),
// counted (CommitFailing, CommitFailures) and reported to the owner
// (BackendConfig.OnCommitHealth), which bounds the backlog and raises an
// alarm (server/diskfull.go). See backend_health.go.
//
// The invariant callers must keep: a request's index is recorded (End(ci))
// by the same WriteTx that holds its data, never by an earlier one. A
// commit can fall between two write transactions, so an index recorded
// first would reach the page store without the data, and after a crash
// replay would skip the request (the e2e kill loop caught exactly that).
//
// # Reads
//
// A read loads the current revision, then a Backend read view: the
// published uncommitted records plus a page-store read transaction begun
// after loading them. Records leave the published set only after their
// commit, so every revision at or below the loaded revision is in one of
// the two. Reads take no lock the apply goroutine holds across work; they
// share only the index's RWMutex, which a write holds for one key update.
//
// A range the gRPC API sends on as it is (RangeEncoded, RangeChunk) never
// decodes its key-values: each stored value already is an encoded
// mvccpb.KeyValue, framed as it is into one buffer of the answer's exact
// size (the values' lengths are read before any is copied out), and a
// keys-only read is encoded from the index alone. That buffer is the only
// copy of the answer the member makes.
//
// # Compaction
//
// See compact.go: the compact revision is published first, the index is
// compacted and hands back the records it dropped, and those are deleted
// in revision order in bounded batches, with scheduled and finished
// revisions persisted so a crash resumes. No record is read: etcd's
// compaction hash comes from per-record CRCs kept in memory (sums.go). A
// read below the compact revision fails with ErrCompacted; a read that
// raced a compaction past its revision is re-checked at the end and fails
// the same way.
package mvcc
