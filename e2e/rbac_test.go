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
	// rootLease grants a lease as root and attaches key to it, so that
	// the lease cells see leases other users may or may not read (p/) or
	// write (p/), or neither (q/).
	rootLease := func(key string) int64 {
		t.Helper()
		l, err := lease.LeaseGrant(rootCtx, &pb.LeaseGrantRequest{TTL: 60})
		must(err)
		_, err = kv.Put(rootCtx, &pb.PutRequest{Key: []byte(key), Value: []byte("v"), Lease: l.ID})
		must(err)
		return l.ID
	}
	var lp, lq, lrev int64 // set by the setups of the cells below

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
		// setup, if set, runs once as root before the cell's identities.
		setup func()
		fn    func(ctx context.Context) error
	}
	keepAlive := func(ctx context.Context, id int64) error {
		s, err := lease.LeaseKeepAlive(ctx)
		if err != nil {
			return err
		}
		defer s.CloseSend()
		// A Send on a stream the server has already ended returns io.EOF;
		// the stream's status comes from Recv (grpc's documented rule),
		// so a server that refuses before reading is judged by its status.
		if err := s.Send(&pb.LeaseKeepAliveRequest{ID: id}); err != nil && err != io.EOF {
			return err
		}
		_, err = s.Recv()
		return err
	}
	ttl := func(id int64, keys bool) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			_, err := lease.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: id, Keys: keys})
			return err
		}
	}
	leases := func(ctx context.Context) error {
		_, err := lease.LeaseLeases(ctx, &pb.LeaseLeasesRequest{})
		return err
	}
	calls := []call{
		{name: "KV.Range", fn: func(ctx context.Context) error {
			_, err := kv.Range(ctx, &pb.RangeRequest{Key: []byte("p/a")})
			return err
		}},
		{name: "KV.Range(outside)", fn: func(ctx context.Context) error {
			_, err := kv.Range(ctx, &pb.RangeRequest{Key: []byte("q/a")})
			return err
		}},
		{name: "KV.Put", fn: func(ctx context.Context) error {
			n++
			_, err := kv.Put(ctx, &pb.PutRequest{Key: []byte(fmt.Sprintf("p/w%d", n)), Value: []byte("v")})
			return err
		}},
		{name: "KV.DeleteRange", fn: func(ctx context.Context) error {
			_, err := kv.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte("p/zz")})
			return err
		}},
		{name: "KV.Txn", fn: func(ctx context.Context) error {
			_, err := kv.Txn(ctx, &pb.TxnRequest{
				Compare: []*pb.Compare{{Key: []byte("p/a"), Target: pb.Compare_VERSION, Result: pb.Compare_GREATER}},
				Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("p/t"), Value: []byte("v")}}}}})
			return err
		}},
		{name: "KV.Compact", fn: func(ctx context.Context) error {
			_, err := kv.Compact(ctx, &pb.CompactionRequest{Revision: 1})
			return err
		}},
		{name: "Watch.Create", fn: func(ctx context.Context) error { return watchCreate(ctx, watch) }},
		{name: "Lease.Grant", fn: func(ctx context.Context) error {
			_, err := lease.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 60})
			return err
		}},
		// The lease cells: etcd lets a user other than root
		// list leases, see a lease's keys, keep a lease alive or revoke
		// it only with read (list, keys) or write (keep-alive, revoke)
		// access to every key attached; a lease without keys is open to
		// every identified user.
		{name: "Lease.TimeToLive", fn: ttl(lg.ID, false)},
		{name: "Lease.TimeToLive(keys, none attached)", fn: ttl(lg.ID, true)},
		{name: "Lease.TimeToLive(keys, unknown lease)", fn: ttl(12345, true)},
		{name: "Lease.Leases", fn: leases},
		{name: "Lease.Leases(keys under p/)", setup: func() { lp = rootLease("p/leased") }, fn: leases},
		{name: "Lease.Leases(keys under p/ and q/)", setup: func() { lq = rootLease("q/leased") }, fn: leases},
		{name: "Lease.TimeToLive(keys under p/)", fn: func(ctx context.Context) error { return ttl(lp, true)(ctx) }},
		{name: "Lease.TimeToLive(keys under q/)", fn: func(ctx context.Context) error { return ttl(lq, true)(ctx) }},
		{name: "Lease.TimeToLive(q/ lease without keys)", fn: func(ctx context.Context) error { return ttl(lq, false)(ctx) }},
		{name: "Lease.KeepAlive", fn: func(ctx context.Context) error { return keepAlive(ctx, lg.ID) }},
		{name: "Lease.KeepAlive(unknown)", fn: func(ctx context.Context) error { return keepAlive(ctx, 12345) }},
		{name: "Lease.KeepAlive(keys under p/)", fn: func(ctx context.Context) error { return keepAlive(ctx, lp) }},
		{name: "Lease.KeepAlive(keys under q/)", fn: func(ctx context.Context) error { return keepAlive(ctx, lq) }},
		// One stream: a lease without keys, then one under q/, then the
		// first again. etcd ends the stream with a refusal's error; a
		// server that answered per request would answer the third.
		{name: "Lease.KeepAlive(stream: ok, q/, ok)", fn: func(ctx context.Context) error {
			s, err := lease.LeaseKeepAlive(ctx)
			if err != nil {
				return err
			}
			defer s.CloseSend()
			var out []string
			for _, id := range []int64{lg.ID, lq, lg.ID} {
				err := s.Send(&pb.LeaseKeepAliveRequest{ID: id})
				if err == nil || err == io.EOF { // io.EOF: the status is Recv's
					_, err = s.Recv()
				}
				if err == nil {
					out = append(out, "ok")
					continue
				}
				st := status.Convert(err)
				out = append(out, st.Code().String()+": "+st.Message())
			}
			if out[0] == "ok" && out[1] == "ok" && out[2] == "ok" {
				return nil
			}
			return fmt.Errorf("%s", strings.Join(out, "; "))
		}},
		{name: "Lease.Revoke(unknown)", fn: func(ctx context.Context) error {
			_, err := lease.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: 12345})
			return err
		}},
		// Each revoke cell has its own root lease; once an identity
		// revokes it, those after it get "requested lease not found".
		{name: "Lease.Revoke(keys under q/)", setup: func() { lrev = rootLease("q/revoke") }, fn: func(ctx context.Context) error {
			_, err := lease.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: lrev})
			return err
		}},
		{name: "Lease.Revoke(keys under p/)", setup: func() { lrev = rootLease("p/revoke") }, fn: func(ctx context.Context) error {
			_, err := lease.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: lrev})
			return err
		}},
		{name: "Lease.Revoke(none attached)", setup: func() {
			l, err := lease.LeaseGrant(rootCtx, &pb.LeaseGrantRequest{TTL: 60})
			must(err)
			lrev = l.ID
		}, fn: func(ctx context.Context) error {
			_, err := lease.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: lrev})
			return err
		}},
		// Lock and election call KV and Lease as the caller; only root
		// may both read and write under p/, so only its calls get through
		// and none waits for another.
		{name: "Lock.Lock(lease)", fn: func(ctx context.Context) error {
			_, err := lockc.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("p/l1"), Lease: lg.ID})
			return err
		}},
		{name: "Lock.Lock(no lease)", fn: func(ctx context.Context) error {
			_, err := lockc.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("p/l2")})
			return err
		}},
		{name: "Lock.Unlock", fn: func(ctx context.Context) error {
			_, err := lockc.Unlock(ctx, &v3lockpb.UnlockRequest{Key: []byte("p/l1/none")})
			return err
		}},
		{name: "Election.Campaign", fn: func(ctx context.Context) error {
			_, err := elect.Campaign(ctx, &v3electionpb.CampaignRequest{Name: []byte("p/e"), Lease: lg.ID, Value: []byte("v")})
			return err
		}},
		{name: "Election.Leader", fn: func(ctx context.Context) error {
			_, err := elect.Leader(ctx, &v3electionpb.LeaderRequest{Name: []byte("p/e")})
			return err
		}},
		{name: "Election.Observe", fn: func(ctx context.Context) error {
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
		{name: "Election.Proclaim(not leader)", fn: func(ctx context.Context) error {
			_, err := elect.Proclaim(ctx, &v3electionpb.ProclaimRequest{Value: []byte("v2"),
				Leader: &v3electionpb.LeaderKey{Name: []byte("p/e"), Key: []byte(fmt.Sprintf("p/e/%x", lg.ID)), Rev: 1, Lease: lg.ID}})
			return err
		}},
		{name: "Election.Resign(not leader)", fn: func(ctx context.Context) error {
			_, err := elect.Resign(ctx, &v3electionpb.ResignRequest{
				Leader: &v3electionpb.LeaderKey{Name: []byte("p/e"), Key: []byte(fmt.Sprintf("p/e/%x", lg.ID)), Rev: 1, Lease: lg.ID}})
			return err
		}},
		{name: "Maintenance.Status", fn: func(ctx context.Context) error {
			_, err := maint.Status(ctx, &pb.StatusRequest{})
			return err
		}},
		{name: "Maintenance.AlarmGet", fn: func(ctx context.Context) error {
			_, err := maint.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_GET})
			return err
		}},
		{name: "Maintenance.Hash", fn: func(ctx context.Context) error {
			_, err := maint.Hash(ctx, &pb.HashRequest{})
			return err
		}},
		{name: "Maintenance.HashKV", fn: func(ctx context.Context) error {
			_, err := maint.HashKV(ctx, &pb.HashKVRequest{})
			return err
		}},
		{name: "Maintenance.Defragment", fn: func(ctx context.Context) error {
			_, err := maint.Defragment(ctx, &pb.DefragmentRequest{})
			return err
		}},
		{name: "Maintenance.Snapshot", fn: func(ctx context.Context) error {
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
		{name: "Cluster.MemberList", fn: func(ctx context.Context) error {
			_, err := cluster.MemberList(ctx, &pb.MemberListRequest{})
			return err
		}},
		{name: "Auth.AuthStatus", fn: func(ctx context.Context) error {
			_, err := authc.AuthStatus(ctx, &pb.AuthStatusRequest{})
			return err
		}},
		{name: "Auth.UserList", fn: func(ctx context.Context) error {
			_, err := authc.UserList(ctx, &pb.AuthUserListRequest{})
			return err
		}},
		{name: "Auth.UserGet(self=reader)", fn: func(ctx context.Context) error {
			_, err := authc.UserGet(ctx, &pb.AuthUserGetRequest{Name: "reader"})
			return err
		}},
		{name: "Auth.RoleList", fn: func(ctx context.Context) error {
			_, err := authc.RoleList(ctx, &pb.AuthRoleListRequest{})
			return err
		}},
		{name: "Auth.RoleGet(ro)", fn: func(ctx context.Context) error {
			_, err := authc.RoleGet(ctx, &pb.AuthRoleGetRequest{Role: "ro"})
			return err
		}},
		{name: "Auth.UserAdd", fn: func(ctx context.Context) error {
			n++
			_, err := authc.UserAdd(ctx, &pb.AuthUserAddRequest{Name: fmt.Sprintf("u%d", n), Password: "x"})
			return err
		}},
		{name: "Auth.RoleAdd", fn: func(ctx context.Context) error {
			n++
			_, err := authc.RoleAdd(ctx, &pb.AuthRoleAddRequest{Name: fmt.Sprintf("r%d", n)})
			return err
		}},
		{name: "Auth.Authenticate(bad pw)", fn: func(ctx context.Context) error {
			_, err := authc.Authenticate(ctx, &pb.AuthenticateRequest{Name: "reader", Password: "wrong"})
			return err
		}},
	}
	res := map[string]string{}
	var names []string
	for _, c := range calls {
		names = append(names, c.name)
		if c.setup != nil {
			c.setup()
		}
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
