package server

import (
	"bytes"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // gRPC's own codec, for comparison
	"google.golang.org/protobuf/proto"
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
