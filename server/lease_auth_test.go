package server

import (
	"context"
	"path/filepath"
	"testing"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/metadata"
)

// TestLeasePermissions: with auth enabled, a user who
// may only read /a/ must not list leases, see the keys of, or keep alive
// a root lease that holds a key under /b/ (etcd answers "permission
// denied"), while a lease whose keys it may read stays visible to it.
func TestLeasePermissions(t *testing.T) {
	m := startMember(t, filepath.Join(t.TempDir(), "d"))
	defer m.stop(t)
	bg := context.Background()
	authc, lc := pb.NewAuthClient(m.conn), pb.NewLeaseClient(m.conn)
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, u := range []string{"root", "alice"} {
		must(authc.UserAdd(bg, &pb.AuthUserAddRequest{Name: u, Password: u + "pw"}))
	}
	must(authc.RoleAdd(bg, &pb.AuthRoleAddRequest{Name: "root"}))
	must(authc.UserGrantRole(bg, &pb.AuthUserGrantRoleRequest{User: "root", Role: "root"}))
	must(authc.RoleAdd(bg, &pb.AuthRoleAddRequest{Name: "ra"}))
	must(authc.RoleGrantPermission(bg, &pb.AuthRoleGrantPermissionRequest{Name: "ra",
		Perm: &authpb.Permission{PermType: authpb.Permission_READ, Key: []byte("/a/"), RangeEnd: []byte("/a0")}}))
	must(authc.UserGrantRole(bg, &pb.AuthUserGrantRoleRequest{User: "alice", Role: "ra"}))
	must(authc.AuthEnable(bg, &pb.AuthEnableRequest{}))
	as := func(u string) context.Context {
		r, err := authc.Authenticate(bg, &pb.AuthenticateRequest{Name: u, Password: u + "pw"})
		if err != nil {
			t.Fatal(err)
		}
		return metadata.AppendToOutgoingContext(bg, "token", r.Token)
	}
	root, alice := as("root"), as("alice")
	grant := func(key string) int64 {
		t.Helper()
		l, err := lc.LeaseGrant(root, &pb.LeaseGrantRequest{TTL: 60})
		if err != nil {
			t.Fatal(err)
		}
		must(m.kv.Put(root, &pb.PutRequest{Key: []byte(key), Value: []byte("v"), Lease: l.ID}))
		return l.ID
	}
	keepAlive := func(ctx context.Context, id int64) (*pb.LeaseKeepAliveResponse, error) {
		s, err := lc.LeaseKeepAlive(ctx)
		if err != nil {
			return nil, err
		}
		defer s.CloseSend()
		if err := s.Send(&pb.LeaseKeepAliveRequest{ID: id}); err != nil {
			return nil, err
		}
		return s.Recv()
	}

	la := grant("/a/k")
	if r, err := lc.LeaseLeases(alice, &pb.LeaseLeasesRequest{}); err != nil || len(r.Leases) != 1 {
		t.Fatalf("alice lists leases whose keys she reads: %v, %v", r, err)
	}
	if r, err := lc.LeaseTimeToLive(alice, &pb.LeaseTimeToLiveRequest{ID: la, Keys: true}); err != nil || len(r.Keys) != 1 {
		t.Fatalf("alice's timetolive --keys on /a/k: %v, %v", r, err)
	}
	_, err := keepAlive(alice, la) // keep-alive needs write access
	wantErr(t, err, rpctypes.ErrGRPCPermissionDenied)

	lb := grant("/b/secret")
	_, err = lc.LeaseLeases(alice, &pb.LeaseLeasesRequest{})
	wantErr(t, err, rpctypes.ErrGRPCPermissionDenied)
	_, err = lc.LeaseTimeToLive(alice, &pb.LeaseTimeToLiveRequest{ID: lb, Keys: true})
	wantErr(t, err, rpctypes.ErrGRPCPermissionDenied)
	if r, err := lc.LeaseTimeToLive(alice, &pb.LeaseTimeToLiveRequest{ID: lb}); err != nil || r.GrantedTTL != 60 || len(r.Keys) != 0 {
		t.Fatalf("alice's timetolive without keys: %v, %v", r, err)
	}
	_, err = keepAlive(alice, lb)
	wantErr(t, err, rpctypes.ErrGRPCPermissionDenied)
	_, err = lc.LeaseRevoke(alice, &pb.LeaseRevokeRequest{ID: lb})
	wantErr(t, err, rpctypes.ErrGRPCPermissionDenied)
	// An unknown lease: no keys to protect, answered as for anyone.
	if r, err := lc.LeaseTimeToLive(alice, &pb.LeaseTimeToLiveRequest{ID: 12345, Keys: true}); err != nil || r.TTL != -1 {
		t.Fatalf("alice's timetolive --keys of an unknown lease: %v, %v", r, err)
	}
	if r, err := keepAlive(alice, 12345); err != nil || r.TTL != 0 {
		t.Fatalf("alice's keep-alive of an unknown lease: %v, %v", r, err)
	}

	if r, err := lc.LeaseLeases(root, &pb.LeaseLeasesRequest{}); err != nil || len(r.Leases) != 2 {
		t.Fatalf("root lists leases: %v, %v", r, err)
	}
	if r, err := lc.LeaseTimeToLive(root, &pb.LeaseTimeToLiveRequest{ID: lb, Keys: true}); err != nil || len(r.Keys) != 1 {
		t.Fatalf("root's timetolive --keys: %v, %v", r, err)
	}
	if r, err := keepAlive(root, lb); err != nil || r.TTL != 60 {
		t.Fatalf("root's keep-alive: %v, %v", r, err)
	}
}
