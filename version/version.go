// Package version holds the versions Strata reports, in one place for the
// server, the tools and the snapshot writer.
//
// Strata answers as an etcd server of version Etcd because clients (the
// kube-apiserver above all) gate features on the reported version; its
// data is in the storage schema of cluster version Cluster, which is what
// etcd writes into a snapshot's meta storageVersion and cluster
// clusterVersion, so a snapshot Strata writes is read by etcd as one of
// that version. Strata is Strata's own release, shown in /version and the
// logs.
package version

const (
	// Etcd is the etcd server version Status and /version report.
	Etcd = "3.7.3"
	// Cluster is the cluster and storage version (major.minor.0), as etcd
	// 3.7 stores it in its backend.
	Cluster = "3.7.0"
	// Strata is Strata's own version.
	Strata = "0.1.0"
)
