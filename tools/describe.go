package tools

import (
	"bytes"
	"fmt"
	"strings"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/schema"
)

// Request is the decoded, human-readable form of one WAL entry.
type Request struct {
	Kind    string   `json:"request"`           // put, delete_range, txn, lease_grant, ...
	Summary string   `json:"summary"`           // one line; secrets masked
	Keys    []string `json:"keys,omitempty"`    // keys the request writes or compares
	Ranges  []string `json:"ranges,omitempty"`  // range ends paired with Keys where set
	ID      uint64   `json:"id,omitempty"`      // request id
	Error   string   `json:"error,omitempty"`   // set when the payload does not decode
	Lease   int64    `json:"lease,omitempty"`   // lease id for lease requests
	Members []uint64 `json:"members,omitempty"` // node ids for conf changes
}

const masked = "****"

// DescribeEntry decodes a raft entry as the server writes it: normal
// entries hold an etcdserverpb.InternalRaftRequest, conf-change entries a
// raftpb.ConfChange or ConfChangeV2. An empty normal entry is the one a
// new leader appends.
func DescribeEntry(e *raftpb.Entry) Request {
	switch e.GetType() {
	case raftpb.EntryConfChange:
		var cc raftpb.ConfChange
		if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
			return Request{Kind: "conf_change", Error: err.Error()}
		}
		return Request{Kind: "conf_change", ID: cc.GetId(), Members: []uint64{cc.GetNodeId()},
			Summary: fmt.Sprintf("%s node=%x", cc.GetType(), cc.GetNodeId())}
	case raftpb.EntryConfChangeV2:
		var cc raftpb.ConfChangeV2
		if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
			return Request{Kind: "conf_change_v2", Error: err.Error()}
		}
		r := Request{Kind: "conf_change_v2"}
		var parts []string
		for _, c := range cc.GetChanges() {
			parts = append(parts, fmt.Sprintf("%s node=%x", c.GetType(), c.GetNodeId()))
			r.Members = append(r.Members, c.GetNodeId())
		}
		r.Summary = strings.Join(parts, ", ")
		return r
	}
	if len(e.GetData()) == 0 {
		return Request{Kind: "empty", Summary: "leader's empty entry"}
	}
	var req pb.InternalRaftRequest
	if err := schema.DecodeRequest(e.GetData(), &req); err != nil {
		return Request{Kind: "unknown", Error: err.Error(), Summary: fmt.Sprintf("%d bytes", len(e.GetData()))}
	}
	r := describeRequest(&req)
	r.ID = schema.RequestID(&req)
	return r
}

func (r *Request) key(k, end []byte) {
	r.Keys = append(r.Keys, string(k))
	if len(end) > 0 {
		for len(r.Ranges) < len(r.Keys)-1 {
			r.Ranges = append(r.Ranges, "")
		}
		r.Ranges = append(r.Ranges, string(end))
	}
}

func rangeText(k, end []byte) string {
	switch {
	case len(end) == 0:
		return fmt.Sprintf("key=%q", k)
	case bytes.Equal(end, []byte{0}):
		return fmt.Sprintf("from-key=%q", k)
	default:
		return fmt.Sprintf("range=[%q, %q)", k, end)
	}
}

func describeRequest(req *pb.InternalRaftRequest) Request {
	var r Request
	switch {
	case req.Put != nil:
		p := req.Put
		r.Kind = "put"
		r.key(p.GetKey(), nil)
		r.Summary = fmt.Sprintf("key=%q value-size=%d", p.GetKey(), len(p.GetValue()))
		if p.GetLease() != 0 {
			r.Summary += fmt.Sprintf(" lease=%x", p.GetLease())
		}
	case req.DeleteRange != nil:
		d := req.DeleteRange
		r.Kind = "delete_range"
		r.key(d.GetKey(), d.GetRangeEnd())
		r.Summary = rangeText(d.GetKey(), d.GetRangeEnd())
	case req.Txn != nil:
		r.Kind = "txn"
		describeTxn(&r, req.Txn)
	case req.Compaction != nil:
		r.Kind = "compaction"
		r.Summary = fmt.Sprintf("revision=%d physical=%v", req.Compaction.GetRevision(), req.Compaction.GetPhysical())
	case req.LeaseGrant != nil:
		r.Kind, r.Lease = "lease_grant", req.LeaseGrant.GetID()
		r.Summary = fmt.Sprintf("id=%x ttl=%d", req.LeaseGrant.GetID(), req.LeaseGrant.GetTTL())
	case req.LeaseRevoke != nil:
		r.Kind, r.Lease = "lease_revoke", req.LeaseRevoke.GetID()
		r.Summary = fmt.Sprintf("id=%x", req.LeaseRevoke.GetID())
	case req.LeaseCheckpoint != nil:
		r.Kind = "lease_checkpoint"
		r.Summary = fmt.Sprintf("%d checkpoints", len(req.LeaseCheckpoint.GetCheckpoints()))
	case req.Alarm != nil:
		r.Kind = "alarm"
		r.Summary = fmt.Sprintf("%s %s member=%x", req.Alarm.GetAction(), req.Alarm.GetAlarm(), req.Alarm.GetMemberID())
	case req.Range != nil:
		r.Kind = "range"
		r.Summary = rangeText(req.Range.GetKey(), req.Range.GetRangeEnd())
	default:
		describeAuthOrCluster(&r, req)
	}
	return r
}

func describeTxn(r *Request, t *pb.TxnRequest) {
	for _, c := range t.GetCompare() {
		r.key(c.GetKey(), c.GetRangeEnd())
	}
	ops := func(list []*pb.RequestOp) string {
		var parts []string
		for _, op := range list {
			switch {
			case op.GetRequestPut() != nil:
				p := op.GetRequestPut()
				r.key(p.GetKey(), nil)
				parts = append(parts, fmt.Sprintf("put %q", p.GetKey()))
			case op.GetRequestDeleteRange() != nil:
				d := op.GetRequestDeleteRange()
				r.key(d.GetKey(), d.GetRangeEnd())
				parts = append(parts, "delete "+rangeText(d.GetKey(), d.GetRangeEnd()))
			case op.GetRequestRange() != nil:
				g := op.GetRequestRange()
				parts = append(parts, "get "+rangeText(g.GetKey(), g.GetRangeEnd()))
			case op.GetRequestTxn() != nil:
				parts = append(parts, "txn{...}")
			}
		}
		return strings.Join(parts, ", ")
	}
	r.Summary = fmt.Sprintf("compares=%d success=[%s] failure=[%s]", len(t.GetCompare()), ops(t.GetSuccess()), ops(t.GetFailure()))
}

// describeAuthOrCluster covers the auth and membership requests. Passwords
// and password hashes are never printed.
func describeAuthOrCluster(r *Request, req *pb.InternalRaftRequest) {
	switch {
	case req.AuthEnable != nil:
		r.Kind = "auth_enable"
	case req.AuthDisable != nil:
		r.Kind = "auth_disable"
	case req.AuthStatus != nil:
		r.Kind = "auth_status"
	case req.Authenticate != nil:
		r.Kind, r.Summary = "authenticate", fmt.Sprintf("name=%q password=%s", req.Authenticate.GetName(), masked)
	case req.AuthUserAdd != nil:
		u := req.AuthUserAdd
		r.Kind, r.Summary = "auth_user_add", fmt.Sprintf("name=%q password=%s no-password=%v", u.GetName(), masked, u.GetOptions().GetNoPassword())
	case req.AuthUserDelete != nil:
		r.Kind, r.Summary = "auth_user_delete", fmt.Sprintf("name=%q", req.AuthUserDelete.GetName())
	case req.AuthUserGet != nil:
		r.Kind, r.Summary = "auth_user_get", fmt.Sprintf("name=%q", req.AuthUserGet.GetName())
	case req.AuthUserChangePassword != nil:
		r.Kind, r.Summary = "auth_user_change_password", fmt.Sprintf("name=%q password=%s", req.AuthUserChangePassword.GetName(), masked)
	case req.AuthUserGrantRole != nil:
		g := req.AuthUserGrantRole
		r.Kind, r.Summary = "auth_user_grant_role", fmt.Sprintf("user=%q role=%q", g.GetUser(), g.GetRole())
	case req.AuthUserRevokeRole != nil:
		g := req.AuthUserRevokeRole
		r.Kind, r.Summary = "auth_user_revoke_role", fmt.Sprintf("name=%q role=%q", g.GetName(), g.GetRole())
	case req.AuthUserList != nil:
		r.Kind = "auth_user_list"
	case req.AuthRoleList != nil:
		r.Kind = "auth_role_list"
	case req.AuthRoleAdd != nil:
		r.Kind, r.Summary = "auth_role_add", fmt.Sprintf("name=%q", req.AuthRoleAdd.GetName())
	case req.AuthRoleDelete != nil:
		r.Kind, r.Summary = "auth_role_delete", fmt.Sprintf("role=%q", req.AuthRoleDelete.GetRole())
	case req.AuthRoleGet != nil:
		r.Kind, r.Summary = "auth_role_get", fmt.Sprintf("role=%q", req.AuthRoleGet.GetRole())
	case req.AuthRoleGrantPermission != nil:
		g := req.AuthRoleGrantPermission
		p := g.GetPerm()
		r.Kind = "auth_role_grant_permission"
		r.Summary = fmt.Sprintf("role=%q perm=%s %s", g.GetName(), p.GetPermType(), rangeText(p.GetKey(), p.GetRangeEnd()))
	case req.AuthRoleRevokePermission != nil:
		g := req.AuthRoleRevokePermission
		r.Kind = "auth_role_revoke_permission"
		r.Summary = fmt.Sprintf("role=%q %s", g.GetRole(), rangeText(g.GetKey(), g.GetRangeEnd()))
	case req.ClusterVersionSet != nil:
		r.Kind, r.Summary = "cluster_version_set", "version="+req.ClusterVersionSet.GetVer()
	case req.ClusterMemberAttrSet != nil:
		a := req.ClusterMemberAttrSet
		r.Kind = "cluster_member_attr_set"
		r.Summary = fmt.Sprintf("member=%x name=%q client-urls=%v", a.GetMember_ID(), a.GetMemberAttributes().GetName(), a.GetMemberAttributes().GetClientUrls())
	case req.DowngradeInfoSet != nil:
		r.Kind = "downgrade_info_set"
		r.Summary = fmt.Sprintf("enabled=%v version=%s", req.DowngradeInfoSet.GetEnabled(), req.DowngradeInfoSet.GetVer())
	default:
		r.Kind = "unknown"
	}
}
