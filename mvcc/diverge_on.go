//go:build strata_diverge

package mvcc

import "bytes"

// DivergePrefix marks the keys a test build (-tags strata_diverge)
// applies differently from etcd: their puts get a wrong version. The
// mixed-cluster test runs such a build beside etcd members to show that
// etcd's corruption check catches a member that applies one request
// differently. Never in a real build.
var DivergePrefix = []byte("strata-diverge/")

func divergedVersion(key []byte, ver int64) int64 {
	if bytes.HasPrefix(key, DivergePrefix) {
		return ver + 2
	}
	return ver + 1
}
