package schema

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// A normal WAL entry's data is an etcdserverpb.InternalRaftRequest, as in
// etcd's WAL.

// requestDecoding decodes entry requests. Its nesting limit is above the
// default one that gRPC decodes client requests with, so that whatever a
// member accepted from a client, wrapped in an InternalRaftRequest (one
// level more), decodes on every member and in the tools: a txn nested to
// gRPC's limit would otherwise be applied by its proposer from its own
// copy and skipped as undecodable by the others.
var requestDecoding = proto.UnmarshalOptions{RecursionLimit: 2 * protowire.DefaultRecursionLimit}

// DecodeRequest decodes an entry's request.
func DecodeRequest(data []byte, req *pb.InternalRaftRequest) error {
	return requestDecoding.Unmarshal(data, req)
}

// RequestID is the id a request's result is delivered to: its header's ID,
// or the old top-level ID when the header has none.
func RequestID(req *pb.InternalRaftRequest) uint64 {
	if id := req.GetHeader().GetID(); id != 0 {
		return id
	}
	return req.GetID()
}

// PeekRequestID is RequestID of an encoded request, read without decoding
// the rest: the header is field 100 (its ID field 1), the old ID field 1.
// ok is false for bytes that do not parse as a protobuf message.
func PeekRequestID(data []byte) (id uint64, ok bool) {
	var legacy, header uint64
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return 0, false
		}
		data = data[n:]
		switch {
		case num == 1 && typ == protowire.VarintType:
			v, m := protowire.ConsumeVarint(data)
			if m < 0 {
				return 0, false
			}
			legacy, n = v, m
		case num == 100 && typ == protowire.BytesType:
			b, m := protowire.ConsumeBytes(data)
			if m < 0 {
				return 0, false
			}
			h, set, hok := headerID(b)
			if !hok {
				return 0, false
			}
			if set { // occurrences merge when decoded
				header = h
			}
			n = m
		default:
			n = protowire.ConsumeFieldValue(num, typ, data)
			if n < 0 {
				return 0, false
			}
		}
		data = data[n:]
	}
	if header != 0 {
		return header, true
	}
	return legacy, true
}

// headerID reads field 1 (ID) of an encoded RequestHeader, and whether
// it is there; a repeated field's last value wins, as in decoding.
func headerID(b []byte) (id uint64, set, ok bool) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, false, false
		}
		b = b[n:]
		if num == 1 && typ == protowire.VarintType {
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return 0, false, false
			}
			id, set, n = v, true, m
		} else if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return 0, false, false
		}
		b = b[n:]
	}
	return id, set, true
}
