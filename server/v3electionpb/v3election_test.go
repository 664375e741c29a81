package v3electionpb

import (
	"bytes"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

func marshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func bytesField(b []byte, num protowire.Number, v []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), v)
}

func varintField(b []byte, num protowire.Number, v uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
}

// Encodings built field by field from etcd's v3election.proto.
func TestWireFormat(t *testing.T) {
	hdr := &pb.ResponseHeader{MemberId: 3, Revision: 9}
	var lk []byte
	lk = bytesField(lk, 1, []byte("e"))
	lk = bytesField(lk, 2, []byte("e/1f"))
	lk = varintField(lk, 3, 9)
	lk = varintField(lk, 4, 0x1f)
	want := bytesField(bytesField(nil, 1, marshal(t, hdr)), 2, lk)
	got := marshal(t, &CampaignResponse{Header: hdr, Leader: &LeaderKey{Name: []byte("e"), Key: []byte("e/1f"), Rev: 9, Lease: 0x1f}})
	if !bytes.Equal(got, want) {
		t.Fatalf("CampaignResponse encodes as %x, want %x", got, want)
	}

	kv := &mvccpb.KeyValue{Key: []byte("e/1f"), Value: []byte("v"), CreateRevision: 9, ModRevision: 9, Version: 1, Lease: 0x1f}
	want = bytesField(bytesField(nil, 1, marshal(t, hdr)), 2, marshal(t, kv))
	if got := marshal(t, &LeaderResponse{Header: hdr, Kv: kv}); !bytes.Equal(got, want) {
		t.Fatalf("LeaderResponse encodes as %x, want %x", got, want)
	}

	var in []byte
	in = bytesField(in, 1, lk)
	in = bytesField(in, 2, []byte("new"))
	var pr ProclaimRequest
	if err := proto.Unmarshal(in, &pr); err != nil || string(pr.Value) != "new" || pr.Leader == nil || pr.Leader.Rev != 9 || pr.Leader.Lease != 0x1f {
		t.Fatalf("ProclaimRequest decodes as %v, %v", &pr, err)
	}
	in = bytesField(nil, 1, []byte("e"))
	in = varintField(in, 2, 0x1f)
	in = bytesField(in, 3, []byte("val"))
	var cr CampaignRequest
	if err := proto.Unmarshal(in, &cr); err != nil || string(cr.Name) != "e" || cr.Lease != 0x1f || string(cr.Value) != "val" {
		t.Fatalf("CampaignRequest decodes as %v, %v", &cr, err)
	}
}
