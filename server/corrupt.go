package server

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// The CORRUPT alarm, as etcd 3.7 handles it. Once any member's CORRUPT
// alarm is active (raised by a corruption check, or by a client's
// Alarm{ACTIVATE, CORRUPT}), apply refuses every request that would
// change the keyspace or the leases with "etcdserver: corrupt cluster"
// (gRPC DataLoss): Put, DeleteRange, Txn, Compaction, LeaseGrant and
// LeaseRevoke, the leader's own expiry revokes included, so leases stop
// expiring. The check sits before every other apply-time check (the
// NOSPACE cap, permissions), as etcd's corrupt applier wraps the others.
//
// What keeps working, as in etcd: everything not applied through raft
// (Range, serializable or linearizable, read-only Txn, LeaseTimeToLive,
// LeaseLeases, LeaseKeepAlive, watches, Status, which lists the alarm in
// its errors), and the raft requests the corrupt applier lets through:
// lease checkpoints, auth and membership changes, and Alarm itself, so
// that `etcdctl alarm disarm` (GET, then DEACTIVATE of each alarm) ends
// it. /health answers {"health":"false","reason":"ALARM CORRUPT"} and
// /readyz fails its data_corruption check.
//
// etcd checks the CORRUPT alarm nowhere before proposing, and checks the
// write permissions of Put, DeleteRange, Txn and LeaseRevoke only at
// apply, after it; Strata checks those permissions before proposing too,
// so while the alarm is active a refused permission is left to apply
// (see deferAuthToApply), which answers "corrupt cluster" as etcd does.

// refusedWhenCorrupt reports whether etcd's corrupt applier refuses req.
func refusedWhenCorrupt(req *pb.InternalRaftRequest) bool {
	return req.Put != nil || req.DeleteRange != nil || req.Txn != nil || req.Range != nil ||
		req.Compaction != nil || req.LeaseGrant != nil || req.LeaseRevoke != nil
}

// corruptRefuses reports whether apply must refuse req with errCorrupt.
func (s *Server) corruptRefuses(req *pb.InternalRaftRequest) bool {
	return refusedWhenCorrupt(req) && s.alarms.active(pb.AlarmType_CORRUPT)
}

// deferAuthToApply passes a permission error found before proposing a
// write (Put, DeleteRange, a Txn that writes, LeaseRevoke), except while
// the CORRUPT alarm is active: then the request goes to raft anyway and
// apply answers "corrupt cluster" before it checks permissions, which is
// what etcd, checking those permissions only at apply, answers.
func (s *Server) deferAuthToApply(err error) error {
	if err != nil && s.alarms.active(pb.AlarmType_CORRUPT) {
		return nil
	}
	return err
}
