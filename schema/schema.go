// Package schema is the on-disk schema Strata shares with etcd, defined
// once for the server, the stores and the tools: the bucket names and meta
// keys of etcd's backend (which the page store holds as they are, so that
// snapshots convert in both directions without re-keying), and the
// detection of a database file's format (Strata's page store or etcd's
// bbolt file) from its first bytes.
//
// The records inside the buckets are owned by the packages that write
// them: mvcc (key, meta), lease (lease), auth (auth, authUsers, authRoles),
// membership (members, members_removed) and the server (alarm).
package schema

// Bucket names, as etcd names them (wire format, never change).
var (
	Key            = []byte("key")             // revision -> mvccpb.KeyValue
	Meta           = []byte("meta")            // MetaConsistentIndex, MetaTerm, ...
	Lease          = []byte("lease")           // lease id -> leasepb.Lease
	Alarm          = []byte("alarm")           // marshaled AlarmMember -> empty
	Auth           = []byte("auth")            // authEnabled, authRevision
	AuthUsers      = []byte("authUsers")       // name -> authpb.User
	AuthRoles      = []byte("authRoles")       // name -> authpb.Role
	Members        = []byte("members")         // member id -> member JSON
	MembersRemoved = []byte("members_removed") // member id -> "removed"
	Cluster        = []byte("cluster")         // ClusterVersionKey -> version
)

// ConfView is Strata's own bucket of the membership that committed conf
// changes are checked against (membership.View): "view" -> JSON,
// "refused" -> the indexes of refused changes (u64 big-endian each). An
// etcd snapshot.db does not carry it; etcd checks against its members
// buckets, which a Strata state converted from etcd's starts from.
var ConfView = []byte("strata_confview")

// RevMeta is Strata's own bucket beside the key bucket: under each
// record's key, what opening the store needs of the record without
// reading it (the user key, create revision, version, lease, and the
// CRC-32C and length of the record's bytes), plus a completeness marker.
// It is derived from the key bucket (mvcc writes both in one commit and
// rebuilds it when absent), so conversions to etcd's format leave it out.
var RevMeta = []byte("strata_revmeta")

// EtcdBuckets are the buckets etcd creates in every backend, so an etcd
// snapshot.db always has them (even empty).
var EtcdBuckets = [][]byte{Key, Meta, Lease, Alarm, Cluster, Members, MembersRemoved, Auth, AuthUsers, AuthRoles}

// DataBuckets are the buckets whose records mean the same in etcd's and
// Strata's backends and are carried over as they are when converting
// between them. Membership is not among them: etcd and Strata key member
// records differently, and a restore replaces the membership anyway.
var DataBuckets = [][]byte{Key, Meta, Lease, Alarm, Auth, AuthUsers, AuthRoles}

// IsDataBucket reports whether name is one of DataBuckets.
func IsDataBucket(name []byte) bool {
	for _, b := range DataBuckets {
		if string(b) == string(name) {
			return true
		}
	}
	return false
}

// Keys of the meta bucket, as etcd names them (wire format). The
// consistent index and term are u64 big-endian; confState is
// raftpb.ConfState as JSON; storageVersion is "major.minor.0"; the compact
// revisions are revision keys (main u64 big-endian first).
var (
	MetaConsistentIndex     = []byte("consistent_index")
	MetaTerm                = []byte("term")
	MetaConfState           = []byte("confState")
	MetaStorageVersion      = []byte("storageVersion")
	MetaScheduledCompactRev = []byte("scheduledCompactRev")
	MetaFinishedCompactRev  = []byte("finishedCompactRev")
)

// ClusterVersionKey is the key of the cluster version in the cluster
// bucket.
var ClusterVersionKey = []byte("clusterVersion")
