package server

import (
	"context"
	"math"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/auth"
	"github.com/strata-db/strata/mvcc"
)

// RangeStream is etcd 3.7's chunked range: the answer of a Range sent as
// a stream of RangeStreamResponses, whose proto.Merge is the unary
// answer. The rules are etcd's (etcdserver/v3_server.go and
// v3rpc/key.go), so that a client sees the same messages:
//
//   - Refused with Unimplemented: a sort order other than none or
//     ascending by key, and min/max mod and create revision filters. A
//     sort target with order NONE is accepted, and each chunk is sorted
//     ascending by it on its own, as etcd does.
//   - A linearizable stream waits for the read index once, before the
//     permission check; a serializable one reads at once.
//   - count_only: one message, with the header and the count.
//   - Otherwise chunks of key-values in key order. The first holds at
//     most 10; each next one's limit doubles while the last chunk's
//     encoded size was under half of --max-request-bytes and halves
//     while it was over twice that (etcd's adjustChunkLimit). The first
//     chunk is read at the request's revision (0: the current one) and
//     every later one at the revision the first answered with, so writes
//     made during the stream are not seen and a compaction past that
//     revision fails the stream with etcd's compacted error.
//   - Only the last message has the header (its revision is that first
//     one), more and count; count is the range's total at that
//     revision, as the unary count.
//
// Memory: each chunk is read into one buffer of the stored key-values as
// they are (mvcc.Store.RangeChunk), which the codec sends without a copy
// (wireRangeChunk), and nothing else of the result is kept. The buffer
// comes from the member's chunkPool and goes back to it once gRPC has
// written it, and the read's own buffers (the keys found, the values'
// places) stay with the stream from one chunk to the next
// (mvcc.ChunkReader): a stream reuses a few buffers instead of leaving
// garbage per chunk, which RSS counts until the collector runs (a new
// buffer per chunk grew the member's RSS by 31 MiB over a stream of
// 119 MiB). A chunk also ends before its key-values pass twice
// --max-request-bytes (the size at which etcd's rule halves the next
// chunk), where etcd would send a larger one; this changes where a
// chunk ends, never what the merged answer holds. gRPC lets a stream run at most one message ahead
// of what the client's flow control has taken (its per-stream write
// quota): Send returns once the message before has nearly all been
// written, and the message is released once written. So a stream holds
// at most three chunks, the one being read, the one queued and the tail
// of the one before: 3 × 2 × --max-request-bytes (9 MiB at the default),
// and beside them gRPC's own buffers for the connection (under 2 MiB),
// whatever the size of the result, however slowly the client reads.
// e2e TestRangeStreamMemory measures it on the live heap, and row 9 of
// make bench-scale on the anonymous RSS.
// Between chunks it holds no read transaction and no lock.
func (k *kvServer) RangeStream(r *pb.RangeRequest, stream pb.KV_RangeStreamServer) error {
	if err := checkRangeStreamRequest(r); err != nil {
		return err
	}
	s := k.s
	ctx := stream.Context()
	if err := s.requireLeader(ctx); err != nil {
		return err
	}
	if !r.Serializable {
		if err := s.linearizableRead(ctx); err != nil {
			return toGRPCError(err)
		}
	}
	ai, err := s.authInfo(ctx)
	if err != nil {
		return err
	}
	if err := s.auth.IsRangePermitted(ai, r.Key, r.RangeEnd); err != nil {
		return auth.ToGRPCError(err)
	}
	if err := s.rangeStream(ctx, r, stream, k.chunks); err != nil {
		return toGRPCError(err)
	}
	return nil
}

// checkRangeStreamRequest is checkRangeRequest with RangeStream's own
// refusals, in etcd's words and codes.
func checkRangeStreamRequest(r *pb.RangeRequest) error {
	if err := checkRangeRequest(r); err != nil {
		return err
	}
	if r.SortOrder != pb.RangeRequest_NONE && (r.SortTarget != pb.RangeRequest_KEY || r.SortOrder != pb.RangeRequest_ASCEND) {
		return status.Error(codes.Unimplemented, "RangeStream does not support custom sort orders")
	}
	if r.MinModRevision != 0 || r.MaxModRevision != 0 || r.MinCreateRevision != 0 || r.MaxCreateRevision != 0 {
		return status.Error(codes.Unimplemented, "RangeStream does not support revision filters")
	}
	return nil
}

// rangeStreamFirstLimit is the first chunk's limit, etcd's
// initialStreamChunkLimit.
const rangeStreamFirstLimit = 10

func (s *Server) rangeStream(ctx context.Context, r *pb.RangeRequest, stream pb.KV_RangeStreamServer, chunks *chunkPool) error {
	if r.CountOnly {
		var resp *pb.RangeResponse
		err := s.streamRead(func() (err error) {
			resp, err = s.kv.Range(r)
			return err
		})
		if err != nil {
			return err
		}
		out := &pb.RangeResponse{Header: s.streamHeader(resp.Header.Revision), Count: resp.Count}
		return stream.Send(&pb.RangeStreamResponse{RangeResponse: out})
	}
	target := int(s.cfg.MaxRequestBytes)
	total := r.Limit
	if total == 0 {
		total = math.MaxInt64
	}
	q := proto.CloneOf(r)
	q.Limit = min(rangeStreamFirstLimit, total)
	if total < 0 {
		// etcd gives a negative limit to its one read as it is, which
		// reads everything, in one message. Here the chunk's byte bound
		// still ends it; the chunks after it have no limit either.
		q.Limit, total = 0, math.MaxInt64
	}
	var count, headerRev int64
	var held *[]byte
	cr := &mvcc.ChunkReader{Alloc: func(n int) []byte {
		held = chunks.Get(n)
		return (*held)[:0]
	}}
	for {
		var c mvcc.Chunk
		err := s.streamRead(func() (err error) {
			c, err = s.kv.RangeChunk(q, 2*target, cr)
			return err
		})
		if err != nil {
			return err
		}
		resp := c.Resp
		if headerRev == 0 {
			headerRev = resp.Header.Revision
			if q.Revision == 0 {
				q.Revision = headerRev
			}
		}
		// etcd's rule looks at the chunk's size as the store read it,
		// with its own header and count.
		size := proto.Size(resp)
		more := resp.More
		count += int64(c.Len)
		done := !more || count == total
		resp.Header, resp.Count, resp.More = nil, 0, false
		if done {
			resp.Header, resp.More, resp.Count = s.streamHeader(headerRev), more, count
			if more {
				var rest *pb.RangeResponse
				err := s.streamRead(func() (err error) {
					rest, err = s.kv.Range(&pb.RangeRequest{Key: append(c.Last, 0), RangeEnd: r.RangeEnd, Revision: q.Revision, CountOnly: true})
					return err
				})
				if err != nil {
					return err
				}
				resp.Count += rest.Count
			}
		}
		var msg any = &pb.RangeStreamResponse{RangeResponse: resp}
		if c.Pooled {
			*held = resp.ProtoReflect().GetUnknown()
			msg = &wireRangeChunk{resp: resp, kvs: held, pool: chunks}
		}
		if err := stream.SendMsg(msg); err != nil {
			return err
		}
		if done {
			return nil
		}
		q.Key = append(c.Last, 0)
		if q.Limit != 0 {
			q.Limit = min(nextChunkLimit(q.Limit, size, target), total-count)
		}
	}
}

// wireRangeChunk is a RangeStreamResponse whose key-values, resp's
// unknown fields, are *kvs, a buffer of pool's: wireCodec writes them
// without a copy and gives the buffer back to pool once gRPC has
// written it.
type wireRangeChunk struct {
	resp *pb.RangeResponse
	kvs  *[]byte
	pool mem.BufferPool
}

// chunkPool holds the buffers RangeStream's chunks are encoded into,
// each of capacity size, the most a chunk holds (twice
// --max-request-bytes); a chunk of one key-value larger than that gets
// a buffer of its own, left to the collector. Its buffers are handed out
// as they were left: RangeChunk writes every byte of what it returns. It
// is a mem.BufferPool, as gRPC frees a written buffer into its pool.
type chunkPool struct {
	size int
	pool sync.Pool
}

func newChunkPool(size int) *chunkPool { return &chunkPool{size: size} }

func (p *chunkPool) Get(n int) *[]byte {
	if n > p.size {
		b := make([]byte, n)
		return &b
	}
	if b, ok := p.pool.Get().(*[]byte); ok {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, p.size)
	return &b
}

func (p *chunkPool) Put(b *[]byte) {
	if cap(*b) == p.size {
		p.pool.Put(b)
	}
}

// nextChunkLimit is etcd's adjustChunkLimit: the next chunk's limit from
// the last one's and its encoded size, doubled below half the target
// size and halved above twice it, and never below 1 (0 means no limit).
func nextChunkLimit(last int64, size, target int) int64 {
	switch {
	case size < target/2:
		last *= 2
	case size > 2*target:
		last /= 2
	}
	return max(last, 1)
}

// streamRead runs one read of a stream as a Range's read runs: under the
// restore lock (held for the read only, never while a message waits for
// the client), observed as etcd observes each read of its stream, in
// range_duration_seconds.
func (s *Server) streamRead(read func() error) error {
	start := time.Now()
	s.lockForRead()
	err := read()
	s.restoreMu.RUnlock()
	s.metrics.observeRange(err == nil, time.Since(start))
	return err
}

// streamHeader is the header of a stream's last message: this member's,
// with rev, the revision the stream read at (left 0 if it is 0, as
// etcd's, never replaced by the current revision).
func (s *Server) streamHeader(rev int64) *pb.ResponseHeader {
	return &pb.ResponseHeader{ClusterId: s.cluster, MemberId: s.id, Revision: rev, RaftTerm: s.node.Term()}
}
