package mvcc

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/strata-db/strata/btreeidx"
	"github.com/strata-db/strata/pagestore"
)

// RangeChunk reads one message of a RangeStream (etcd 3.7's chunked
// range, see server/rangestream.go): the keys of r's range at r.Revision
// (0: the current revision), at most r.Limit of them (0: no limit), read
// as etcd's chunk read does: the index walk stops one key past the
// limit, so Count is the number of keys found up to r.Limit+1, not the
// range's total, and More says keys remain. A chunk that sorts by a
// target other than the key (the one sort a stream accepts: order NONE,
// which etcd sorts ascending) is sorted within the chunk, as etcd's is.
//
// The chunk also ends before the key-value that would take its
// key-values past maxBytes (but holds at least one; maxBytes <= 0: no
// such end), with More set. etcd's chunk has
// no such end: a limit doubled on small values and then met by large ones
// makes a chunk as large as limit × value size. With this end no chunk
// holds more than maxBytes, or one key-value when that is larger.
//
// As RangeEncoded, when nothing is sorted the key-values stay encoded in
// the response's unknown fields and Kvs is empty: the response is only
// fit to be sent as it is, or measured with proto.Size. Those encoded
// key-values are one buffer, cr.Alloc(size) (nil: make), of length 0 and
// capacity at least size, so that a caller that knows when the chunk has
// been sent can take its buffers from a pool; a chunk holds a buffer of
// Alloc's only if Chunk.Pooled says so. cr (nil: a new one) keeps the
// read's own buffers for the next chunk of the same stream.
func (s *Store) RangeChunk(r *pb.RangeRequest, maxBytes int, cr *ChunkReader) (Chunk, error) {
	if cr == nil {
		cr = new(ChunkReader)
	}
	cr.allocated = false
	resp, n, last, err := s.rangeChunk(r, maxBytes, cr)
	return Chunk{Resp: resp, Len: n, Last: last, Pooled: cr.allocated}, err
}

// Chunk is one message of a RangeStream, as RangeChunk reads it.
type Chunk struct {
	Resp *pb.RangeResponse
	// Len is how many key-values Resp holds.
	Len int
	// Last is the key that sorted last in the chunk (a copy of it): the
	// next chunk starts after it.
	Last []byte
	// Pooled says Resp's unknown fields are a buffer ChunkReader.Alloc
	// returned.
	Pooled bool
}

// ChunkReader is what the chunks of one RangeStream share: the
// allocator of their encoded key-values, and the buffers a chunk's read
// fills before it encodes (the keys found, copied, and their stored
// values' places), kept from one chunk to the next so that a stream
// leaves no garbage per chunk for the collector. Not for concurrent use.
type ChunkReader struct {
	// Alloc returns a buffer of length 0 and capacity at least n for a
	// chunk's encoded key-values (nil: make).
	Alloc func(n int) []byte

	allocated bool
	keys      []btreeidx.KeyAt
	keyBytes  []byte
	stored    []pagestore.StoredValue
}

func (cr *ChunkReader) buf(size int) []byte {
	cr.allocated = cr.Alloc != nil
	return allocBuf(cr.Alloc, size)
}

// collect walks the index as Index.Keys does into cr.keys, each key
// copied into cr.keyBytes, and returns how many keys it found.
func (cr *ChunkReader) collect(x *btreeidx.Index, key, end []byte, atRev int64, limit int) int {
	cr.keys, cr.keyBytes = cr.keys[:0], cr.keyBytes[:0]
	return x.EachKey(key, end, atRev, limit, false, func(ka btreeidx.KeyAt) {
		// A key copied before keyBytes grows keeps the array it was
		// copied into; the next chunk reuses the grown one.
		at := len(cr.keyBytes)
		cr.keyBytes = append(cr.keyBytes, ka.Key...)
		ka.Key = cr.keyBytes[at:len(cr.keyBytes):len(cr.keyBytes)]
		cr.keys = append(cr.keys, ka)
	})
}

func (s *Store) rangeChunk(r *pb.RangeRequest, maxBytes int, cr *ChunkReader) (resp *pb.RangeResponse, n int, last []byte, err error) {
	v := &view{s: s, rev: s.rev.Load()}
	defer v.close()
	v.ops.ranges++
	atRev, err := v.readRev(r.Revision)
	if err != nil {
		return nil, 0, nil, err
	}
	limit := r.Limit
	if limit < 0 {
		// etcd reads a negative limit as none, in one message; here the
		// chunks' byte bound still applies.
		limit = 0
	}
	var keys []btreeidx.KeyAt
	var found int
	if r.SortTarget != pb.RangeRequest_KEY {
		keys, found = s.index().Keys(r.Key, rangeEnd(r.RangeEnd), atRev, int(fetchLimit(limit)), false, nil)
	} else {
		found = cr.collect(s.index(), r.Key, rangeEnd(r.RangeEnd), atRev, int(fetchLimit(limit)))
		keys = cr.keys
	}
	resp = &pb.RangeResponse{Header: &pb.ResponseHeader{Revision: v.rev}, Count: int64(found)}
	fromIndex := r.KeysOnly && r.SortTarget != pb.RangeRequest_VALUE
	switch {
	case len(keys) == 0:
	case r.SortTarget != pb.RangeRequest_KEY:
		n, last, err = v.sortedChunk(resp, keys, int(limit), fromIndex, r, maxBytes)
	default:
		if limit > 0 && len(keys) > int(limit) {
			keys = keys[:limit]
			resp.More = true
		}
		n, last, err = v.encodedChunk(resp, keys, fromIndex, maxBytes, cr)
	}
	if err != nil {
		return nil, 0, nil, err
	}
	if at := r.Revision; at > 0 && at < s.compactRev.Load() {
		return nil, 0, nil, ErrCompacted
	}
	return resp, n, last, nil
}

// encodedChunk puts keys' key-values into resp's unknown fields as
// RangeEncoded does: the stored bytes of each (encodeStored), or for a
// keys-only read the key and its revisions encoded from the index, in
// one buffer, cr.buf(size), that ends before maxBytes.
func (v *view) encodedChunk(resp *pb.RangeResponse, keys []btreeidx.KeyAt, fromIndex bool, maxBytes int, cr *ChunkReader) (int, []byte, error) {
	var buf []byte
	n := 0
	if fromIndex {
		size := 0
		for _, k := range keys {
			framed := 1 + protowire.SizeBytes(indexKVSize(k))
			if n > 0 && maxBytes > 0 && size+framed > maxBytes {
				break
			}
			size += framed
			n++
		}
		buf = cr.buf(size)
		for _, k := range keys[:n] {
			buf = append(buf, rangeKvsTag)
			buf = protowire.AppendVarint(buf, uint64(indexKVSize(k)))
			buf = appendIndexKV(buf, k)
		}
	} else {
		var err error
		if buf, n, cr.stored, err = v.encodeStored(len(keys), func(i int) Revision { return keys[i].Modified }, maxBytes, cr.buf, cr.stored); err != nil {
			return 0, nil, err
		}
	}
	if n < len(keys) {
		resp.More = true
	}
	resp.ProtoReflect().SetUnknown(protoreflect.RawFields(buf))
	return n, append([]byte(nil), keys[n-1].Key...), nil
}

// sortedChunk decodes keys' key-values into resp.Kvs, sorts them by r's
// target and keeps the first limit (0: all). As etcd's range, it sorts
// the one key read past the limit too, before dropping what sorts last:
// so a key may sort out of every chunk, or into two, which etcd's
// streams do as well.
func (v *view) sortedChunk(resp *pb.RangeResponse, keys []btreeidx.KeyAt, limit int, fromIndex bool, r *pb.RangeRequest, maxBytes int) (int, []byte, error) {
	rr := &rangeResult{kvs: make([]*mvccpb.KeyValue, 0, len(keys))}
	size := 0
	for _, k := range keys {
		var kv *mvccpb.KeyValue
		if fromIndex {
			kv = &mvccpb.KeyValue{Key: k.Key, CreateRevision: k.Created.Main, ModRevision: k.Modified.Main, Version: k.Version}
		} else {
			var err error
			if kv, err = v.value(k.Modified); err != nil {
				return 0, nil, err
			}
		}
		framed := 1 + protowire.SizeBytes(proto.Size(kv))
		if len(rr.kvs) > 0 && maxBytes > 0 && size+framed > maxBytes {
			resp.More = true
			break
		}
		size += framed
		rr.kvs = append(rr.kvs, kv)
	}
	sortKVs(rr, r)
	if limit > 0 && len(rr.kvs) > limit {
		rr.kvs = rr.kvs[:limit]
		resp.More = true
	}
	if r.KeysOnly {
		for _, kv := range rr.kvs {
			kv.Value = nil
		}
	}
	resp.Kvs = rr.kvs
	return len(rr.kvs), append([]byte(nil), rr.kvs[len(rr.kvs)-1].Key...), nil
}

// indexKVSize is the length of appendIndexKV's encoding of k.
func indexKVSize(k btreeidx.KeyAt) int {
	n := 0
	if len(k.Key) > 0 {
		n += 1 + protowire.SizeBytes(len(k.Key))
	}
	for _, v := range [3]int64{k.Created.Main, k.Modified.Main, k.Version} {
		if v != 0 {
			n += 1 + protowire.SizeVarint(uint64(v))
		}
	}
	return n
}

// appendIndexKV appends the mvccpb.KeyValue of a keys-only read of k, as
// proto.Marshal writes it: key (1), create_revision (2), mod_revision
// (3) and version (4), each left out when zero.
func appendIndexKV(b []byte, k btreeidx.KeyAt) []byte {
	if len(k.Key) > 0 {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, k.Key)
	}
	for i, n := range [3]int64{k.Created.Main, k.Modified.Main, k.Version} {
		if n != 0 {
			b = protowire.AppendTag(b, protowire.Number(2+i), protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(n))
		}
	}
	return b
}
