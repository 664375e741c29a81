package server

import (
	"context"
	"path/filepath"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// TestDowngradeTargetFormat (issue 17 item 7): which targets etcd calls
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
