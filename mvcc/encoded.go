package mvcc

import (
	"encoding/binary"
	"fmt"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/strata-db/strata/btreeidx"
	"github.com/strata-db/strata/pagestore"
)

// RangeEncoded is Range for a response that goes straight to the wire.
// Each stored value is already an encoded mvccpb.KeyValue, so when the
// request needs no decoded values (keys in key order, no sort target, no
// revision filters) the values are copied as stored, each framed as
// field 2 (kvs) of RangeResponse, into the response's unknown fields: the
// marshaller writes them verbatim and a client decodes them as Kvs, but
// nothing is decoded, allocated per key or encoded again on the server.
// A keys-only read is encoded the same way from the index alone. The
// response's Kvs stays empty, so it is only for a caller that sends it on
// as it is; any other request is served as Range serves it.
//
// The encoded key-values are the only copy of the answer the server
// makes: one buffer of exactly their size (encodeStored, encodeIndexKeys),
// which the codec hands to the transport as it is.
func (s *Store) RangeEncoded(r *pb.RangeRequest) (*pb.RangeResponse, error) {
	// A target other than the key sorts, even with order NONE (see
	// sortKVs).
	if r.CountOnly || r.SortTarget != pb.RangeRequest_KEY || !defaultOrdering(r.SortTarget, r.SortOrder) || hasRevisionFilters(r) {
		return s.Range(r)
	}
	v := &view{s: s, rev: s.rev.Load()}
	defer v.close()
	v.ops.ranges++
	atRev, err := v.readRev(r.Revision)
	if err != nil {
		return nil, err
	}
	resp := &pb.RangeResponse{Header: &pb.ResponseHeader{Revision: v.rev}}
	var buf []byte
	if r.KeysOnly {
		buf, resp.More, resp.Count = encodeIndexKeys(s.index(), r.Key, rangeEnd(r.RangeEnd), atRev, r.Limit)
	} else {
		revs, total := s.index().Revisions(r.Key, rangeEnd(r.RangeEnd), atRev, int(fetchLimit(r.Limit)), true)
		resp.Count = int64(total)
		if r.Limit > 0 && len(revs) > int(r.Limit) {
			revs = revs[:r.Limit]
			resp.More = true
		}
		// A range of a few keys (a Get, the hottest read) keeps its
		// values' places on the stack.
		var few [8]pagestore.StoredValue
		if buf, _, _, err = v.encodeStored(len(revs), func(i int) Revision { return revs[i] }, 0, nil, few[:0]); err != nil {
			return nil, err
		}
	}
	if len(buf) > 0 {
		resp.ProtoReflect().SetUnknown(protoreflect.RawFields(buf))
	}
	if at := r.Revision; at > 0 && at < s.compactRev.Load() {
		return nil, ErrCompacted
	}
	return resp, nil
}

// encodeStored returns the stored key-values of the revisions rev(0) to
// rev(n-1), each framed as field 2 (kvs) of RangeResponse, in one buffer
// of exactly their size, and how many it holds: it stops before the
// key-value that would take the buffer past maxBytes, but holds at least
// one (maxBytes <= 0: no such stop). The values are looked up first,
// with their lengths once inflated (pagestore.StoredValue), then each is
// decoded or copied straight into place: no buffer is grown, so none is
// left behind as garbage beside the answer, and no value is decoded into
// a scratch buffer to be copied again. The buffer is alloc(size) (nil:
// make), which must have a length of 0 and room for size bytes. The
// values' places are kept in stored's array if it has room for n, else
// in a new one, returned for a caller reading many ranges to pass again.
func (v *view) encodeStored(n int, rev func(int) Revision, maxBytes int, alloc func(int) []byte, stored []pagestore.StoredValue) ([]byte, int, []pagestore.StoredValue, error) {
	if n == 0 {
		return nil, 0, stored, nil
	}
	rd, err := v.readTx()
	if err != nil {
		return nil, 0, stored, err
	}
	stored = stored[:0]
	if cap(stored) < n {
		stored = make([]pagestore.StoredValue, 0, n)
	}
	size := 0
	for i := range n {
		r := rev(i)
		sv, found, err := rd.GetRevisionStored(r)
		if err != nil {
			return nil, 0, stored, err
		}
		if !found {
			return nil, 0, stored, fmt.Errorf("mvcc: revision %v is in the index but not in the store", r)
		}
		framed := 1 + protowire.SizeBytes(sv.Len())
		if i > 0 && maxBytes > 0 && size+framed > maxBytes {
			break
		}
		size += framed
		stored = append(stored, sv)
	}
	buf := allocBuf(alloc, size)
	for i, sv := range stored {
		r := rev(i)
		buf = append(buf, rangeKvsTag)
		buf = binary.AppendUvarint(buf, uint64(sv.Len()))
		at := len(buf)
		if buf, err = rd.AppendRevision(buf, r, sv); err != nil {
			return nil, 0, stored, err
		}
		if len(buf) == at || buf[at] != kvTag {
			return nil, 0, stored, fmt.Errorf("mvcc: value of revision %v: unknown value encoding", r)
		}
	}
	return buf, len(stored), stored, nil
}

// allocBuf returns alloc(size), or without alloc a new buffer, of length
// 0 and capacity size.
func allocBuf(alloc func(int) []byte, size int) []byte {
	if alloc == nil {
		return make([]byte, 0, size)
	}
	return alloc(size)
}

// encodeIndexKeys returns a keys-only read of [key, end) at atRev, the
// key-values framed as encodeStored frames them, encoded from the index
// as it walks it: at most limit of them (0: all), whether there are more,
// and how many keys the range holds. The size of the answer is not
// known until the walk ends, so it is collected in pooled chunks and
// copied once into a buffer of its exact size, the chunks going back to
// the pool as they are copied: a buffer grown by append would hold its
// old backing array beside the new one at every step, and collecting the
// keys first (Index.Keys) takes more memory than the answer.
func encodeIndexKeys(x *btreeidx.Index, key, end []byte, atRev, limit int64) (buf []byte, more bool, total int64) {
	var out chunkedBuf
	defer out.release()
	var scratch []byte
	n := int64(0)
	total = int64(x.EachKey(key, end, atRev, int(fetchLimit(limit)), true, func(k btreeidx.KeyAt) {
		if limit > 0 && n >= limit {
			more = true
			return
		}
		n++
		scratch = append(scratch[:0], rangeKvsTag)
		scratch = protowire.AppendVarint(scratch, uint64(indexKVSize(k)))
		scratch = appendIndexKV(scratch, k)
		out.write(scratch)
	}))
	return out.bytes(), more, total
}

// chunkedBuf collects bytes in chunks of chunkSize from chunkPool.
type chunkedBuf struct {
	full [][]byte
	cur  []byte
	n    int
}

const chunkSize = 64 << 10

var chunkPool = sync.Pool{New: func() any { return new([chunkSize]byte) }}

func (c *chunkedBuf) write(p []byte) {
	for len(p) > 0 {
		if len(c.cur) == cap(c.cur) {
			if c.cur != nil {
				c.full = append(c.full, c.cur)
			}
			c.cur = chunkPool.Get().(*[chunkSize]byte)[:0]
		}
		k := copy(c.cur[len(c.cur):cap(c.cur)], p)
		c.cur = c.cur[:len(c.cur)+k]
		c.n += k
		p = p[k:]
	}
}

// bytes returns everything written, in one buffer of its exact size
// (nil if nothing was), and returns the chunks to the pool as it copies
// them.
func (c *chunkedBuf) bytes() []byte {
	if c.n == 0 {
		return nil
	}
	out := make([]byte, 0, c.n)
	for _, b := range c.full {
		out = append(out, b...)
		chunkPool.Put((*[chunkSize]byte)(b[:chunkSize]))
	}
	c.full = c.full[:0]
	if c.cur != nil {
		out = append(out, c.cur...)
		chunkPool.Put((*[chunkSize]byte)(c.cur[:chunkSize]))
		c.cur = nil
	}
	c.n = 0
	return out
}

// release returns the chunks of a buffer bytes was not called on.
func (c *chunkedBuf) release() {
	for _, b := range c.full {
		chunkPool.Put((*[chunkSize]byte)(b[:chunkSize]))
	}
	if c.cur != nil {
		chunkPool.Put((*[chunkSize]byte)(c.cur[:chunkSize]))
	}
	*c = chunkedBuf{}
}
