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
//
// The JSON is etcd's membership.Member ({"id", "peerURLs", "name",
// "clientURLs", "isLearner"}). etcd keys the same records by the id in
// hex without leading zeros; package etcdsnap writes that form into an
// etcd snapshot.db, and a restore replaces the membership, so the key
// forms never meet in one file.
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
