package server

import (
	"context"
	"strconv"
	"strings"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
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

// validTarget checks a "major.minor" target against ClusterVersion.
func validTarget(v string) bool {
	parts := strings.Split(strings.TrimPrefix(v, "v"), ".")
	if len(parts) < 2 {
		return false
	}
	maj, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	cv := strings.Split(ClusterVersion, ".")
	cmaj, _ := strconv.Atoi(cv[0])
	cmin, _ := strconv.Atoi(cv[1])
	return err1 == nil && err2 == nil && maj == cmaj && minor == cmin-1
}

func (m *maintenanceServer) Downgrade(ctx context.Context, r *pb.DowngradeRequest) (*pb.DowngradeResponse, error) {
	s := m.s
	if err := s.checkAdmin(ctx); err != nil {
		return nil, err
	}
	d := &s.downgrade
	switch r.Action {
	case pb.DowngradeRequest_VALIDATE, pb.DowngradeRequest_ENABLE:
		if !validTarget(r.Version) {
			return nil, rpctypes.ErrGRPCInvalidDowngradeTargetVersion
		}
		d.mu.Lock()
		if d.enabled {
			d.mu.Unlock()
			return nil, rpctypes.ErrGRPCDowngradeInProcess
		}
		if r.Action == pb.DowngradeRequest_ENABLE {
			d.enabled, d.target = true, strings.TrimPrefix(r.Version, "v")
		}
		d.mu.Unlock()
	case pb.DowngradeRequest_CANCEL:
		d.mu.Lock()
		if !d.enabled {
			d.mu.Unlock()
			return nil, rpctypes.ErrGRPCNoInflightDowngrade
		}
		d.enabled, d.target = false, ""
		d.mu.Unlock()
	}
	return &pb.DowngradeResponse{Header: s.header(0), Version: ClusterVersion}, nil
}
