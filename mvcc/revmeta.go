package mvcc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/strata-db/strata/pagestore"
)

// The revision metadata bucket (RevMetaBucket) holds, under each key of
// the key bucket, what opening the store needs of that record: the user
// key, create revision, version and lease that the record's KeyValue
// holds, and the CRC-32C and length of the record's key and value bytes
// (the record sums, sums.go). Opening reads it instead of the key bucket,
// so what it reads follows the number of records, not their bytes: a
// key bucket of 8 KiB values is about a hundred times larger.
//
// Value format: crc (u32 little-endian), then uvarints n (the record's
// byte length), create revision, version and lease (all 0 for a
// tombstone), then the user key to the end.
//
// Crash safety: the backend writes a record and its metadata in the same
// page-store commit, and a compaction deletes both in the same commit, so
// the two buckets hold the same keys after any crash. A store that has
// records but no complete metadata (written by an older Strata, converted
// from etcd's format, restored by a tool that copies only etcd's buckets,
// or cut short while building it) is detected by the marker key below:
// buildRevMeta writes it in the last commit of a build, which starts by
// emptying the bucket, so a marker means every record has its metadata.
// The marker's key is shorter than any revision key, so it is never a
// record's key; readers of the bucket skip it. Its value is a random
// token, new with each build: an index base (indexbase.go) is used only
// with the metadata it was written from.

// revMetaComplete marks the bucket as covering every record.
var revMetaComplete = []byte("complete")

// appendRevMeta appends a record's metadata value to dst.
func appendRevMeta(dst []byte, sum recordSum, key []byte, create, version, lease int64) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, sum.crc)
	dst = protowire.AppendVarint(dst, uint64(sum.n))
	dst = protowire.AppendVarint(dst, uint64(create))
	dst = protowire.AppendVarint(dst, uint64(version))
	dst = protowire.AppendVarint(dst, uint64(lease))
	return append(dst, key...)
}

// decodeRevMeta reads a metadata value written by appendRevMeta for the
// record r. The returned key aliases v.
func decodeRevMeta(r Revision, tomb bool, v []byte) (recordSum, kvMeta, error) {
	var m kvMeta
	if len(v) < 4 {
		return recordSum{}, m, errors.New("revision metadata too short")
	}
	crc := binary.LittleEndian.Uint32(v)
	v = v[4:]
	var f [4]uint64
	for i := range f {
		x, n := protowire.ConsumeVarint(v)
		if n < 0 {
			return recordSum{}, m, fmt.Errorf("revision metadata: %w", protowire.ParseError(n))
		}
		f[i], v = x, v[n:]
	}
	if f[0] > 1<<32-1 {
		return recordSum{}, m, fmt.Errorf("revision metadata: record length %d", f[0])
	}
	sum := recordSum{main: r.Main, sub: uint32(r.Sub), crc: crc, n: uint32(f[0])}
	if tomb {
		sum.sub |= sumTombstone
	}
	m.key, m.create, m.version, m.lease = v, int64(f[1]), int64(f[2]), int64(f[3])
	return sum, m, nil
}

// revMetaBuildBatch is how many records one commit of buildRevMeta
// covers: enough to amortize a commit, few enough to bound its memory.
// Tests lower it.
var revMetaBuildBatch = 8192

// revMetaBuildHook, when set (by tests), is called after each commit of
// a build with the records covered so far.
var revMetaBuildHook func(records int, done bool)

// buildRevMeta makes the metadata bucket cover every record, if its
// marker says it does not: it empties the bucket, reads the key bucket in
// batches (one read view and one commit each), and writes the marker in
// the last commit. Nothing else writes the page store meanwhile: it runs
// when the store opens or restores, before any apply.
func (s *Store) buildRevMeta() error {
	complete := false
	err := s.be.DB().View(func(tx *pagestore.Tx) error {
		mb, err := tx.Bucket(RevMetaBucket)
		if errors.Is(err, pagestore.ErrBucketNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		v, err := mb.Get(revMetaComplete)
		complete = v != nil
		return err
	})
	if err != nil || complete {
		return err
	}
	start, lastLog := time.Now(), time.Now()
	s.log.Info("building the revision metadata of the key bucket; the store opens once it is done")
	err = s.be.update(func(tx *pagestore.Tx) error {
		if err := tx.DeleteBucket(RevMetaBucket); err != nil && !errors.Is(err, pagestore.ErrBucketNotFound) {
			return err
		}
		_, err := tx.CreateBucket(RevMetaBucket)
		return err
	})
	if err != nil {
		return err
	}
	var from []byte
	records, bytesRead := 0, int64(0)
	for {
		type entry struct{ k, v []byte }
		var batch []entry
		done := false
		err := s.be.DB().View(func(tx *pagestore.Tx) error {
			kb, err := tx.Bucket(KeyBucket)
			if err != nil {
				return err
			}
			c := kb.Cursor()
			k, v := c.First()
			if from != nil {
				k, v = c.Seek(from)
				if k != nil && bytes.Equal(k, from) {
					k, v = c.Next()
				}
			}
			for ; k != nil && len(batch) < revMetaBuildBatch; k, v = c.Next() {
				rev, tomb, err := parseRevKey(k)
				if err != nil {
					return fmt.Errorf("%w: %v", pagestore.ErrCorrupt, err)
				}
				kv, err := decodeKVMeta(v)
				if err != nil {
					return fmt.Errorf("%w: value of revision %v: %v", pagestore.ErrCorrupt, rev, err)
				}
				sum := makeRecordSum(rev, tomb, k, v)
				batch = append(batch, entry{bytes.Clone(k), appendRevMeta(nil, sum, kv.key, kv.create, kv.version, kv.lease)})
				bytesRead += int64(len(k) + len(v))
			}
			done = k == nil
			return c.Err()
		})
		if err != nil {
			return err
		}
		err = s.be.update(func(tx *pagestore.Tx) error {
			mb, err := tx.Bucket(RevMetaBucket)
			if err != nil {
				return err
			}
			for _, e := range batch {
				if err := mb.Put(e.k, e.v); err != nil {
					return err
				}
			}
			if done {
				return mb.Put(revMetaComplete, newBaseToken())
			}
			return nil
		})
		if err != nil {
			return err
		}
		records += len(batch)
		if revMetaBuildHook != nil {
			revMetaBuildHook(records, done)
		}
		if done {
			break
		}
		from = batch[len(batch)-1].k
		if time.Since(lastLog) >= 5*time.Second {
			lastLog = time.Now()
			s.log.Info("building the revision metadata of the key bucket", "records", records, "read-bytes", bytesRead, "took", time.Since(start))
		}
	}
	s.log.Info("built the revision metadata of the key bucket", "records", records, "read-bytes", bytesRead, "took", time.Since(start))
	return nil
}

// CheckRevMeta checks tx's revision metadata against the key bucket: if
// the bucket is marked complete, every record must have exactly the
// metadata a build would write, and there must be no other entry. A
// store without complete metadata passes (it is rebuilt on open). The
// error names the first revision that differs.
func CheckRevMeta(tx *pagestore.Tx) error {
	mb, err := tx.Bucket(RevMetaBucket)
	if errors.Is(err, pagestore.ErrBucketNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if v, err := mb.Get(revMetaComplete); err != nil || v == nil {
		return err
	}
	kb, err := tx.Bucket(KeyBucket)
	if err != nil {
		return err
	}
	mc := mb.Cursor()
	nextMeta := func(k, v []byte) ([]byte, []byte) {
		for k != nil && bytes.Equal(k, revMetaComplete) {
			k, v = mc.Next()
		}
		return k, v
	}
	mk, mv := nextMeta(mc.First())
	kc := kb.Cursor()
	var want []byte
	for k, v := kc.First(); k != nil; k, v = kc.Next() {
		rev, tomb, err := parseRevKey(k)
		if err != nil {
			return fmt.Errorf("%w: %v", pagestore.ErrCorrupt, err)
		}
		if mk == nil || bytes.Compare(mk, k) > 0 {
			return fmt.Errorf("%w: %s: no metadata for the record of revision %v", pagestore.ErrCorrupt, RevMetaBucket, rev)
		}
		if bytes.Compare(mk, k) < 0 {
			r, _, _ := parseRevKey(mk)
			return fmt.Errorf("%w: %s: metadata for revision %v, which has no record", pagestore.ErrCorrupt, RevMetaBucket, r)
		}
		kv, err := decodeKVMeta(v)
		if err != nil {
			return fmt.Errorf("%w: value of revision %v: %v", pagestore.ErrCorrupt, rev, err)
		}
		want = appendRevMeta(want[:0], makeRecordSum(rev, tomb, k, v), kv.key, kv.create, kv.version, kv.lease)
		if !bytes.Equal(mv, want) {
			return fmt.Errorf("%w: %s: the metadata of revision %v does not match its record", pagestore.ErrCorrupt, RevMetaBucket, rev)
		}
		mk, mv = nextMeta(mc.Next())
	}
	if err := kc.Err(); err != nil {
		return err
	}
	if mk != nil {
		r, _, _ := parseRevKey(mk)
		return fmt.Errorf("%w: %s: metadata for revision %v, which has no record", pagestore.ErrCorrupt, RevMetaBucket, r)
	}
	return mc.Err()
}
