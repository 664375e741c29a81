// Package lease is Strata's lessor: etcd's lease semantics (grant, revoke,
// keep-alive, time-to-live, expiry by the leader, remaining-TTL
// checkpoints) over the mvcc backend.
//
// # Who changes what
//
// Every change that must be the same on all members goes through raft and
// is made by the apply goroutine: Grant, Revoke (RevokeAndDelete) and
// Checkpoint take the raft index and term of the entry being applied and
// write through the mvcc Backend, so their records reach the page store in
// the same commit as that consistent index (see mvcc's doc). They record
// the index even when they fail, as the mvcc store's writes do. The mvcc
// store calls Exists, Attach and Detach from the same goroutine as puts
// and deletes attach and detach keys.
//
// Clocks are not replicated. Only the primary (the raft leader, between
// Promote and Demote) runs them: Renew restarts one, and the lessor's
// goroutine reports expired leases on ExpiredLeasesC. It never deletes
// anything itself: the server proposes a LeaseRevoke for each, so keys
// disappear at the same revision everywhere. A member that is not the
// primary keeps no expiry at all. On Promote every clock restarts from the
// full TTL (or the checkpointed remaining TTL) plus the election timeout,
// exactly as etcd does, so a leader change or restart extends leases.
//
// # Revoke
//
// Revoking deletes the attached keys in one revision. The lessor cannot
// write key records itself (the store owns revisions), so the revoke is
// split: Revoke drops the lease from memory and returns its keys in byte
// order, and mvcc.Store.DeleteKeys deletes them in one write transaction,
// in which the DeleteRecord hook also deletes the lease's record. One
// write, one consistent index: a crash keeps both or neither.
// RevokeAndDelete does the two steps.
//
// # Checkpoints
//
// With a Checkpointer set (etcd's LeaseCheckpoint feature), the primary
// proposes, every CheckpointInterval, the remaining TTL of each lease
// whose TTL is longer than the interval, and every member persists it
// when applying. Promote then restarts such a lease from its remaining
// TTL rather than its full TTL, so long leases are not extended forever
// by leader changes and restarts. A renew of a checkpointed lease first
// proposes a checkpoint of 0, clearing it. Without a Checkpointer,
// remaining TTLs stay 0, as with etcd's default.
//
// # Persistence
//
// One page-store bucket, written only through mvcc.WriteTx:
//
//	bucket "lease":  lease ID, 8 bytes big-endian
//	                 -> leasepb.Lease, protobuf:
//	                      1: ID           int64 (varint)
//	                      2: TTL          int64 (varint)  granted TTL, seconds
//	                      3: RemainingTTL int64 (varint)  checkpointed, 0 = none
//
// This is etcd's schema (bucket name, key and go.etcd.io/etcd/server/v3/
// lease/leasepb.Lease field numbers), so a snapshot converts without
// rewriting leases. The message is encoded by hand with protowire (see
// persist.go; wire format, never change); a golden test pins the bytes
// that etcd's generated code produces. Attached keys are not stored: each
// key's KeyValue carries its lease, and the mvcc store calls Attach for
// every live leased key while it rebuilds its index on open. Expiry times
// are not stored either; they exist only on the primary.
//
// # Opening
//
//	be, _ := mvcc.NewBackend(db, mvcc.BackendConfig{})
//	lessor, _ := lease.Open(be, lease.Config{MinTTL: lease.MinTTL(election, heartbeat)})
//	store, _ := mvcc.OpenStore(be, mvcc.StoreConfig{Leases: lessor})
//
// # Server flows
//
//   - Grant: the RPC handler picks a random positive ID if the request
//     has none, proposes LeaseGrant; apply calls Grant(ci, term, id, ttl)
//     and answers with the TTL it returns.
//   - Revoke: propose LeaseRevoke; apply calls RevokeAndDelete(ci, term,
//     id, store), whose revision goes in the response header.
//   - KeepAlive: on the leader, Renew(ctx, id) per request; ErrLeaseNotFound
//     is answered as TTL 0, ErrNotPrimary means "not the leader".
//   - TimeToLive: TimeToLive(id, keys); ErrLeaseNotFound is answered as
//     TTL -1; Info.TTLSeconds is the TTL field, Info.TTL the granted one.
//   - Expiry: a server goroutine reads ExpiredLeasesC and, while it still
//     is the leader, proposes a LeaseRevoke per ID.
//   - Leadership: Promote(election timeout) once the new leader has
//     applied its first entry of the term (etcd uses the empty entry);
//     Demote when leadership is lost.
//   - Checkpoints: SetCheckpointer with a function that proposes a
//     LeaseCheckpointRequest and waits for it to apply; apply calls
//     Checkpoint(ci, term, req.Checkpoints).
//
// # Locking
//
// One RWMutex guards the lease map, every lease's fields and the two time
// queues. It is a leaf: the lessor never writes to the backend, calls the
// Checkpointer or sends on a channel while holding it, because the store
// calls Attach and Detach with the backend's batch lock held. Renew waits
// for an expired lease's revoke on channels, not under the lock.
package lease
