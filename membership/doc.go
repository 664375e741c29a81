// Package membership is the cluster membership: member records, the ids
// etcd derives for members and clusters, their persistence in the page
// store, and applying committed conf changes. The server, the tools
// (snapshot restore and export) and the peer transport share it, so a
// member id or record means the same everywhere.
//
// # Records (wire format, never change)
//
//	bucket "members":         member id (16 hex digits) -> member JSON
//	bucket "members_removed": member id (16 hex digits) -> "removed"
//	bucket "strata_confview": "view"    -> {"members":[{"id","peerURLs","isLearner"}],"removed":[ids]}
//	                          "refused" -> indexes of refused conf changes, u64 big-endian each
//
// The JSON is etcd's membership.Member ({"id", "peerURLs", "name",
// "clientURLs", "isLearner"}). etcd keys the same records by the id in
// hex without leading zeros; package etcdsnap writes that form into an
// etcd snapshot.db, and a restore replaces the membership, so the key
// forms never meet in one file.
//
// # Checking conf changes
//
// A committed conf change is applied only if etcd's member would apply it
// (ValidateConfigurationChange: an id removed before, an id that exists,
// a peer URL another member has, the learner limit, an unknown id, the
// promotion of a voter), decided against the View: the membership that
// the log's own changes leave, from none at index 0. The members buckets
// are not that membership: a member writes the initial cluster there at
// bootstrap, and the running cluster's members when it joins, before the
// log's adds of those members are applied. The View is written in the
// same page-store commit as the change's index, so after a crash it is
// exactly the View of the consistent index; the refused indexes let the
// raft goroutine repeat the decisions for the entries it replays at or
// below that index, whose effects are already in the state. A state with
// no View (converted from an etcd snapshot, restored by stratautl) takes
// its members buckets, which are then the log's membership.
//
// # Ids
//
// A member's id is the first 8 bytes (big-endian) of SHA-1 over its
// sorted peer URLs followed by the cluster token; a member added at
// runtime appends the current Unix time to the token. The cluster id is
// the first 8 bytes of SHA-1 over the sorted member ids, each 8 bytes
// big-endian. Both are etcd's derivations: equal flags give equal ids in
// Strata and in etcd.
package membership
