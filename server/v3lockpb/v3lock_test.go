package v3lockpb

import (
	"bytes"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// The encoding is checked against one built field by field from
// etcd's v3lock.proto, so a wrong number or type in a tag fails here.
func TestWireFormat(t *testing.T) {
	hdr := &pb.ResponseHeader{ClusterId: 1, Revision: 7}
	hb, err := proto.Marshal(hdr)
	if err != nil {
		t.Fatal(err)
	}
	var want []byte
	want = protowire.AppendTag(want, 1, protowire.BytesType)
	want = protowire.AppendBytes(want, hb)
	want = protowire.AppendTag(want, 2, protowire.BytesType)
	want = protowire.AppendBytes(want, []byte("l/694d"))
	got, err := proto.MarshalOptions{Deterministic: true}.Marshal(&LockResponse{Header: hdr, Key: []byte("l/694d")})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("LockResponse encodes as %x, want %x", got, want)
	}
	var req LockRequest
	in := protowire.AppendTag(nil, 1, protowire.BytesType)
	in = protowire.AppendBytes(in, []byte("mylock"))
	in = protowire.AppendTag(in, 2, protowire.VarintType)
	in = protowire.AppendVarint(in, 0x694d)
	if err := proto.Unmarshal(in, &req); err != nil || string(req.Name) != "mylock" || req.Lease != 0x694d {
		t.Fatalf("LockRequest decodes as %v, %v", &req, err)
	}
	if n := (&req).ProtoReflect().Descriptor().FullName(); n != "v3lockpb.LockRequest" {
		t.Fatalf("full name %s", n)
	}
	var back LockResponse
	js, err := protojson.Marshal(&LockResponse{Header: hdr, Key: []byte("k")})
	if err != nil {
		t.Fatal(err)
	}
	if err := protojson.Unmarshal(js, &back); err != nil || string(back.Key) != "k" || back.Header == nil || back.Header.Revision != 7 {
		t.Fatalf("json round trip of %s: %v %v", js, &back, err)
	}
}
