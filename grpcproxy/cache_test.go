package grpcproxy

import (
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

func TestRangeCacheInvalidatesWhatAWriteTouches(t *testing.T) {
	c := newRangeCache()
	r := func(k, end string, rev int64) *pb.RangeRequest {
		return &pb.RangeRequest{Key: []byte(k), RangeEnd: []byte(end), Revision: rev, Serializable: true}
	}
	resp := &pb.RangeResponse{Count: 1}
	c.add(r("a", "", 0), resp)     // one key
	c.add(r("b", "d", 0), resp)    // [b, d)
	c.add(r("x", "\x00", 0), resp) // from x to the end
	c.add(r("b", "d", 5), resp)    // at a revision: never invalidated
	if got, _ := c.get(r("a", "", 0)); got != resp {
		t.Fatal("a range just added is not there")
	}
	c.invalidate([]byte("c"), nil) // inside [b, d)
	if got, _ := c.get(r("b", "d", 0)); got != nil {
		t.Fatal("a put inside [b, d) left it cached")
	}
	if got, _ := c.get(r("a", "", 0)); got == nil {
		t.Fatal("a put of c dropped the range of a")
	}
	if got, _ := c.get(r("b", "d", 5)); got == nil {
		t.Fatal("a put dropped a range asked at a revision")
	}
	c.invalidate([]byte("e"), []byte("\x00")) // from e to the end meets [x, ∞)
	if got, _ := c.get(r("x", "\x00", 0)); got != nil {
		t.Fatal("a delete to the end left [x, ∞) cached")
	}
	c.invalidate([]byte("0"), []byte("a")) // [0, a) ends before a
	if got, _ := c.get(r("a", "", 0)); got == nil {
		t.Fatal("a delete of [0, a) dropped the range of a")
	}
	c.compact(7)
	if _, err := c.get(r("b", "d", 5)); err != rpctypes.ErrGRPCCompacted {
		t.Fatalf("a range below the compaction: %v, want compacted", err)
	}
	c.add(r("k", "", 0), resp)
	if got, _ := c.get(r("k", "", 0)); got != nil {
		t.Fatal("after a compaction, ranges at the current revision are not cached (as in etcd)")
	}
}
