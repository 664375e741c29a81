package server

import (
	"bytes"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // gRPC's own codec, for comparison
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/mvcc"
)

// TestWireCodecBuffers: the client API's codec encodes what gRPC's own
// codec encodes, byte for byte, and round-trips it; and the buffer a
// response is encoded into is never more than twice the response (gRPC's
// default pool gave a 40 KiB or a 140 KiB response a 1 MiB buffer).
func TestWireCodecBuffers(t *testing.T) {
	grpcCodec := encoding.GetCodecV2("proto")
	for _, size := range []int{10, 2 << 10, 40 << 10, 140 << 10, 900 << 10, 3 << 20, 20 << 20} {
		resp := &pb.RangeResponse{Header: &pb.ResponseHeader{Revision: 7}, Count: 1,
			Kvs: []*mvccpb.KeyValue{{Key: []byte("k"), Value: bytes.Repeat([]byte{'v'}, size), ModRevision: 7}}}
		data, err := wireCodec{}.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		want, err := grpcCodec.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(data.Materialize(), want.Materialize()) {
			t.Fatalf("%d-byte value: the encoding differs from gRPC's codec", size)
		}
		n := data.Len()
		var capacity int
		for _, b := range data {
			capacity += cap(b.ReadOnlyData())
		}
		if n > 1<<10 && n <= 16<<20 && capacity > 2*n {
			t.Fatalf("a %d-byte response was encoded into %d bytes of buffer (more than twice)", n, capacity)
		}
		var got pb.RangeResponse
		if err := (wireCodec{}).Unmarshal(data, &got); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&got, resp) {
			t.Fatalf("%d-byte value: round trip changed the response", size)
		}
		t.Logf("response of %d bytes: buffer of %d", n, capacity)
		data.Free()
		want.Free()
	}
}

// TestWireWatchResponse: a watch response sent as its head (appendWatchHead)
// and its shared events is, through the codec, the bytes proto.Marshal
// makes of the whole response, zero fields and large values included, and
// decodes to it.
func TestWireWatchResponse(t *testing.T) {
	evs := []*mvccpb.Event{{Type: mvccpb.Event_PUT, Kv: &mvccpb.KeyValue{Key: []byte("k"), Value: bytes.Repeat([]byte("v"), 300), CreateRevision: 2, ModRevision: 9, Version: 3}}}
	events, err := proto.Marshal(&pb.WatchResponse{Events: evs})
	if err != nil {
		t.Fatal(err)
	}
	codec := wireCodec{}
	for _, c := range []struct {
		cluster, member uint64
		rev             int64
		term            uint64
		id              int64
	}{
		{0, 0, 0, 0, 0},
		{0x1c2d3e4f5a6b7c8d, 0x8e9fa0b1c2d3e4f5, 9, 2, 0},
		{1, 2, 1 << 40, 1<<64 - 1, 7},
		{3, 0, 5, 0, 1<<63 - 1},
		{3, 4, 5, 6, -1},
	} {
		want, err := proto.Marshal(&pb.WatchResponse{
			Header:  &pb.ResponseHeader{ClusterId: c.cluster, MemberId: c.member, Revision: c.rev, RaftTerm: c.term},
			WatchId: c.id, Events: evs,
		})
		if err != nil {
			t.Fatal(err)
		}
		head := appendWatchHead(nil, c.cluster, c.member, c.rev, c.term, mvcc.WatchID(c.id))
		data, err := codec.Marshal(&wireWatchResponse{head: head, events: events})
		if err != nil {
			t.Fatal(err)
		}
		got := data.Materialize()
		if !bytes.Equal(got, want) {
			t.Fatalf("%+v: sent %x, proto.Marshal %x", c, got, want)
		}
		var back pb.WatchResponse
		if err := codec.Unmarshal(data, &back); err != nil {
			t.Fatal(err)
		}
		if back.WatchId != c.id || back.Header.GetRevision() != c.rev || back.Header.GetRaftTerm() != c.term || len(back.Events) != 1 || !proto.Equal(back.Events[0], evs[0]) {
			t.Fatalf("%+v: decoded %v", c, &back)
		}
	}
}
