package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/metadata"

	"github.com/strata-db/strata/e2e/harness"
)

// TestCorruptAlarm: a client raises the CORRUPT alarm
// with a raw Maintenance.Alarm call; every RPC is then recorded on etcd
// and on the target (code and message, or the normalized response), the
// alarm is disarmed with `etcdctl alarm disarm`, and everything is
// recorded again. Then, with auth enabled, the same for a user whose
// writes are denied: etcd checks those permissions only at apply, after
// the corrupt check, so it answers "corrupt cluster" to them.
func TestCorruptAlarm(t *testing.T) {
	runRawDiff(t, nil, corruptSequence)
}

const (
	corruptLease      = 0x100 // granted before the alarm, a key attached
	corruptLeaseAfter = 0x200 // granted (or refused) under the alarm
)

func corruptSequence(c *rawCase) {
	bg := context.Background()
	c.must(c.kv.Put(bg, &pb.PutRequest{Key: []byte("k1"), Value: []byte("v1")}))
	c.must(c.lease.LeaseGrant(bg, &pb.LeaseGrantRequest{ID: corruptLease, TTL: 60}))
	c.must(c.kv.Put(bg, &pb.PutRequest{Key: []byte("leased"), Value: []byte("v"), Lease: corruptLease}))

	ctx, cancel := c.call()
	resp, err := c.maint.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: c.self, Alarm: pb.AlarmType_CORRUPT})
	cancel()
	c.rec("activate CORRUPT", resp, err)
	c.everyRPC("corrupt")

	// DEACTIVATE names exactly one (member, type): no wildcard.
	ctx, cancel = c.call()
	resp, err = c.maint.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_DEACTIVATE})
	cancel()
	c.rec("deactivate member 0, type NONE", resp, err)
	ctx, cancel = c.call()
	resp, err = c.maint.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_DEACTIVATE, MemberID: c.self + 1, Alarm: pb.AlarmType_CORRUPT})
	cancel()
	c.rec("deactivate another member's CORRUPT", resp, err)
	// NOSPACE too: the corrupt check comes first.
	ctx, cancel = c.call()
	resp, err = c.maint.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: c.self, Alarm: pb.AlarmType_NOSPACE})
	cancel()
	c.rec("activate NOSPACE as well", resp, err)
	c.put("with CORRUPT and NOSPACE: Put", "k2", 0)
	ctx, cancel = c.call()
	lg, err := c.lease.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: corruptLeaseAfter, TTL: 60})
	cancel()
	c.rec("with CORRUPT and NOSPACE: LeaseGrant", lg, err)
	c.httpGet("with CORRUPT and NOSPACE: /health?exclude=CORRUPT", "/health?exclude=CORRUPT", false)
	ctx, cancel = c.call()
	resp, err = c.maint.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_DEACTIVATE, MemberID: c.self, Alarm: pb.AlarmType_NOSPACE})
	cancel()
	c.rec("deactivate NOSPACE", resp, err)

	ctl := &harness.Ctl{Bin: needBins(c.t).Etcdctl, Endpoints: []string{c.srv.ClientURL}}
	r := ctl.Run("", "alarm", "disarm")
	c.note("etcdctl alarm disarm: exit %d %q %q", r.Code, c.masked(r.Stdout), r.Stderr)
	c.everyRPC("disarmed")

	// With auth: root, and "limited", who may only read.
	for _, u := range []string{"root", "limited"} {
		c.must(c.auth.UserAdd(bg, &pb.AuthUserAddRequest{Name: u, Password: u + "pw"}))
	}
	c.must(c.auth.RoleAdd(bg, &pb.AuthRoleAddRequest{Name: "root"}))
	c.must(c.auth.UserGrantRole(bg, &pb.AuthUserGrantRoleRequest{User: "root", Role: "root"}))
	c.must(c.auth.RoleAdd(bg, &pb.AuthRoleAddRequest{Name: "reads"}))
	c.must(c.auth.RoleGrantPermission(bg, &pb.AuthRoleGrantPermissionRequest{Name: "reads",
		Perm: authpbPermission{Type: "READ", Key: "k", End: "l"}.pb()}))
	c.must(c.auth.UserGrantRole(bg, &pb.AuthUserGrantRoleRequest{User: "limited", Role: "reads"}))
	c.must(c.auth.AuthEnable(bg, &pb.AuthEnableRequest{}))
	token := func(u string) context.Context {
		r, err := c.auth.Authenticate(bg, &pb.AuthenticateRequest{Name: u, Password: u + "pw"})
		if err != nil {
			c.t.Fatal(err)
		}
		return metadata.AppendToOutgoingContext(bg, "token", r.Token)
	}
	root, limited := token("root"), token("limited")
	c.ctx = root
	ctx, cancel = c.call()
	resp, err = c.maint.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: c.self, Alarm: pb.AlarmType_CORRUPT})
	cancel()
	c.rec("auth: root activates CORRUPT", resp, err)
	c.ctx = limited
	c.writes("auth, corrupt: limited")
	c.reads("auth, corrupt: limited")
	ctx, cancel = c.call()
	resp, err = c.maint.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_DEACTIVATE, MemberID: c.self, Alarm: pb.AlarmType_CORRUPT})
	cancel()
	c.rec("auth: limited deactivates", resp, err)
	c.ctx = root
	c.writes("auth, corrupt: root")
	ctx, cancel = c.call()
	resp, err = c.maint.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_DEACTIVATE, MemberID: c.self, Alarm: pb.AlarmType_CORRUPT})
	cancel()
	c.rec("auth: root deactivates", resp, err)
	c.ctx = limited
	c.writes("auth, disarmed: limited")
	c.ctx = root
	c.writes("auth, disarmed: root")
}

// everyRPC records what each kind of request gets in the current state.
func (c *rawCase) everyRPC(phase string) {
	c.writes(phase)
	c.reads(phase)
	p := phase + ": "
	ctx, cancel := c.call()
	defer cancel()
	ar, err := c.maint.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_GET})
	c.rec(p+"Alarm GET", ar, err)
	ar, err = c.maint.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_GET, Alarm: pb.AlarmType_NOSPACE})
	c.rec(p+"Alarm GET NOSPACE only", ar, err)
	st, err := c.maint.Status(ctx, &pb.StatusRequest{})
	if err != nil {
		c.rec(p+"Status", nil, err)
	} else {
		c.note("%sStatus errors: %q", p, c.masked(st.Errors...))
	}
	ml, err := c.cluster.MemberList(ctx, &pb.MemberListRequest{})
	if err == nil {
		c.note("%sMemberList: %d members", p, len(ml.Members))
	} else {
		c.rec(p+"MemberList", nil, err)
	}
	c.httpGet(p+"/health", "/health", false)
	c.httpGet(p+"/health?exclude=CORRUPT", "/health?exclude=CORRUPT", false)
	c.httpGet(p+"/health?serializable=true", "/health?serializable=true", false)
	c.httpGet(p+"/readyz", "/readyz", true)
	c.httpGet(p+"/readyz?exclude=data_corruption", "/readyz?exclude=data_corruption", true)
	c.httpGet(p+"/readyz?verbose&exclude=data_corruption", "/readyz?verbose&exclude=data_corruption", true)
	c.httpGet(p+"/readyz/data_corruption", "/readyz/data_corruption", false)
	c.httpGet(p+"/livez", "/livez", false)
}

// writes records every request that goes through raft and changes data.
func (c *rawCase) writes(phase string) {
	p := phase + ": "
	c.put(p+"Put", "k2", 0)
	c.put(p+"Put with the lease", "k3", corruptLease)
	ctx, cancel := c.call()
	defer cancel()
	dr, err := c.kv.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte("k3"), PrevKv: true})
	c.rec(p+"DeleteRange", dr, err)
	tr, err := c.kv.Txn(ctx, &pb.TxnRequest{
		Compare: []*pb.Compare{{Key: []byte("k1"), Target: pb.Compare_VERSION, Result: pb.Compare_GREATER}},
		Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("k4"), Value: []byte("t")}}}},
		Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("k1")}}}}})
	c.rec(p+"Txn that writes", tr, err)
	tr, err = c.kv.Txn(ctx, &pb.TxnRequest{
		Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte("nothing")}}}}})
	c.rec(p+"Txn with a delete", tr, err)
	cr, err := c.kv.Compact(ctx, &pb.CompactionRequest{Revision: 2})
	c.rec(p+"Compact", cr, err)
	lg, err := c.lease.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: corruptLeaseAfter, TTL: 60})
	c.rec(p+"LeaseGrant", lg, err)
	lr, err := c.lease.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: corruptLeaseAfter})
	c.rec(p+"LeaseRevoke (the new lease)", lr, err)
	lr, err = c.lease.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: 0xdead})
	c.rec(p+"LeaseRevoke (unknown)", lr, err)
}

// reads records the requests served without raft.
func (c *rawCase) reads(phase string) {
	p := phase + ": "
	ctx, cancel := c.call()
	defer cancel()
	rr, err := c.kv.Range(ctx, &pb.RangeRequest{Key: []byte("k"), RangeEnd: []byte("l")})
	c.rec(p+"Range", rr, err)
	rr, err = c.kv.Range(ctx, &pb.RangeRequest{Key: []byte("k"), RangeEnd: []byte("l"), Serializable: true})
	c.rec(p+"Range serializable", rr, err)
	tr, err := c.kv.Txn(ctx, &pb.TxnRequest{
		Compare: []*pb.Compare{{Key: []byte("k1"), Target: pb.Compare_VERSION, Result: pb.Compare_GREATER}},
		Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("k1")}}}}})
	c.rec(p+"read-only Txn", tr, err)
	tr, err = c.kv.Txn(ctx, &pb.TxnRequest{})
	c.rec(p+"empty Txn", tr, err)
	tl, err := c.lease.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: corruptLease, Keys: true})
	if err == nil {
		c.note("%sLeaseTimeToLive: granted %d, running %v, keys %q", p, tl.GrantedTTL, tl.TTL > 0, tl.Keys)
	} else {
		c.rec(p+"LeaseTimeToLive", nil, err)
	}
	ll, err := c.lease.LeaseLeases(ctx, &pb.LeaseLeasesRequest{})
	if err == nil {
		c.note("%sLeaseLeases: %d leases", p, len(ll.Leases))
	} else {
		c.rec(p+"LeaseLeases", nil, err)
	}
	ka, err := c.lease.LeaseKeepAlive(ctx)
	if err == nil {
		err = ka.Send(&pb.LeaseKeepAliveRequest{ID: corruptLease})
	}
	var kr *pb.LeaseKeepAliveResponse
	if err == nil {
		kr, err = ka.Recv()
		ka.CloseSend()
	}
	c.rec(p+"LeaseKeepAlive", kr, err)
	w, err := c.watch.Watch(ctx)
	if err == nil {
		err = w.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{Key: []byte("k1")}}})
	}
	var wr *pb.WatchResponse
	if err == nil {
		wr, err = w.Recv()
	}
	c.rec(p+"Watch create", wr, err)
}

func (c *rawCase) put(name, key string, lease int64) {
	ctx, cancel := c.call()
	defer cancel()
	r, err := c.kv.Put(ctx, &pb.PutRequest{Key: []byte(key), Value: []byte("v"), Lease: lease})
	c.rec(name, r, err)
}

// masked shows strings with this member's id as <self> and runs of
// spaces as one (Go's protobuf text format varies its spacing).
func (c *rawCase) masked(ss ...string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		s = strings.ReplaceAll(s, strconv.FormatUint(c.self, 10), "<self>")
		s = strings.ReplaceAll(s, strconv.FormatUint(c.self, 16), "<self>")
		out[i] = strings.Join(strings.Fields(s), " ")
	}
	return out
}
