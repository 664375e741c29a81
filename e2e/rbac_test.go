package e2e

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3election/v3electionpb"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/strata-db/strata/e2e/harness"
)

// TestRBACMatrix runs every KV, Watch, Lease, Lock, Election, Maintenance,
// Cluster and Auth RPC under six identities against real etcd and the target, and
// requires the same gRPC code and message in every cell. The expected
// value of a cell is what etcd answers; the table is printed.
func TestRBACMatrix(t *testing.T) {
	b := needBins(t)
	sides := []struct{ label, bin string }{{"etcd", b.Etcd}, {"target", targetBin(t, b)}}
	results := make([]map[string]string, len(sides))
	var idents []string
	var rpcs []string
	for i, side := range sides {
		srv, err := harness.NewServer(harness.ServerConfig{Bin: side.bin, Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		results[i], idents, rpcs = runMatrix(t, srv.ClientURL)
		srv.Stop()
	}
	var out strings.Builder
	tw := tabwriter.NewWriter(&out, 0, 2, 2, ' ', 0)
	fmt.Fprintf(tw, "RPC\t%s\n", strings.Join(idents, "\t"))
	mismatches := 0
	for _, rpc := range rpcs {
		row := []string{rpc}
		for _, id := range idents {
			cell := rpc + "|" + id
			want, got := results[0][cell], results[1][cell]
			mark := short(want)
			if want != got {
				mismatches++
				mark += " ≠ " + short(got)
			}
			row = append(row, mark)
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	tw.Flush()
	t.Logf("RBAC matrix (etcd's answer per cell; ≠ marks the target's differing answer):\n%s", out.String())
	for _, rpc := range rpcs {
		for _, id := range idents {
			cell := rpc + "|" + id
			if results[0][cell] != results[1][cell] {
				t.Errorf("%s as %s: etcd %q, target %q", rpc, id, results[0][cell], results[1][cell])
			}
		}
	}
	t.Logf("%d RPCs x %d identities, %d mismatches", len(rpcs), len(idents), mismatches)
}

func short(s string) string {
	if s == "OK" {
		return "OK"
	}
	code, msg, _ := strings.Cut(s, ": ")
	msg = strings.TrimPrefix(msg, "etcdserver: ")
	if len(msg) > 28 {
		msg = msg[:28]
	}
	return code + "(" + msg + ")"
}

// runMatrix sets up users and roles, enables auth, and calls every RPC as
// each identity. It returns cell -> "OK" or "Code: message".
func runMatrix(t *testing.T, clientURL string) (map[string]string, []string, []string) {
	conn, err := grpc.NewClient(strings.TrimPrefix(clientURL, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	kv, lease, maint := pb.NewKVClient(conn), pb.NewLeaseClient(conn), pb.NewMaintenanceClient(conn)
	cluster, authc, watch := pb.NewClusterClient(conn), pb.NewAuthClient(conn), pb.NewWatchClient(conn)
	lockc, elect := v3lockpb.NewLockClient(conn), v3electionpb.NewElectionClient(conn)
	bg := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// Setup without auth.
	_, err = kv.Put(bg, &pb.PutRequest{Key: []byte("p/a"), Value: []byte("1")})
	must(err)
	for _, u := range []string{"root", "norole", "reader", "writer"} {
		_, err = authc.UserAdd(bg, &pb.AuthUserAddRequest{Name: u, Password: u + "pw"})
		must(err)
	}
	_, err = authc.RoleAdd(bg, &pb.AuthRoleAddRequest{Name: "root"})
	must(err)
	_, err = authc.UserGrantRole(bg, &pb.AuthUserGrantRoleRequest{User: "root", Role: "root"})
	must(err)
	for role, perm := range map[string]string{"ro": "READ", "wo": "WRITE"} {
		_, err = authc.RoleAdd(bg, &pb.AuthRoleAddRequest{Name: role})
		must(err)
		_, err = authc.RoleGrantPermission(bg, &pb.AuthRoleGrantPermissionRequest{Name: role,
			Perm: authpbPermission{Type: perm, Key: "p/", End: "p0"}.pb()})
		must(err)
	}
	_, err = authc.UserGrantRole(bg, &pb.AuthUserGrantRoleRequest{User: "reader", Role: "ro"})
	must(err)
	_, err = authc.UserGrantRole(bg, &pb.AuthUserGrantRoleRequest{User: "writer", Role: "wo"})
	must(err)
	_, err = authc.AuthEnable(bg, &pb.AuthEnableRequest{})
	must(err)
	tokens := map[string]string{}
	for _, u := range []string{"root", "norole", "reader", "writer"} {
		r, err := authc.Authenticate(bg, &pb.AuthenticateRequest{Name: u, Password: u + "pw"})
		must(err)
		tokens[u] = r.Token
	}
	rootCtx := metadata.AppendToOutgoingContext(bg, "token", tokens["root"])
	lg, err := lease.LeaseGrant(rootCtx, &pb.LeaseGrantRequest{TTL: 60})
	must(err)

	idents := []string{"no-token", "invalid-token", "no-role", "read-only", "write-only", "root"}
	ctxOf := map[string]context.Context{
		"no-token":      bg,
		"invalid-token": metadata.AppendToOutgoingContext(bg, "token", "garbage.token.value"),
		"no-role":       metadata.AppendToOutgoingContext(bg, "token", tokens["norole"]),
		"read-only":     metadata.AppendToOutgoingContext(bg, "token", tokens["reader"]),
		"write-only":    metadata.AppendToOutgoingContext(bg, "token", tokens["writer"]),
		"root":          rootCtx,
	}
	n := 0
	type call struct {
		name string
		fn   func(ctx context.Context) error
	}
	calls := []call{
		{"KV.Range", func(ctx context.Context) error {
			_, err := kv.Range(ctx, &pb.RangeRequest{Key: []byte("p/a")})
			return err
		}},
		{"KV.Range(outside)", func(ctx context.Context) error {
			_, err := kv.Range(ctx, &pb.RangeRequest{Key: []byte("q/a")})
			return err
		}},
		{"KV.Put", func(ctx context.Context) error {
			n++
			_, err := kv.Put(ctx, &pb.PutRequest{Key: []byte(fmt.Sprintf("p/w%d", n)), Value: []byte("v")})
			return err
		}},
		{"KV.DeleteRange", func(ctx context.Context) error {
			_, err := kv.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte("p/zz")})
			return err
		}},
		{"KV.Txn", func(ctx context.Context) error {
			_, err := kv.Txn(ctx, &pb.TxnRequest{
				Compare: []*pb.Compare{{Key: []byte("p/a"), Target: pb.Compare_VERSION, Result: pb.Compare_GREATER}},
				Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("p/t"), Value: []byte("v")}}}}})
			return err
		}},
		{"KV.Compact", func(ctx context.Context) error {
			_, err := kv.Compact(ctx, &pb.CompactionRequest{Revision: 1})
			return err
		}},
		{"Watch.Create", func(ctx context.Context) error { return watchCreate(ctx, watch) }},
		{"Lease.Grant", func(ctx context.Context) error {
			_, err := lease.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 60})
			return err
		}},
		{"Lease.TimeToLive", func(ctx context.Context) error {
			_, err := lease.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: lg.ID})
			return err
		}},
		{"Lease.Leases", func(ctx context.Context) error {
			_, err := lease.LeaseLeases(ctx, &pb.LeaseLeasesRequest{})
			return err
		}},
		{"Lease.KeepAlive", func(ctx context.Context) error {
			s, err := lease.LeaseKeepAlive(ctx)
			if err != nil {
				return err
			}
			if err := s.Send(&pb.LeaseKeepAliveRequest{ID: lg.ID}); err != nil {
				return err
			}
			_, err = s.Recv()
			s.CloseSend()
			return err
		}},
		{"Lease.Revoke(unknown)", func(ctx context.Context) error {
			_, err := lease.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: 12345})
			return err
		}},
		// Lock and election call KV and Lease as the caller; only root
		// may both read and write under p/, so only its calls get through
		// and none waits for another.
		{"Lock.Lock(lease)", func(ctx context.Context) error {
			_, err := lockc.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("p/l1"), Lease: lg.ID})
			return err
		}},
		{"Lock.Lock(no lease)", func(ctx context.Context) error {
			_, err := lockc.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("p/l2")})
			return err
		}},
		{"Lock.Unlock", func(ctx context.Context) error {
			_, err := lockc.Unlock(ctx, &v3lockpb.UnlockRequest{Key: []byte("p/l1/none")})
			return err
		}},
		{"Election.Campaign", func(ctx context.Context) error {
			_, err := elect.Campaign(ctx, &v3electionpb.CampaignRequest{Name: []byte("p/e"), Lease: lg.ID, Value: []byte("v")})
			return err
		}},
		{"Election.Leader", func(ctx context.Context) error {
			_, err := elect.Leader(ctx, &v3electionpb.LeaderRequest{Name: []byte("p/e")})
			return err
		}},
		{"Election.Observe", func(ctx context.Context) error {
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			s, err := elect.Observe(ctx, &v3electionpb.LeaderRequest{Name: []byte("p/e")})
			if err != nil {
				return err
			}
			if _, err := s.Recv(); err != nil {
				if err == io.EOF {
					return fmt.Errorf("stream ended without a leader")
				}
				return err
			}
			return nil
		}},
		{"Election.Proclaim(not leader)", func(ctx context.Context) error {
			_, err := elect.Proclaim(ctx, &v3electionpb.ProclaimRequest{Value: []byte("v2"),
				Leader: &v3electionpb.LeaderKey{Name: []byte("p/e"), Key: []byte(fmt.Sprintf("p/e/%x", lg.ID)), Rev: 1, Lease: lg.ID}})
			return err
		}},
		{"Election.Resign(not leader)", func(ctx context.Context) error {
			_, err := elect.Resign(ctx, &v3electionpb.ResignRequest{
				Leader: &v3electionpb.LeaderKey{Name: []byte("p/e"), Key: []byte(fmt.Sprintf("p/e/%x", lg.ID)), Rev: 1, Lease: lg.ID}})
			return err
		}},
		{"Maintenance.Status", func(ctx context.Context) error {
			_, err := maint.Status(ctx, &pb.StatusRequest{})
			return err
		}},
		{"Maintenance.AlarmGet", func(ctx context.Context) error {
			_, err := maint.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_GET})
			return err
		}},
		{"Maintenance.Hash", func(ctx context.Context) error {
			_, err := maint.Hash(ctx, &pb.HashRequest{})
			return err
		}},
		{"Maintenance.HashKV", func(ctx context.Context) error {
			_, err := maint.HashKV(ctx, &pb.HashKVRequest{})
			return err
		}},
		{"Maintenance.Defragment", func(ctx context.Context) error {
			_, err := maint.Defragment(ctx, &pb.DefragmentRequest{})
			return err
		}},
		{"Maintenance.Snapshot", func(ctx context.Context) error {
			s, err := maint.Snapshot(ctx, &pb.SnapshotRequest{})
			if err != nil {
				return err
			}
			for {
				if _, err := s.Recv(); err != nil {
					if err == io.EOF {
						return nil
					}
					return err
				}
			}
		}},
		{"Cluster.MemberList", func(ctx context.Context) error {
			_, err := cluster.MemberList(ctx, &pb.MemberListRequest{})
			return err
		}},
		{"Auth.AuthStatus", func(ctx context.Context) error {
			_, err := authc.AuthStatus(ctx, &pb.AuthStatusRequest{})
			return err
		}},
		{"Auth.UserList", func(ctx context.Context) error {
			_, err := authc.UserList(ctx, &pb.AuthUserListRequest{})
			return err
		}},
		{"Auth.UserGet(self=reader)", func(ctx context.Context) error {
			_, err := authc.UserGet(ctx, &pb.AuthUserGetRequest{Name: "reader"})
			return err
		}},
		{"Auth.RoleList", func(ctx context.Context) error {
			_, err := authc.RoleList(ctx, &pb.AuthRoleListRequest{})
			return err
		}},
		{"Auth.RoleGet(ro)", func(ctx context.Context) error {
			_, err := authc.RoleGet(ctx, &pb.AuthRoleGetRequest{Role: "ro"})
			return err
		}},
		{"Auth.UserAdd", func(ctx context.Context) error {
			n++
			_, err := authc.UserAdd(ctx, &pb.AuthUserAddRequest{Name: fmt.Sprintf("u%d", n), Password: "x"})
			return err
		}},
		{"Auth.RoleAdd", func(ctx context.Context) error {
			n++
			_, err := authc.RoleAdd(ctx, &pb.AuthRoleAddRequest{Name: fmt.Sprintf("r%d", n)})
			return err
		}},
		{"Auth.Authenticate(bad pw)", func(ctx context.Context) error {
			_, err := authc.Authenticate(ctx, &pb.AuthenticateRequest{Name: "reader", Password: "wrong"})
			return err
		}},
	}
	res := map[string]string{}
	var names []string
	for _, c := range calls {
		names = append(names, c.name)
		for _, id := range idents {
			ctx, cancel := context.WithTimeout(ctxOf[id], 10*time.Second)
			err := c.fn(ctx)
			cancel()
			if err == nil {
				res[c.name+"|"+id] = "OK"
			} else {
				st := status.Convert(err)
				res[c.name+"|"+id] = st.Code().String() + ": " + st.Message()
			}
		}
	}
	return res, idents, names
}

// watchCreate creates a watch on the protected prefix and reports a
// refusal (created and canceled) as an error with its cancel reason.
func watchCreate(ctx context.Context, wc pb.WatchClient) error {
	s, err := wc.Watch(ctx)
	if err != nil {
		return err
	}
	defer s.CloseSend()
	if err := s.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{Key: []byte("p/"), RangeEnd: []byte("p0")}}}); err != nil {
		return err
	}
	r, err := s.Recv()
	if err != nil {
		return err
	}
	if r.Canceled {
		return fmt.Errorf("canceled: %s", r.CancelReason)
	}
	return nil
}

// authpbPermission builds a grant-permission request's permission.
type authpbPermission struct{ Type, Key, End string }

func (p authpbPermission) pb() *authpb.Permission {
	t := authpb.Permission_READ
	if p.Type == "WRITE" {
		t = authpb.Permission_WRITE
	}
	return &authpb.Permission{PermType: t, Key: []byte(p.Key), RangeEnd: []byte(p.End)}
}
