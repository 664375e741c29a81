package server

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/internal/testport"
	"github.com/strata-db/strata/server/config"
)

// FuzzClientRPC sends arbitrary requests to a running member over gRPC:
// the fuzzer's bytes are decoded as the request message of one of the
// client RPCs (so every field can hold anything protobuf can carry: huge
// lengths, negative numbers, invalid UTF-8, deeply nested txns), and the
// member must answer each with a response or a gRPC status, never panic
// and never stop. RPCs that change the membership, enable auth or move
// the leadership are left out: a fuzzer that calls them takes the member
// out of service as it would an etcd member, and finds nothing after.
func FuzzClientRPC(f *testing.F) {
	dir := f.TempDir()
	client := fmt.Sprintf("127.0.0.1:%d", testport.Port(f))
	peer := fmt.Sprintf("http://127.0.0.1:%d", testport.Port(f))
	cfg, err := config.Parse([]string{"--name", "m1", "--data-dir", filepath.Join(dir, "d"),
		"--listen-client-urls", "http://" + client, "--advertise-client-urls", "http://" + client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "m1=" + peer,
		"--disk-probe=false", "--quota-backend-bytes", "104857600"}, nil, io.Discard)
	if err != nil {
		f.Fatal(err)
	}
	s, err := newServer(cfg, nil, storageHooks{})
	if err != nil {
		f.Fatal(err)
	}
	if err := s.Serve(); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = s.Stop() })
	select {
	case <-s.Ready():
	case <-time.After(30 * time.Second):
		f.Fatal("member not ready")
	}
	conn, err := grpc.NewClient(client, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { conn.Close() })

	for i, r := range fuzzRPCs {
		b, err := proto.Marshal(r.seed)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(byte(i), b)
	}
	f.Add(byte(3), deepTxn(200))
	f.Fuzz(func(t *testing.T, sel byte, in []byte) {
		r := fuzzRPCs[int(sel)%len(fuzzRPCs)]
		req := r.seed.ProtoReflect().New().Interface()
		if proto.Unmarshal(in, req) != nil {
			return // not a message of this type: gRPC would refuse it before the server
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		out := r.resp.ProtoReflect().New().Interface()
		err := conn.Invoke(ctx, r.method, req, out)
		if err != nil {
			if _, ok := status.FromError(err); !ok {
				t.Fatalf("%s: an error that is not a gRPC status: %v", r.method, err)
			}
		}
		select {
		case <-s.Done():
			t.Fatalf("the member stopped after %s %v: %v", r.method, req, s.Err())
		default:
		}
	})
}

// fuzzRPCs are the client RPCs FuzzClientRPC calls, with a valid request
// each as a seed.
var fuzzRPCs = []struct {
	method     string
	seed, resp proto.Message
}{
	{"/etcdserverpb.KV/Range", &pb.RangeRequest{Key: []byte("a"), RangeEnd: []byte("z"), Limit: 10}, &pb.RangeResponse{}},
	{"/etcdserverpb.KV/Put", &pb.PutRequest{Key: []byte("k"), Value: []byte("v"), PrevKv: true}, &pb.PutResponse{}},
	{"/etcdserverpb.KV/DeleteRange", &pb.DeleteRangeRequest{Key: []byte("k"), PrevKv: true}, &pb.DeleteRangeResponse{}},
	{"/etcdserverpb.KV/Txn", &pb.TxnRequest{
		Compare: []*pb.Compare{{Key: []byte("k"), Target: pb.Compare_VERSION, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Version{Version: 0}}},
		Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}}}},
		Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("k")}}}},
	}, &pb.TxnResponse{}},
	{"/etcdserverpb.KV/Compact", &pb.CompactionRequest{Revision: 1}, &pb.CompactionResponse{}},
	{"/etcdserverpb.Lease/LeaseGrant", &pb.LeaseGrantRequest{TTL: 60}, &pb.LeaseGrantResponse{}},
	{"/etcdserverpb.Lease/LeaseRevoke", &pb.LeaseRevokeRequest{ID: 1}, &pb.LeaseRevokeResponse{}},
	{"/etcdserverpb.Lease/LeaseTimeToLive", &pb.LeaseTimeToLiveRequest{ID: 1, Keys: true}, &pb.LeaseTimeToLiveResponse{}},
	{"/etcdserverpb.Lease/LeaseLeases", &pb.LeaseLeasesRequest{}, &pb.LeaseLeasesResponse{}},
	{"/etcdserverpb.Maintenance/Status", &pb.StatusRequest{}, &pb.StatusResponse{}},
	{"/etcdserverpb.Maintenance/HashKV", &pb.HashKVRequest{Revision: 0}, &pb.HashKVResponse{}},
	{"/etcdserverpb.Maintenance/Alarm", &pb.AlarmRequest{Action: pb.AlarmRequest_GET}, &pb.AlarmResponse{}},
	{"/etcdserverpb.Cluster/MemberList", &pb.MemberListRequest{Linearizable: true}, &pb.MemberListResponse{}},
	{"/etcdserverpb.Auth/UserAdd", &pb.AuthUserAddRequest{Name: "u", Password: "p"}, &pb.AuthUserAddResponse{}},
	{"/etcdserverpb.Auth/RoleAdd", &pb.AuthRoleAddRequest{Name: "r"}, &pb.AuthRoleAddResponse{}},
	{"/etcdserverpb.Auth/RoleGrantPermission", &pb.AuthRoleGrantPermissionRequest{Name: "r"}, &pb.AuthRoleGrantPermissionResponse{}},
	{"/etcdserverpb.Auth/UserGrantRole", &pb.AuthUserGrantRoleRequest{User: "u", Role: "r"}, &pb.AuthUserGrantRoleResponse{}},
	{"/etcdserverpb.Auth/Authenticate", &pb.AuthenticateRequest{Name: "u", Password: "p"}, &pb.AuthenticateResponse{}},
	{"/etcdserverpb.Auth/UserGet", &pb.AuthUserGetRequest{Name: "u"}, &pb.AuthUserGetResponse{}},
	{"/etcdserverpb.Auth/RoleGet", &pb.AuthRoleGetRequest{Role: "r"}, &pb.AuthRoleGetResponse{}},
}

// deepTxn is a txn request nested depth levels deep.
func deepTxn(depth int) []byte {
	t := &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("deep"), Value: []byte("v")}}}}}
	for i := 0; i < depth; i++ {
		t = &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestTxn{RequestTxn: t}}}}
	}
	b, _ := proto.Marshal(t)
	return b
}
