package server

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
)

// wireBufferPool holds the buffers the client API encodes responses into
// and reads large requests into: one tier per power of two from 256 B to
// 16 MiB, so a message never takes more than twice its size. gRPC's
// default pool jumps from 32 KiB to 1 MiB, so every response between the
// two (a page of a kube-apiserver list, a range of a few hundred keys)
// held a 1 MiB buffer until it was written: 100 clients paging through a
// 10,000-key prefix with --limit 500 (140 KiB responses) drove the
// member's RSS to 260 MiB, etcd's to 80. Larger messages are allocated
// and left to the garbage collector.
var wireBufferPool = func() mem.BufferPool {
	var exps []uint8
	for e := uint8(8); e <= 24; e++ {
		exps = append(exps, e)
	}
	p, err := mem.NewBinaryTieredBufferPool(exps...)
	if err != nil {
		panic(fmt.Sprintf("server: the client API's buffer pool: %v", err)) // fixed, valid tiers
	}
	return p
}()

// wireCodec is gRPC's protobuf codec on wireBufferPool. It also counts
// the client API's payload bytes, as etcd's codec does
// (etcd_network_client_grpc_{sent,received}_bytes_total: each message's
// marshaled size, before compression and framing). Counting here instead
// of in a gRPC stats handler matters: with any stats handler installed,
// gRPC copies every call's incoming metadata and reports each call's
// stages, work on every call that counting bytes does not need.
type wireCodec struct {
	sent, received prometheus.Counter // nil: not counted
}

var _ encoding.CodecV2 = wireCodec{}

func (wireCodec) Name() string { return "proto" }

func (c wireCodec) Marshal(v any) (mem.BufferSlice, error) {
	if w, ok := v.(*wireWatchResponse); ok {
		if c.sent != nil {
			c.sent.Add(float64(len(w.head) + len(w.events)))
		}
		// SliceBuffers: nothing to return to a pool, and the shared
		// events are never written to.
		return mem.BufferSlice{mem.SliceBuffer(w.head), mem.SliceBuffer(w.events)}, nil
	}
	// The responses a member sends most, when they hold no decoded
	// key-values: encoded by hand (see appendRangeResponseHead), their
	// unknown fields after, as proto.Marshal writes them.
	switch r := v.(type) {
	case *pb.RangeResponse:
		if len(r.Kvs) == 0 {
			w := new(wireMessage)
			return c.sendHead(w, appendRangeResponseHead(w.space[:0], r), r.ProtoReflect().GetUnknown()), nil
		}
	case *wireRangeChunk:
		w := new(wireMessage)
		head := appendRangeStreamResponseHead(w.space[:0], r.resp)
		return c.sendPooled(w, head, mem.NewBuffer(r.kvs, r.pool)), nil
	case *pb.RangeStreamResponse:
		// A chunk of a RangeStream: the same, one level down.
		if rr := r.RangeResponse; rr != nil && len(rr.Kvs) == 0 && len(r.ProtoReflect().GetUnknown()) == 0 {
			w := new(wireMessage)
			return c.sendHead(w, appendRangeStreamResponseHead(w.space[:0], rr), rr.ProtoReflect().GetUnknown()), nil
		}
	case *pb.PutResponse:
		if r.PrevKv == nil {
			w := new(wireMessage)
			return c.sendHead(w, appendResponseHeader(w.space[:0], r.Header), r.ProtoReflect().GetUnknown()), nil
		}
	case *pb.TxnResponse:
		// A txn of puts' answer (see appendPutTxnResponse).
		if size, ok := putTxnResponseSize(r); ok {
			w := new(wireMessage)
			b := w.space[:0]
			if size > len(w.space) {
				b = make([]byte, 0, size)
			}
			return c.sendHead(w, appendPutTxnResponse(b, r), nil), nil
		}
	}
	return c.marshalMessage(v)
}

// marshalMessage is Marshal for any message.
func (c wireCodec) marshalMessage(v any) (mem.BufferSlice, error) {
	m := messageOf(v)
	if m == nil {
		return nil, fmt.Errorf("proto: cannot marshal %T, not a protobuf message", v)
	}
	size := proto.Size(m)
	if c.sent != nil {
		c.sent.Add(float64(size))
	}
	// proto.Size has just cached the sizes MarshalAppend needs.
	opts := proto.MarshalOptions{UseCachedSize: true}
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := opts.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	buf := wireBufferPool.Get(size)
	b, err := opts.MarshalAppend((*buf)[:0], m)
	if err != nil {
		wireBufferPool.Put(buf)
		return nil, err
	}
	*buf = b
	return mem.BufferSlice{mem.NewBuffer(buf, wireBufferPool)}, nil
}

func (c wireCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m := messageOf(v)
	if m == nil {
		return fmt.Errorf("proto: cannot unmarshal into %T, not a protobuf message", v)
	}
	if c.received != nil {
		c.received.Add(float64(data.Len()))
	}
	buf := data.MaterializeToBuffer(wireBufferPool)
	defer buf.Free()
	// gRPC decodes each request into a new message, which is what
	// decodeFast expects.
	if decodeFast(buf.ReadOnlyData(), v) {
		return nil
	}
	return proto.Unmarshal(buf.ReadOnlyData(), m)
}

// wireMessage is a response on its way out, in one allocation: its head
// and the rest (a range's stored key-values), as two buffers with nothing
// to return to a pool.
type wireMessage struct {
	bufs       [2]mem.Buffer
	head, rest mem.SliceBuffer
	space      [64]byte // the head, unless a header has unknown fields
}

// sendHead returns w holding head and rest. rest is the response's own
// unknown fields: nothing writes to them once the handler has returned
// it.
func (c wireCodec) sendHead(w *wireMessage, head, rest []byte) mem.BufferSlice {
	w.head, w.rest = head, rest
	if c.sent != nil {
		c.sent.Add(float64(len(head) + len(rest)))
	}
	w.bufs = [2]mem.Buffer{&w.head, &w.rest}
	if len(rest) == 0 {
		return w.bufs[:1]
	}
	return w.bufs[:]
}

// sendPooled is sendHead with rest a buffer of a pool, which gRPC frees
// into it once written.
func (c wireCodec) sendPooled(w *wireMessage, head []byte, rest mem.Buffer) mem.BufferSlice {
	w.head = head
	if c.sent != nil {
		c.sent.Add(float64(len(head) + rest.Len()))
	}
	w.bufs = [2]mem.Buffer{&w.head, rest}
	return w.bufs[:]
}

func messageOf(v any) proto.Message {
	switch v := v.(type) {
	case protoadapt.MessageV2:
		return v
	case protoadapt.MessageV1:
		return protoadapt.MessageV2Of(v)
	}
	return nil
}
