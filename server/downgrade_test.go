package server

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/strata-db/strata/internal/poll"
)

// TestDowngradeTargetFormat: which targets etcd calls
// malformed ("wrong downgrade target version format") and which merely
// invalid, with the cluster at 3.7. The grammar is go-semver's, which
// etcd parses them with, with "major.minor" accepted too.
func TestDowngradeTargetFormat(t *testing.T) {
	malformed := []string{"garbage", "", "v3.6", "3", "3.6.0.0", "3.6.x", " 3.6", "3.6-rc",
		"3.6.0-rc_1", "3..6", "3.6.", "99999999999999999999.6"}
	invalid := []string{"3.5", "3.7", "3.8", "4.6", "2.6"}
	valid := []string{"3.6", "3.6.0", "3.6.9", "03.06", "3.6.0-rc.1+build.5", "3.6.0-", "3.6.0+"}
	m := startMember(t, filepath.Join(t.TempDir(), "d"))
	defer m.stop(t)
	// The leader decides the cluster version after it takes the lead,
	// through raft; until it is applied, validation refuses every
	// target with "cluster version not found during downgrade".
	poll.Until(t, "the cluster version to be set", func() bool { return m.s.versions.Cluster() != "" })
	ctx := context.Background()
	validate := func(v string) error {
		_, err := m.maint.Downgrade(ctx, &pb.DowngradeRequest{Action: pb.DowngradeRequest_VALIDATE, Version: v})
		return err
	}
	for _, v := range malformed {
		wantErr(t, validate(v), rpctypes.ErrGRPCWrongDowngradeVersionFormat)
	}
	for _, v := range invalid {
		wantErr(t, validate(v), rpctypes.ErrGRPCInvalidDowngradeTargetVersion)
	}
	for _, v := range valid {
		if err := validate(v); err != nil {
			t.Errorf("validate %q: %v", v, err)
		}
	}
	_, err := m.maint.Downgrade(ctx, &pb.DowngradeRequest{Action: pb.DowngradeRequest_ENABLE, Version: "garbage"})
	wantErr(t, err, rpctypes.ErrGRPCWrongDowngradeVersionFormat)
}

// TestDecideClusterVersion is the leader's decision (etcd's
// decideClusterVersion) from the members' server versions, the cluster
// version and the downgrade state.
func TestDecideClusterVersion(t *testing.T) {
	vers := func(servers ...string) map[uint64]*memberVersions {
		m := map[uint64]*memberVersions{}
		for i, v := range servers {
			if v == "" {
				m[uint64(i+1)] = nil // unreachable
				continue
			}
			m[uint64(i+1)] = &memberVersions{Server: v}
		}
		return m
	}
	for _, c := range []struct {
		name      string
		cluster   string
		downgrade etcdDowngradeInfo
		members   map[uint64]*memberVersions
		want      string
		wantErr   bool
	}{
		{"none yet, all known", "", etcdDowngradeInfo{}, vers("3.7.3", "3.7.3"), "3.7.0", false},
		{"none yet, one unreachable", "", etcdDowngradeInfo{}, vers("3.7.3", ""), "3.0.0", false},
		{"none yet, a 3.6 member", "", etcdDowngradeInfo{}, vers("3.7.3", "3.6.16"), "3.6.0", false},
		{"one unreachable keeps it", "3.0.0", etcdDowngradeInfo{}, vers("3.7.3", ""), "", false},
		{"raised once all are known", "3.0.0", etcdDowngradeInfo{}, vers("3.7.3", "3.7.3"), "3.7.0", false},
		{"steady", "3.7.0", etcdDowngradeInfo{}, vers("3.7.3", "3.7.3"), "", false},
		{"a 3.6 member does not lower it", "3.7.0", etcdDowngradeInfo{}, vers("3.7.3", "3.6.16"), "", false},
		{"raised back after a downgrade", "3.6.0", etcdDowngradeInfo{}, vers("3.7.3", "3.7.3"), "3.7.0", false},
		{"not while a 3.6 member is left", "3.6.0", etcdDowngradeInfo{}, vers("3.7.3", "3.6.16"), "", false},
		{"a downgrade lowers it", "3.7.0", etcdDowngradeInfo{Enabled: true, TargetVersion: "3.6.0"}, vers("3.7.3", "3.7.3"), "3.6.0", false},
		{"with members of both", "3.7.0", etcdDowngradeInfo{Enabled: true, TargetVersion: "3.6.0"}, vers("3.7.3", "3.6.16"), "", true},
		{"already at the target", "3.6.0", etcdDowngradeInfo{Enabled: true, TargetVersion: "3.6.0"}, vers("3.7.3", "3.6.16"), "", false},
		{"a target two below", "3.7.0", etcdDowngradeInfo{Enabled: true, TargetVersion: "3.5.0"}, vers("3.7.3"), "", true},
	} {
		s := &Server{lg: slog.New(slog.DiscardHandler), versions: newClusterVersions()}
		s.versions.cluster, s.versions.downgrade = c.cluster, c.downgrade
		got, err := s.decideClusterVersion(c.members)
		if got != c.want || (err != nil) != c.wantErr {
			t.Errorf("%s: %q, %v; want %q (error: %v)", c.name, got, err, c.want, c.wantErr)
		}
	}
}
