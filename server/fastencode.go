package server

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// A proposal encoder turns a request, its Header set, into the bytes of
// its raft entry.
type proposalEncoder func(*pb.InternalRaftRequest) ([]byte, error)

// marshalProposal encodes any request with protobuf's generic encoder.
func marshalProposal(req *pb.InternalRaftRequest) ([]byte, error) { return proto.Marshal(req) }

// encodePutProposal encodes a request that holds only a Put and its
// Header, as every put from the KV service is, into the bytes
// proto.Marshal gives: fields in number order (the put, 4, then the
// header, 100), zero scalars and empty bytes left out. A put that came
// with fields its message does not know (kept by proto.Unmarshal) goes
// to proto.Marshal, which writes them after the known ones.
//
// Why: every put is encoded once as a proposal, and proto.Marshal spends
// most of that sizing the message and walking its descriptors; this
// encoder knows the fields and writes them directly (BenchmarkPutProposal
// compares the two).
func encodePutProposal(req *pb.InternalRaftRequest) ([]byte, error) {
	p, h := req.Put, req.Header
	if p == nil || len(p.ProtoReflect().GetUnknown()) > 0 || !plainHeader(h) {
		return proto.Marshal(req)
	}
	putLen := putSize(p)
	b := make([]byte, 0, 1+protowire.SizeBytes(putLen)+requestHeaderFieldSize(h))
	b = protowire.AppendTag(b, 4, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(putLen))
	b = appendPut(b, p)
	return appendRequestHeaderField(b, h), nil
}

// encodeTxnProposal is encodePutProposal for a txn of puts and nothing
// else (no compares, no failure branch), as etcd's benchmark's txn-put
// sends: the txn is field 6 of the entry, each put a RequestOp of the
// success branch (field 2) holding it as request_put (field 2). Any other
// txn, or one with unknown fields anywhere, goes to proto.Marshal.
//
// Why: as for encodePutProposal, a txn of puts is encoded once per
// request, and proto.Marshal's generic walk is most of that cost.
func encodeTxnProposal(req *pb.InternalRaftRequest) ([]byte, error) {
	t, h := req.Txn, req.Header
	txnLen, ok := putTxnSize(t)
	if !ok || !plainHeader(h) {
		return proto.Marshal(req)
	}
	b := make([]byte, 0, 1+protowire.SizeBytes(txnLen)+requestHeaderFieldSize(h))
	b = protowire.AppendTag(b, 6, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(txnLen))
	for _, op := range t.Success {
		p := op.GetRequestPut()
		putLen := putSize(p)
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(1+protowire.SizeBytes(putLen)))
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(putLen))
		b = appendPut(b, p)
	}
	return appendRequestHeaderField(b, h), nil
}

// putTxnSize is the encoded size of t when it is a txn of puts with no
// unknown fields (see encodeTxnProposal); ok is false for any other.
func putTxnSize(t *pb.TxnRequest) (size int, ok bool) {
	if t == nil || len(t.Compare) > 0 || len(t.Failure) > 0 || len(t.ProtoReflect().GetUnknown()) > 0 {
		return 0, false
	}
	for _, op := range t.Success {
		p := op.GetRequestPut()
		if p == nil || len(op.ProtoReflect().GetUnknown()) > 0 || len(p.ProtoReflect().GetUnknown()) > 0 {
			return 0, false
		}
		opLen := 1 + protowire.SizeBytes(putSize(p))
		size += 1 + protowire.SizeBytes(opLen)
	}
	return size, true
}

// putSize is the encoded size of p's known fields.
func putSize(p *pb.PutRequest) int {
	return bytesFieldSize(len(p.Key)) + bytesFieldSize(len(p.Value)) +
		varintFieldSize(uint64(p.Lease)) + boolFieldSize(p.PrevKv) + boolFieldSize(p.IgnoreValue) + boolFieldSize(p.IgnoreLease)
}

// appendPut appends p's known fields in number order.
func appendPut(b []byte, p *pb.PutRequest) []byte {
	b = appendBytesField(b, 1, p.Key)
	b = appendBytesField(b, 2, p.Value)
	b = appendVarintField(b, 3, uint64(p.Lease))
	b = appendBoolField(b, 4, p.PrevKv)
	b = appendBoolField(b, 5, p.IgnoreValue)
	return appendBoolField(b, 6, p.IgnoreLease)
}

// plainHeader: h is nil or has no unknown fields.
func plainHeader(h *pb.RequestHeader) bool {
	return h == nil || len(h.ProtoReflect().GetUnknown()) == 0
}

func requestHeaderSize(h *pb.RequestHeader) int {
	return varintFieldSize(h.ID) + bytesFieldSize(len(h.Username)) + varintFieldSize(h.AuthRevision)
}

// requestHeaderFieldSize is the size of h as an entry's field 100, whose
// tag is two bytes; 0 for a nil h.
func requestHeaderFieldSize(h *pb.RequestHeader) int {
	if h == nil {
		return 0
	}
	return 2 + protowire.SizeBytes(requestHeaderSize(h))
}

// appendRequestHeaderField appends h as an entry's field 100; nothing
// for a nil h.
func appendRequestHeaderField(b []byte, h *pb.RequestHeader) []byte {
	if h == nil {
		return b
	}
	b = protowire.AppendTag(b, 100, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(requestHeaderSize(h)))
	b = appendVarintField(b, 1, h.ID)
	if h.Username != "" {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendString(b, h.Username)
	}
	return appendVarintField(b, 3, h.AuthRevision)
}

// The sizes below are for fields numbered below 16 (a one-byte tag); the
// sizes and the appenders leave out zero values, as proto3 does.

func bytesFieldSize(n int) int {
	if n == 0 {
		return 0
	}
	return 1 + protowire.SizeBytes(n)
}

func varintFieldSize(v uint64) int {
	if v == 0 {
		return 0
	}
	return 1 + protowire.SizeVarint(v)
}

func boolFieldSize(v bool) int {
	if !v {
		return 0
	}
	return 2
}

func appendBytesField(b []byte, num protowire.Number, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func appendVarintField(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendBoolField(b []byte, num protowire.Number, v bool) []byte {
	if !v {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return append(b, 1)
}

// appendRangeResponseHead appends what proto.Marshal writes of r before
// its key-values and unknown fields: the header, more and count. It is
// for a response with no decoded Kvs, whose wire form is this head
// followed by r's unknown fields, which is how mvcc.Store.RangeEncoded
// hands over the stored key-values. The codec sends the two as they are,
// so a range's values are never copied into a second buffer, as they
// would be through proto.Marshal, which also sizes and walks the whole
// response again.
func appendRangeResponseHead(b []byte, r *pb.RangeResponse) []byte {
	b = appendResponseHeader(b, r.Header)
	b = appendBoolField(b, 3, r.More)
	return appendVarintField(b, 4, uint64(r.Count))
}

// appendRangeStreamResponseHead is appendRangeResponseHead for a
// RangeStreamResponse holding r (its field 1): what proto.Marshal writes
// before r's unknown fields.
func appendRangeStreamResponseHead(b []byte, r *pb.RangeResponse) []byte {
	head := responseHeaderFieldSize(r.Header) + boolFieldSize(r.More) + varintFieldSize(uint64(r.Count))
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(head+len(r.ProtoReflect().GetUnknown())))
	return appendRangeResponseHead(b, r)
}

// putTxnResponseSize is the encoded size of r when every response in it
// is a put's without a previous key-value and nothing in it has unknown
// fields, as a txn of puts answers; ok is false for any other.
func putTxnResponseSize(r *pb.TxnResponse) (size int, ok bool) {
	if len(r.ProtoReflect().GetUnknown()) > 0 {
		return 0, false
	}
	size = responseHeaderFieldSize(r.Header) + boolFieldSize(r.Succeeded)
	for _, op := range r.Responses {
		p := op.GetResponsePut()
		if p == nil || p.PrevKv != nil || len(op.ProtoReflect().GetUnknown()) > 0 || len(p.ProtoReflect().GetUnknown()) > 0 {
			return 0, false
		}
		opLen := 1 + protowire.SizeBytes(responseHeaderFieldSize(p.Header))
		size += 1 + protowire.SizeBytes(opLen)
	}
	return size, true
}

// appendPutTxnResponse appends r, for which putTxnResponseSize said ok,
// as proto.Marshal writes it: header, succeeded, then each response as a
// ResponseOp holding response_put (field 2).
func appendPutTxnResponse(b []byte, r *pb.TxnResponse) []byte {
	b = appendResponseHeader(b, r.Header)
	b = appendBoolField(b, 2, r.Succeeded)
	for _, op := range r.Responses {
		h := op.GetResponsePut().Header
		putLen := responseHeaderFieldSize(h)
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(1+protowire.SizeBytes(putLen)))
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(putLen))
		b = appendResponseHeader(b, h)
	}
	return b
}

func responseHeaderSize(h *pb.ResponseHeader) int {
	return varintFieldSize(h.ClusterId) + varintFieldSize(h.MemberId) +
		varintFieldSize(uint64(h.Revision)) + varintFieldSize(h.RaftTerm) + len(h.ProtoReflect().GetUnknown())
}

// responseHeaderFieldSize is the size of h as field 1 of a response; 0
// for a nil h.
func responseHeaderFieldSize(h *pb.ResponseHeader) int {
	if h == nil {
		return 0
	}
	return 1 + protowire.SizeBytes(responseHeaderSize(h))
}

// appendResponseHeader appends h as field 1 of a response, as
// proto.Marshal writes it: its four numbers, then any unknown fields it
// has. Nothing for a nil h.
func appendResponseHeader(b []byte, h *pb.ResponseHeader) []byte {
	if h == nil {
		return b
	}
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(responseHeaderSize(h)))
	b = appendVarintField(b, 1, h.ClusterId)
	b = appendVarintField(b, 2, h.MemberId)
	b = appendVarintField(b, 3, uint64(h.Revision))
	b = appendVarintField(b, 4, h.RaftTerm)
	return append(b, h.ProtoReflect().GetUnknown()...)
}
