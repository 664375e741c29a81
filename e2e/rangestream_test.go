package e2e

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// rangeStreamTarget is the --max-request-bytes both servers run with in
// TestRangeStreamChunks: the chunk size etcd's rule aims at, small
// enough that a few hundred keys take the limit through its doublings.
const rangeStreamTarget = 64 << 10

// TestRangeStreamChunks calls the RangeStream RPC with etcd's generated
// client on etcd and the target and compares every message of every
// stream: how many key-values, the first and last key, header, more,
// count and encoded size. So chunk boundaries, the doubling of the chunk
// limit, the revision pinned by the first chunk, the final count and
// etcd's refusals are etcd's, not only what etcdctl merges. Where etcd
// would send a chunk over twice the target size, Strata ends it at that
// size (see server/rangestream.go): on such data only the merged answer
// is compared, and the target's chunks are checked against the bound.
func TestRangeStreamChunks(t *testing.T) {
	runRawDiff(t, []string{fmt.Sprintf("--max-request-bytes=%d", rangeStreamTarget)}, rangeStreamSequence)
}

func rangeStreamSequence(c *rawCase) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// puts writes n keys under prefix, size(i) bytes of value each, in
	// txns of at most 60 KiB.
	puts := func(prefix string, n int, size func(i int) int) {
		var ops []*pb.RequestOp
		bytes := 0
		flush := func() {
			if len(ops) > 0 {
				c.must(c.kv.Txn(ctx, &pb.TxnRequest{Success: ops}))
			}
			ops, bytes = nil, 0
		}
		for i := 0; i < n; i++ {
			v := strings.Repeat(string(rune('a'+i%26)), size(i))
			if len(ops) == 100 || bytes+len(v) > 60<<10 {
				flush()
			}
			ops = append(ops, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(fmt.Sprintf("%s%04d", prefix, i)), Value: []byte(v)}}})
			bytes += len(v)
		}
		flush()
	}
	puts("u/", 400, func(int) int { return 3000 })
	puts("t/", 3000, func(i int) int { return i % 17 })
	// Runs of small and large values: a limit doubled on the small ones
	// meets 40 large ones.
	puts("w/", 200, func(i int) int {
		if (i/40)%2 == 0 {
			return 100
		}
		return 6000
	})
	// A lease of a fixed ID: each server picks its own otherwise, and
	// the two IDs' encodings can differ in length, which the transcript's
	// byte counts would show.
	lease, err := c.lease.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: 0x5eed1ea5e, TTL: 600})
	c.must(lease, err)
	c.must(c.kv.Put(ctx, &pb.PutRequest{Key: []byte("t/leased"), Value: []byte("v"), Lease: lease.ID}))
	c.must(c.kv.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte("u/0100"), RangeEnd: []byte("u/0110")}))
	c.must(c.kv.Put(ctx, &pb.PutRequest{Key: []byte("u/0005"), Value: []byte("short")}))
	st, err := c.kv.Range(ctx, &pb.RangeRequest{Key: []byte("u/"), CountOnly: true})
	c.must(st, err)
	mid := st.Header.Revision - 50

	// stream records every message of one stream, or its error.
	stream := func(name string, ctx context.Context, r *pb.RangeRequest) {
		rs, err := c.kv.RangeStream(ctx, r)
		if err != nil {
			c.rec(name, nil, err)
			return
		}
		for i := 0; ; i++ {
			m, err := rs.Recv()
			if errors.Is(err, io.EOF) {
				c.note("%s: end after %d messages", name, i)
				return
			}
			if err != nil {
				c.rec(fmt.Sprintf("%s: message %d", name, i), nil, err)
				return
			}
			c.note("%s: message %d: %s", name, i, chunkSummary(c, m.RangeResponse))
		}
	}
	key := func(k string) []byte { return []byte(k) }
	for _, s := range []struct {
		name string
		r    *pb.RangeRequest
	}{
		{"u/ prefix", &pb.RangeRequest{Key: key("u/"), RangeEnd: key("u0")}},
		{"t/ prefix", &pb.RangeRequest{Key: key("t/"), RangeEnd: key("t0")}},
		{"t/ prefix keys-only", &pb.RangeRequest{Key: key("t/"), RangeEnd: key("t0"), KeysOnly: true}},
		{"everything", &pb.RangeRequest{Key: key("\x00"), RangeEnd: key("\x00"), KeysOnly: true}},
		{"u/ limit 25", &pb.RangeRequest{Key: key("u/"), RangeEnd: key("u0"), Limit: 25}},
		{"u/ limit 10", &pb.RangeRequest{Key: key("u/"), RangeEnd: key("u0"), Limit: 10}},
		{"u/ limit 390 (all)", &pb.RangeRequest{Key: key("u/"), RangeEnd: key("u0"), Limit: 390}},
		{"t/ limit 1000", &pb.RangeRequest{Key: key("t/"), RangeEnd: key("t0"), Limit: 1000}},
		{"t/ negative limit", &pb.RangeRequest{Key: key("t/"), RangeEnd: key("t0"), Limit: -5, KeysOnly: true}},
		{"t/ count-only", &pb.RangeRequest{Key: key("t/"), RangeEnd: key("t0"), CountOnly: true}},
		{"t/ count-only limit 3", &pb.RangeRequest{Key: key("t/"), RangeEnd: key("t0"), CountOnly: true, Limit: 3}},
		{"u/ at a past revision", &pb.RangeRequest{Key: key("u/"), RangeEnd: key("u0"), Revision: mid}},
		{"u/ serializable", &pb.RangeRequest{Key: key("u/"), RangeEnd: key("u0"), Serializable: true, KeysOnly: true}},
		{"one key", &pb.RangeRequest{Key: key("u/0005")}},
		{"a deleted key", &pb.RangeRequest{Key: key("u/0105")}},
		{"an empty range", &pb.RangeRequest{Key: key("x/"), RangeEnd: key("x0")}},
		{"t/ sorted by mod revision", &pb.RangeRequest{Key: key("t/"), RangeEnd: key("t0"), SortTarget: pb.RangeRequest_MOD, KeysOnly: true}},
		{"u/ sorted by value", &pb.RangeRequest{Key: key("u/"), RangeEnd: key("u0"), SortTarget: pb.RangeRequest_VALUE, Limit: 50}},
		{"key ascending", &pb.RangeRequest{Key: key("t/"), RangeEnd: key("t0"), SortTarget: pb.RangeRequest_KEY, SortOrder: pb.RangeRequest_ASCEND, Limit: 30}},
		{"empty key", &pb.RangeRequest{}},
		{"descending", &pb.RangeRequest{Key: key("t/"), RangeEnd: key("t0"), SortOrder: pb.RangeRequest_DESCEND}},
		{"ascending by version", &pb.RangeRequest{Key: key("t/"), RangeEnd: key("t0"), SortOrder: pb.RangeRequest_ASCEND, SortTarget: pb.RangeRequest_VERSION}},
		{"a sort order etcd does not know", &pb.RangeRequest{Key: key("t/"), SortOrder: 7}},
		{"min mod revision", &pb.RangeRequest{Key: key("t/"), RangeEnd: key("t0"), MinModRevision: 3}},
		{"max create revision", &pb.RangeRequest{Key: key("t/"), RangeEnd: key("t0"), MaxCreateRevision: 3}},
		{"a future revision", &pb.RangeRequest{Key: key("t/"), RangeEnd: key("t0"), Revision: st.Header.Revision + 10}},
	} {
		stream(s.name, ctx, s.r)
	}
	stream("with a leader required", metadata.AppendToOutgoingContext(ctx, rpctypes.MetadataRequireLeaderKey, rpctypes.MetadataHasLeader),
		&pb.RangeRequest{Key: key("u/"), RangeEnd: key("u0"), Limit: 15})

	// w/: etcd's chunk after the small values holds 40 large ones, over
	// twice the target; compare what the streams add up to, and hold the
	// target's chunks to the bound.
	rs, err := c.kv.RangeStream(ctx, &pb.RangeRequest{Key: key("w/"), RangeEnd: key("w0")})
	c.must(rs, err)
	merged := &pb.RangeResponse{}
	largest := 0
	for {
		m, err := rs.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		c.must(m, err)
		largest = max(largest, proto.Size(m.RangeResponse))
		proto.Merge(merged, m.RangeResponse)
	}
	c.note("w/ merged: %d key-values, header %s, more %v, count %d, sha256 %x", len(merged.Kvs), c.json(&pb.RangeResponse{Header: merged.Header}),
		merged.More, merged.Count, sha256.Sum256(mustMarshal(c, &pb.RangeResponse{Kvs: merged.Kvs})))
	unary, err := c.kv.Range(ctx, &pb.RangeRequest{Key: key("w/"), RangeEnd: key("w0")})
	c.must(unary, err)
	if !proto.Equal(unary, merged) {
		c.t.Errorf("%s: the w/ stream does not merge into the unary answer", c.srv.Bin())
	}
	c.t.Logf("%s: w/ largest chunk %d bytes (target %d)", c.srv.Bin(), largest, rangeStreamTarget)
	if !strings.HasSuffix(c.srv.Bin(), "/etcd") && largest > 2*rangeStreamTarget+64 {
		c.t.Errorf("%s: a chunk of %d bytes, over twice the target (%d)", c.srv.Bin(), largest, rangeStreamTarget)
	}

	// Compaction: the revision a stream is pinned to fails once
	// compacted, as any read there.
	cur, err := c.kv.Range(ctx, &pb.RangeRequest{Key: key("u/0005")})
	c.must(cur, err)
	c.must(c.kv.Compact(ctx, &pb.CompactionRequest{Revision: mid, Physical: true}))
	stream("at a compacted revision", ctx, &pb.RangeRequest{Key: key("u/"), RangeEnd: key("u0"), Revision: mid - 1})
	stream("at the compact revision", ctx, &pb.RangeRequest{Key: key("u/"), RangeEnd: key("u0"), Revision: mid, Limit: 12})
}

// chunkSummary is one message of a stream, without its key-values'
// bytes: how many, the first and last key, and the rest as JSON.
func chunkSummary(c *rawCase, r *pb.RangeResponse) string {
	first, last := "", ""
	if len(r.Kvs) > 0 {
		first, last = string(r.Kvs[0].Key), string(r.Kvs[len(r.Kvs)-1].Key)
	}
	rest := &pb.RangeResponse{Header: r.Header, More: r.More, Count: r.Count}
	leases := 0
	for _, kv := range r.Kvs {
		if kv.Lease != 0 {
			leases++
		}
	}
	// The size without the header's ids, which differ between servers.
	sized := proto.CloneOf(r)
	if sized.Header != nil {
		sized.Header = &pb.ResponseHeader{Revision: sized.Header.Revision}
	}
	return fmt.Sprintf("%d kvs [%s .. %s], %d with a lease, %d bytes, %s", len(r.Kvs), first, last, leases, proto.Size(sized), c.json(rest))
}

func mustMarshal(c *rawCase, m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		c.t.Fatal(err)
	}
	return b
}
