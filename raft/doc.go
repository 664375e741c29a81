// Package raft runs Strata's consensus loop: go.etcd.io/raft/v3's RawNode
// driven by one goroutine, with wal/ as the durable log and the state
// machine (mvcc and friends) applied by a second goroutine.
//
// # The Ready contract, as implemented
//
// The raft goroutine owns the RawNode. Each turn it drains every pending
// proposal and message, then handles one Ready. The proposals it drains
// go to raft as one MsgProp (a membership change alone, in order), so a
// leader appends them and sends each follower one MsgApp for them all,
// where one MsgProp per proposal made one MsgApp each (takeProposal).
//
//  1. A leader hands its outbound messages to the transport first, so
//     followers write their copies while the leader writes its own (the
//     raft thesis, 10.2.1). On one P (GOMAXPROCS 1) it then yields once
//     before writing, or the transport's goroutines would get the P only
//     after its fdatasync. A follower sends only after step 2.
//  2. The hard state and entries go to the WAL as one unit; the WAL
//     fdatasyncs when raft.MustSync says so. Only then are the entries
//     appended to the in-memory raft log, and Advance is called.
//  3. Committed entries are passed to the apply goroutine in order, before
//     step 2, so applying overlaps the fdatasync. Conf changes are applied
//     to the RawNode here, in the raft goroutine, because RawNode is not
//     safe for concurrent use. Config.ConfChecker decides each one first,
//     as etcd's member validates a change at apply: a refused change goes
//     to raft with node id 0, which raft skips. The checker keeps its own
//     membership, decided from the log alone, because the state machine
//     lags the raft goroutine; it is reloaded at Start (from the state
//     machine, whose persisted refusals answer for the replayed entries at
//     or below its consistent index) and at the install of a snapshot
//     (from the image), so a restart or an install cannot decide a change
//     differently from the first time.
//  4. After the WAL write, the persisted index (the last index the WAL
//     holds) is published to the state machine (StateMachine.Persisted)
//     and to snapshot waiters.
//  5. After a Ready that wrote entries, the raft goroutine yields its
//     processor (runtime.Gosched) while that brings more proposals or
//     messages, up to four times, before it drains them into the next
//     Ready: under a load that saturates the CPUs, the goroutines queued
//     for them hand over their proposals first and the next WAL write
//     takes them all (letArrivalsIn). On an idle machine the yield
//     returns at once.
//
// The apply goroutine calls the StateMachine, publishes the applied index
// (WaitApplied, ReadIndex readers), and every SnapshotCount entries makes
// the state machine durable (StateMachine.Commit), records a snapshot
// marker in the WAL, compacts the in-memory log and purges old segments.
// Such a local snapshot is metadata only: the page store is the state. A
// snapshot sent to a follower carries the state (below).
//
// # Nothing durable runs ahead of the WAL
//
// Committed entries are not always durable in the local WAL when they are
// applied: in raft's synchronous mode a Ready may commit entries that are
// in its own Entries, still to be written (a follower learning of the
// commit in the same MsgApp, a leader whose followers acknowledged first,
// the bootstrap entries). Applying them early is safe, since committed
// means durable on a quorum, but making their effects durable locally is
// not: if the WAL write then fails, or the process dies, the page store
// would hold a consistent index the WAL never received, and the member
// could never make progress again. So, as etcd does with its notify
// channel:
//
//   - the state machine is told the persisted index after every WAL write
//     and commits (periodically or in Commit) only batches at or below it
//     (mvcc.Backend holds later batches in memory until then);
//   - a snapshot at index i first waits until the persisted index reaches
//     i (or the node stops), and only then calls Commit and CreateSnapshot,
//     so the in-memory log holds i when the snapshot is cut.
//
// A failed WAL write stops the node (Done, Err); the entries that apply
// saw past the persisted index are then in memory only, and are lost with
// the process, as they would be with a crash. Nothing acknowledged is
// lost: an entry is acknowledged only once committed.
//
// # Restart
//
// On restart the WAL is opened at its latest snapshot marker; the state
// machine reports its consistent index (the last applied index it made
// durable), and raft is told that index is applied, so only later entries
// are delivered. The state machine also skips entries at or below its
// consistent index, which makes replay idempotent. The member may have
// the WAL read before Start (PreloadWAL), while it opens its state
// machine: the read needs nothing from the state machine, and every check
// between the two (below, and the install a crash interrupted) runs in
// Start once both are open, as it does when Start reads the WAL itself.
//
// The consistent index may lag the WAL but never lead it: nothing durable
// runs ahead of the WAL. A state machine past the WAL's last entry (or a
// non-empty one with no WAL at all) therefore means lost WAL records, and
// Start refuses it with a WALBehindError that names both indexes, both
// paths and the ways out, rather than start a member that lost its term
// and vote and, alone, would skip every new entry as already applied.
// Whatever moves the consistent index forward without applying entries
// must keep to the same order: a follower installing a leader's snapshot
// records the snapshot marker in the WAL (synced) before the page-store
// image it received becomes the db, as etcd saves the snapshot to its WAL
// before it opens the new backend; otherwise a crash between the two
// would be refused here.
//
// # Snapshots carry the state
//
// A follower that needs entries the leader has compacted gets a MsgSnap
// with an image of the leader's state machine (for the server, a page-store
// file streamed from one read transaction while the leader keeps
// writing). The image must hold exactly the entries up to the snapshot's
// index: the follower records that index in its WAL as a snapshot marker
// and then makes the image its state, so an image past the index would be
// a state machine ahead of the WAL, and one short of it would skip
// entries. The leader therefore cuts the snapshot at the image's index,
// not the other way round (image.go): raft's Storage.Snapshot offers a
// snapshot only when an image at its index is at hand, and otherwise
// prepares one in the background (StateMachine.Image, which reports the
// consistent index its read view holds) and cuts the in-memory snapshot
// there, with the membership of that index (confhist.go). The transport
// gets each MsgSnap with its payload (Transport.SendSnapshot: a reader
// and its size) and reports the outcome (ReportSnapshot). On the follower,
// the transport writes the payload to a file in Config.SnapshotDir,
// fsyncs it and calls StepSnapshot with its path; CheckImage confirms the
// index before raft sees the message, and an image raft does not install
// (its log already covers it) is removed.
//
// # Installing a leader's snapshot
//
// The Ready that carries a received snapshot at index S is handled in
// this order; each step is durable before the next begins:
//
//  1. (transport) the payload is written to a temporary file in the
//     snapshot directory and fsync'd;
//  2. it is renamed to ImagePath(S) ("<S>.snap.db") and the directory is
//     fsync'd;
//  3. the snapshot marker S goes to the WAL (fsync'd), then the Ready's
//     hard state, which commits S (written; raft.MustSync asks no
//     fdatasync for a commit index alone, and a restart takes the commit
//     index to be at least the marker's);
//  4. the apply goroutine, after every earlier entry is applied, calls
//     StateMachine.Restore: the image is renamed over the state's file,
//     the directory fsync'd, and everything derived from the state is
//     rebuilt in memory.
//
// A crash at any point leaves a state that Start accepts and completes:
//
//   - before 3 is durable, the WAL knows nothing of S: the member restarts
//     from its old state and log, and Start removes the leftover files
//     (temporary payloads and images whose marker never reached the WAL);
//     the leader sends the snapshot again;
//   - after the marker and before the rename of 4 is durable, the state is
//     behind the WAL's snapshot (its consistent index is below S), which
//     Start refuses for any other reason; here ImagePath(S) exists, and
//     Start checks it again (StateMachine.CheckImage: every page) and
//     finishes the install by calling Restore with it before it reads the
//     log. An image damaged while it waited is refused, naming the file
//     and the damage: the entries up to S are no longer in the log, so
//     the member must be removed and added again;
//   - after the rename, the state's consistent index is exactly S, the
//     index of the WAL's last marker, so the check that refuses a WAL
//     behind the state (walcheck.go) passes; nothing had to be replayed.
//
// The marker precedes the hard state because a hard state committing S
// with neither the marker nor the entries up to S in the WAL would make
// raft restart with a commit index past its log. Entries the follower had
// written past S before the install (a diverged tail, never committed)
// stay in the WAL ahead of the marker; Open would return them after it,
// so restore drops every entry after the marker whose term is below the
// snapshot's (dropStaleTail): in a valid log terms never decrease, so only
// a stale tail has them.
//
// # Reads
//
// Linearizable reads call ReadIndex. Concurrent callers are batched: every
// caller waiting when the raft goroutine next turns shares one raft
// ReadIndex request; callers arriving later join the next one, so no read
// is served from an index obtained before the read arrived. On the
// leader raft broadcasts a heartbeat round for each request it steps
// (its own member's and each follower's); of the heartbeats, and of a
// follower's responses, of one term to one peer in a Ready only the last
// is sent, since raft confirms reads by the highest read position a peer
// echoed (coalesceHeartbeats).
//
// Nothing here assumes a single member: messages go through Transport
// (the server's is raft/transport, on the peer port; a single member's
// has no peers to send to). What the transport learns flows back
// through ReportUnreachable and ReportSnapshot, received messages arrive
// through Step (StepSnapshot for a MsgSnap and its image), and
// LeaderChanged announces each change of leader. Package rafttest runs N
// members in one process over an in-memory transport.
package raft
