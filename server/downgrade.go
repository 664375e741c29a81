package server

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/membershippb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

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

// Downgrade is etcd's Maintenance.Downgrade, each action with etcd's
// checks in etcd's order and its answers:
//
//   - validate: the target's format; a cluster version must be known
//     ("cluster version not found during downgrade"); after a
//     linearizable read, the target must be one minor below the cluster
//     version ("invalid downgrade target version"), and no downgrade may
//     be enabled ("cluster has a downgrade job in progress").
//   - enable: the same checks, then DowngradeInfoSet through raft. The
//     leader's monitor then lowers the cluster version (clusterversion.go).
//   - cancel: after a linearizable read, DowngradeInfoSet{enabled: false}
//     through raft if a downgrade is enabled. Whatever happens the answer
//     is a success with the cluster version (etcd logs the failure, "no
//     inflight downgrade job" included, and answers anyway); the monitor
//     raises the version back.
//
// Every answer carries the cluster version as major.minor.
func (m *maintenanceServer) Downgrade(ctx context.Context, r *pb.DowngradeRequest) (*pb.DowngradeResponse, error) {
	s := m.s
	if err := s.checkAdmin(ctx); err != nil {
		return nil, err
	}
	var err error
	switch r.Action {
	case pb.DowngradeRequest_VALIDATE:
		err = s.downgradeValidate(ctx, r.Version)
	case pb.DowngradeRequest_ENABLE:
		if err = s.downgradeValidate(ctx, r.Version); err == nil {
			major, minor, _ := parseDowngradeTarget(r.Version)
			// Through raft, as etcd: every member, of either kind,
			// stores and takes it. etcd records the target as a full
			// version: "3.6.0".
			err = s.proposeDowngrade(ctx, true, fmt.Sprintf("%d.%d.0", major, minor))
		}
		if err != nil {
			s.lg.Warn("reject downgrade request", "error", downgradeErrText(err))
		}
	case pb.DowngradeRequest_CANCEL:
		if err := s.downgradeCancel(ctx); err != nil {
			s.lg.Warn("failed to cancel downgrade", "error", downgradeErrText(err))
		}
	default:
		err = status.Error(codes.Unknown, "etcdserver: unknown method")
	}
	if err != nil {
		return nil, err
	}
	return &pb.DowngradeResponse{Header: s.header(0), Version: majorMinor(s.versions.Cluster())}, nil
}

// downgradeValidate is etcd's validation of a downgrade target.
func (s *Server) downgradeValidate(ctx context.Context, target string) error {
	major, minor, ok := parseDowngradeTarget(target)
	if !ok {
		return rpctypes.ErrGRPCWrongDowngradeVersionFormat
	}
	if s.versions.Cluster() == "" {
		return rpctypes.ErrGRPCClusterVersionUnavailable
	}
	// The cluster version and downgrade state as of every write committed
	// before the request, as etcd reads them.
	if err := s.linearizableRead(ctx); err != nil {
		return toGRPCError(err)
	}
	cmaj, cmin, _ := parseSemver(s.versions.Cluster())
	if major != cmaj || minor != cmin-1 {
		return rpctypes.ErrGRPCInvalidDowngradeTargetVersion
	}
	if s.versions.Downgrade().Enabled {
		return rpctypes.ErrGRPCDowngradeInProcess
	}
	return nil
}

// downgradeCancel is etcd's Manager.DowngradeCancel.
func (s *Server) downgradeCancel(ctx context.Context) error {
	if err := s.linearizableRead(ctx); err != nil {
		return toGRPCError(err)
	}
	if !s.versions.Downgrade().Enabled {
		return rpctypes.ErrGRPCNoInflightDowngrade
	}
	return s.proposeDowngrade(ctx, false, "")
}

// downgradeErrText is an error as etcd logs it: the server's error text,
// without the gRPC status around it.
func downgradeErrText(err error) string {
	if st, ok := status.FromError(err); ok {
		return st.Message()
	}
	return err.Error()
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
