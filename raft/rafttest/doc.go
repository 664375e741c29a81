// Package rafttest runs N raft members in one process, each on its own
// real WAL and page store in a temporary directory, over an in-memory
// network that can drop, delay, reorder and duplicate messages and cut
// links one way or both. Members can be crashed (every file operation
// fails from a chosen point on, the goroutines stop, and the WAL loses
// what it had not fdatasync'd) and restarted from their files.
//
//   - Network is the transport (raft.Transport), usable by any package's
//     tests: it delivers with Node.Step, streams snapshot payloads into
//     the receiver's image file and delivers them with StepSnapshot, and
//     reports unreachable peers and snapshot outcomes to the sender. Its
//     fault decisions come from per-link generators seeded from one seed,
//     so a seed replays the same fates on every link.
//   - PageSM is a small state machine on mvcc.Backend and a page store,
//     gated on the persisted index as the server's applier is, that
//     checks each of its commits against the WAL.
//   - Cluster starts, crashes and restarts members and checks the
//     invariants: nothing durable ahead of the WAL (CheckLive, CheckDisk),
//     restarts accepted by Start, equal contents once the faults stop
//     (CheckConverged).
//
// The randomized tests print their seed; STRATA_RAFTTEST_SEED replays
// one and STRATA_RAFTTEST_STEPS lengthens a run (make robustness).
package rafttest
