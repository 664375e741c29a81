package server

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/membershippb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// downgradeState tracks an enabled downgrade, with etcd's rules: the only
// valid target is one minor version below the cluster version.
type downgradeState struct {
	mu      sync.Mutex
	enabled bool
	target  string
}

func (d *downgradeState) info() *pb.DowngradeInfo {
	d.mu.Lock()
	defer d.mu.Unlock()
	return &pb.DowngradeInfo{Enabled: d.enabled, TargetVersion: d.target}
}

// parseDowngradeTarget reads a downgrade target as etcd does: a semantic
// version "major.minor.patch[-pre][+meta]" (exactly three dot-separated
// decimal numbers; pre-release and metadata, if present, made of
// dot-separated [0-9A-Za-z-] identifiers), or failing that "major.minor",
// read as "major.minor.0". Only major.minor count. ok false is etcd's
// "wrong downgrade target version format": "garbage", "v3.6", "3",
// "3.6.0.0"; a well-formed version that is not one minor below the
// cluster's ("3.5", "4.6") is merely an invalid target.
func parseDowngradeTarget(v string) (major, minor int64, ok bool) {
	if major, minor, ok = parseSemver(v); ok {
		return major, minor, true
	}
	return parseSemver(v + ".0")
}

var semverIdentifier = regexp.MustCompile(`^[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*$`)

// parseSemver is the grammar of github.com/coreos/go-semver, which etcd
// parses versions with: metadata after the first "+", then pre-release
// after the first "-", then three numbers.
func parseSemver(v string) (major, minor int64, ok bool) {
	var meta, pre string
	if i := strings.IndexByte(v, '+'); i >= 0 {
		v, meta = v[:i], v[i+1:]
	}
	if i := strings.IndexByte(v, '-'); i >= 0 {
		v, pre = v[:i], v[i+1:]
	}
	parts := strings.SplitN(v, ".", 3)
	if len(parts) != 3 {
		return 0, 0, false
	}
	for _, id := range []string{pre, meta} {
		if id != "" && !semverIdentifier.MatchString(id) {
			return 0, 0, false
		}
	}
	var n [3]int64
	for i, p := range parts {
		x, err := strconv.ParseInt(p, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		n[i] = x
	}
	return n[0], n[1], true
}

// allowedTarget reports whether major.minor is the one version a cluster
// at ClusterVersion may downgrade to: one minor version below.
func allowedTarget(major, minor int64) bool {
	cmaj, cmin, _ := parseSemver(ClusterVersion)
	return major == cmaj && minor == cmin-1
}

func (m *maintenanceServer) Downgrade(ctx context.Context, r *pb.DowngradeRequest) (*pb.DowngradeResponse, error) {
	s := m.s
	if err := s.checkAdmin(ctx); err != nil {
		return nil, err
	}
	d := &s.downgrade
	switch r.Action {
	case pb.DowngradeRequest_VALIDATE, pb.DowngradeRequest_ENABLE:
		major, minor, ok := parseDowngradeTarget(r.Version)
		if !ok {
			return nil, rpctypes.ErrGRPCWrongDowngradeVersionFormat
		}
		if !allowedTarget(major, minor) {
			return nil, rpctypes.ErrGRPCInvalidDowngradeTargetVersion
		}
		d.mu.Lock()
		if d.enabled {
			d.mu.Unlock()
			return nil, rpctypes.ErrGRPCDowngradeInProcess
		}
		d.mu.Unlock()
		if r.Action == pb.DowngradeRequest_ENABLE {
			// Through raft, as etcd: every member, of either kind,
			// stores and takes it. etcd records the target as a full
			// version: "3.6.0".
			if err := s.proposeDowngrade(ctx, true, fmt.Sprintf("%d.%d.0", major, minor)); err != nil {
				return nil, err
			}
		}
	case pb.DowngradeRequest_CANCEL:
		// etcd 3.7 answers a cancel with success whether or not a
		// downgrade was in progress.
		if err := s.proposeDowngrade(ctx, false, ""); err != nil {
			return nil, err
		}
	}
	return &pb.DowngradeResponse{Header: s.header(0), Version: majorMinor(ClusterVersion)}, nil
}

// majorMinor turns "3.7.0" into "3.7", as etcd reports cluster versions.
func majorMinor(v string) string {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return v
	}
	return parts[0] + "." + parts[1]
}

// proposeDowngrade proposes the downgrade state (applyDowngradeInfo).
func (s *Server) proposeDowngrade(ctx context.Context, enabled bool, target string) error {
	res, err := s.propose(ctx, &pb.InternalRaftRequest{DowngradeInfoSet: &membershippb.DowngradeInfoSetRequest{Enabled: enabled, Ver: target}})
	if err == nil {
		err = res.err
	}
	if err != nil {
		return toGRPCError(err)
	}
	return nil
}
