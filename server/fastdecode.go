package server

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/encoding/protowire"
)

// decodeFast decodes the requests that dominate a member's load, a put,
// a range and a txn of puts (decodePutTxn), without protobuf's generic
// decoder, and reports whether it did. It takes only the canonical encoding: every field it
// meets must be one of the message's, with its own wire type; anything
// else (an unknown field, a wire type that does not match, a truncated
// message) returns false before the message is touched, and the caller
// decodes it with proto.Unmarshal, which keeps unknown fields and
// reports errors as it always has.
//
// Why: under puts from 1000 clients most handlers run on goroutines gRPC
// starts for them (its pooled workers are all waiting for their entries
// to apply), and protobuf's table-driven decoder needs a deeper stack
// than a new goroutine has, so each put paid for growing and copying
// that stack on top of the decoding itself. The result is
// what proto.Unmarshal gives: last occurrence wins, an empty bytes field
// is nil, and key and value are copies (here in one allocation), since
// gRPC reuses the buffer the request arrived in.
func decodeFast(b []byte, v any) bool {
	switch m := v.(type) {
	case *pb.PutRequest:
		return decodePut(b, m)
	case *pb.RangeRequest:
		return decodeRange(b, m)
	case *pb.TxnRequest:
		return decodePutTxn(b, m)
	}
	return false
}

// fields is a message's decoded fields: two bytes fields (by number, 1
// and 2 in both messages) and the varint fields by number.
type fields struct {
	bytes  [2][]byte
	varint [14]uint64
}

// scan decodes b into f, accepting bytes fields 1 and 2 and varint fields
// 3..maxVarint; false for anything else.
func (f *fields) scan(b []byte, maxVarint protowire.Number) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case (num == 1 || num == 2) && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return false
			}
			f.bytes[num-1] = v
			b = b[n:]
		case num >= 3 && num <= maxVarint && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			f.varint[num] = v
			b = b[n:]
		default:
			return false
		}
	}
	return true
}

// copies returns copies of the two bytes fields in one allocation, nil
// for an empty one (as proto3 decodes it).
func (f *fields) copies() (a, b []byte) {
	la, lb := len(f.bytes[0]), len(f.bytes[1])
	if la+lb == 0 {
		return nil, nil
	}
	buf := make([]byte, la+lb)
	copy(buf, f.bytes[0])
	copy(buf[la:], f.bytes[1])
	if la > 0 {
		a = buf[:la:la]
	}
	if lb > 0 {
		b = buf[la:]
	}
	return a, b
}

func decodePut(b []byte, m *pb.PutRequest) bool {
	var f fields
	if !f.scan(b, 6) {
		return false
	}
	m.Key, m.Value = f.copies()
	m.Lease = int64(f.varint[3])
	m.PrevKv = f.varint[4] != 0
	m.IgnoreValue = f.varint[5] != 0
	m.IgnoreLease = f.varint[6] != 0
	return true
}

func decodeRange(b []byte, m *pb.RangeRequest) bool {
	var f fields
	if !f.scan(b, 13) {
		return false
	}
	m.Key, m.RangeEnd = f.copies()
	m.Limit = int64(f.varint[3])
	m.Revision = int64(f.varint[4])
	m.SortOrder = pb.RangeRequest_SortOrder(int32(f.varint[5]))
	m.SortTarget = pb.RangeRequest_SortTarget(int32(f.varint[6]))
	m.Serializable = f.varint[7] != 0
	m.KeysOnly = f.varint[8] != 0
	m.CountOnly = f.varint[9] != 0
	m.MinModRevision = int64(f.varint[10])
	m.MaxModRevision = int64(f.varint[11])
	m.MinCreateRevision = int64(f.varint[12])
	m.MaxCreateRevision = int64(f.varint[13])
	return true
}

// txnPut is one put of a txn with the two messages that hold it, in one
// allocation.
type txnPut struct {
	op    pb.RequestOp
	oneof pb.RequestOp_RequestPut
	put   pb.PutRequest
}

// decodePutTxn takes a txn of puts only, as etcd's benchmark's txn-put
// sends: success ops (field 2) and nothing else, each op holding one
// request_put (field 2) and nothing else, each put taken by decodePut.
// An op with its put twice is refused (protobuf would merge the two),
// and so is any compare or failure op. m is untouched when it refuses.
//
// Why: a txn of puts is decoded once per request, and proto.Unmarshal's
// generic decoder costs what decodePut avoids for a put.
func decodePutTxn(b []byte, m *pb.TxnRequest) bool {
	var ops []*pb.RequestOp
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num != 2 || typ != protowire.BytesType {
			return false
		}
		b = b[n:]
		op, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		num, typ, n = protowire.ConsumeTag(op)
		if n < 0 || num != 2 || typ != protowire.BytesType {
			return false
		}
		put, k := protowire.ConsumeBytes(op[n:])
		if k < 0 || n+k != len(op) {
			return false
		}
		tp := new(txnPut)
		if !decodePut(put, &tp.put) {
			return false
		}
		tp.oneof.RequestPut = &tp.put
		tp.op.Request = &tp.oneof
		ops = append(ops, &tp.op)
	}
	m.Success = ops
	return true
}
