package mvcc

import (
	"encoding/binary"
	"errors"
	"path/filepath"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/strata-db/strata/pagestore"
)

// fuzzRecords turns fuzzer bytes into records of the key and meta buckets
// whose page structure is sound but whose contents may not be: revision
// keys out of any order a writer makes, tombstones of keys never put,
// versions and create revisions that disagree, values that are not
// KeyValues, compaction marks past the end. That is what a page store
// from a buggy or hostile peer's snapshot would hold. Each record is
// one op byte followed by its fields; running out of bytes ends the list.
func fuzzRecords(data []byte) (keys, meta [][2][]byte) {
	next := func(n int) []byte {
		if len(data) < n {
			data = data[len(data):]
			return nil
		}
		b := data[:n]
		data = data[n:]
		return b
	}
	for len(data) > 0 {
		op := next(1)[0]
		switch op % 4 {
		case 0, 1: // a KeyValue under a revision key
			f := next(8)
			if f == nil {
				return
			}
			main := int64(int8(f[0]))*4 + int64(f[1]) // small, sometimes negative
			k := appendRevKey(nil, Revision{Main: main, Sub: int64(f[2] % 3)}, f[3]&1 == 1)
			kv := &mvccpb.KeyValue{Key: []byte{'k', f[4] % 6}, CreateRevision: int64(int8(f[5])),
				ModRevision: main, Version: int64(int8(f[6])), Lease: int64(f[7] % 3), Value: []byte{op}}
			if op&0x10 != 0 {
				kv.Key = nil // "\x0a\x00"-less: an empty key
			}
			keys = append(keys, [2][]byte{k, encodeKV(kv)})
		case 2: // raw bytes as a key-bucket record
			n := next(2)
			if n == nil {
				return
			}
			k, v := next(int(n[0]%24)), next(int(n[1]%24))
			if len(k) == 0 {
				k = []byte{0}
			}
			keys = append(keys, [2][]byte{k, v})
		case 3: // a meta record: compaction marks, consistent index, term
			f := next(2)
			if f == nil {
				return
			}
			names := [][]byte{metaScheduledCompact, metaFinishedCompact, metaConsistentIndex, metaTerm}
			v := revKey(Revision{Main: int64(int8(f[1]))}, false)
			if f[0]&4 != 0 {
				v = binary.BigEndian.AppendUint64(nil, uint64(f[1]))
			}
			if f[0]&8 != 0 {
				v = v[:f[1]%uint8(len(v)+1)]
			}
			meta = append(meta, [2][]byte{names[f[0]%4], v})
		}
	}
	return keys, meta
}

// FuzzOpenStore opens a store on fuzzer-made bucket contents and, if the
// open succeeds, serves reads, a write, a compaction and a hash on it, as
// a member does after it restores a snapshot. Open may refuse the data;
// nothing may panic, and what Open accepts must then work or fail with
// an error.
func FuzzOpenStore(f *testing.F) {
	valid := []byte{}
	for i := 0; i < 6; i++ { // puts of k0..k2 at revisions 2..7, then a tombstone
		valid = append(valid, 0, 0, byte(2+i), 0, 0, byte(i%3), byte(2+i-i%3), byte(1+i/3), 0)
	}
	valid = append(valid, 1, 0, 8, 0, 1, 0, 0, 0, 0)
	f.Add(valid)
	f.Add(append(append([]byte{}, valid...), 3, 0, 4, 3, 1, 4))                                // compacted to 4
	f.Add(append([]byte{0, 0, 9, 0, 1, 1, 0, 0, 0}, valid...))                                 // tombstone first
	f.Add(append(append([]byte{}, valid...), 2, 5, 5, 'a', 'b', 'c', 'd', 'e', 1, 2, 3, 4, 5)) // garbage record
	f.Add([]byte{0, 0x80, 0, 0, 0, 0, 0, 0, 0})                                                // a negative revision

	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4096 {
			return
		}
		keys, meta := fuzzRecords(data)
		path := filepath.Join(t.TempDir(), "db")
		db, err := pagestore.Open(path, &pagestore.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		err = db.Update(func(tx *pagestore.Tx) error {
			for _, bk := range []struct {
				name []byte
				recs [][2][]byte
			}{{KeyBucket, keys}, {MetaBucket, meta}} {
				b, err := tx.CreateBucketIfNotExists(bk.name)
				if err != nil {
					return err
				}
				for _, r := range bk.recs {
					if err := b.Put(r[0], r[1]); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		be, err := NewBackend(db, BackendConfig{BatchInterval: time.Hour, BatchLimit: 1})
		if err != nil {
			return // a meta record it refuses
		}
		defer be.Close()
		s, err := OpenStore(be, StoreConfig{})
		if err != nil {
			if !errors.Is(err, pagestore.ErrCorrupt) {
				t.Logf("open refused with %v", err)
			}
			return
		}
		defer s.Close()
		rev := s.Rev()
		t.Logf("opened: %d records, revision %d, compacted %d, %d keys", len(keys), rev, s.CompactRev(), s.KeyCount())
		for _, r := range []int64{0, rev, rev - 1, 1, s.CompactRev() + 1} {
			_, _ = s.Range(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Revision: r})
			_, _ = s.RangeEncoded(&pb.RangeRequest{Key: []byte("k"), RangeEnd: []byte("l"), Revision: r, CountOnly: r%2 == 0})
		}
		ci := be.ConsistentIndex() + 1
		_, _ = s.Put(ci, 1, &pb.PutRequest{Key: []byte{'k', 1}, Value: []byte("new"), PrevKv: true})
		_, _ = s.DeleteRange(ci+1, 1, &pb.DeleteRangeRequest{Key: []byte{'k', 2}, PrevKv: true})
		if _, done, err := s.Compact(ci+2, 1, &pb.CompactionRequest{Revision: s.Rev() - 1}); err == nil && done != nil {
			<-done
		}
		_, _, _ = s.HashKV(0)
		_, _ = s.Range(&pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}})
	})
}
