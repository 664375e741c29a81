package lease

import (
	"encoding/binary"
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/strata-db/strata/mvcc"
	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/schema"
)

// Bucket is the page-store bucket holding one record per lease, named as
// in etcd's schema so snapshots convert without rewriting it.
var Bucket = schema.Lease

// The record format is etcd's (server/v3/lease/leasepb.Lease), encoded by
// hand with protowire so that this package does not pull in etcd's server
// module. Wire format, never change: these are leasepb.Lease's field
// numbers, all int64 (varint).
const (
	fieldID           protowire.Number = 1
	fieldTTL          protowire.Number = 2
	fieldRemainingTTL protowire.Number = 3
)

// record is one lease as stored: etcd's leasepb.Lease.
type record struct {
	ID           int64
	TTL          int64 // granted TTL in seconds
	RemainingTTL int64 // last checkpointed remaining TTL; 0 means unset
}

// recordKey is the 8-byte big-endian lease ID, as etcd writes it.
func recordKey(id int64) []byte {
	return binary.BigEndian.AppendUint64(make([]byte, 0, 8), uint64(id))
}

// marshal encodes r as proto3 does: fields in number order, zero values
// omitted, negative numbers as ten-byte varints. The bytes equal
// proto.Marshal(&leasepb.Lease{...}), which the golden test pins.
func (r record) marshal() []byte {
	var b []byte
	for _, f := range []struct {
		num protowire.Number
		v   int64
	}{{fieldID, r.ID}, {fieldTTL, r.TTL}, {fieldRemainingTTL, r.RemainingTTL}} {
		if f.v == 0 {
			continue
		}
		b = protowire.AppendTag(b, f.num, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(f.v))
	}
	return b
}

// unmarshal decodes a record, skipping unknown fields as protobuf readers
// must, so a record written by a newer etcd with more fields still loads.
func unmarshal(b []byte) (record, error) {
	var r record
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return r, protowire.ParseError(n)
		}
		b = b[n:]
		if typ != protowire.VarintType || num < fieldID || num > fieldRemainingTTL {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return r, protowire.ParseError(n)
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return r, protowire.ParseError(n)
		}
		b = b[n:]
		switch num {
		case fieldID:
			r.ID = int64(v)
		case fieldTTL:
			r.TTL = int64(v)
		case fieldRemainingTTL:
			r.RemainingTTL = int64(v)
		}
	}
	return r, nil
}

// putRecord and deleteRecord queue the bucket write in the apply
// goroutine's backend write transaction; it reaches the page store in the
// same commit as the consistent index of the entry being applied.
func putRecord(w *mvcc.WriteTx, r record) {
	w.Put(Bucket, recordKey(r.ID), r.marshal())
}

// DeleteRecord returns the hook that deletes lease id's record inside a
// Store.DeleteKeys write, so that a revoke removes the lease and its keys
// in one commit. Lessor.RevokeAndDelete uses it; a server that calls
// Revoke and DeleteKeys itself must pass it too.
func DeleteRecord(id int64) func(*mvcc.WriteTx) {
	return func(w *mvcc.WriteTx) { w.Delete(Bucket, recordKey(id)) }
}

// createBucket makes sure the bucket exists, as etcd always creates it:
// tools reading a converted snapshot expect it even when empty.
func createBucket(db *pagestore.DB) error {
	err := db.View(func(tx *pagestore.Tx) error {
		_, err := tx.Bucket(Bucket)
		return err
	})
	if !errors.Is(err, pagestore.ErrBucketNotFound) {
		return err
	}
	return db.Update(func(tx *pagestore.Tx) error {
		_, err := tx.CreateBucketIfNotExists(Bucket)
		return err
	})
}

// loadRecords reads every committed lease record.
func loadRecords(db *pagestore.DB) ([]record, error) {
	var recs []record
	err := db.View(func(tx *pagestore.Tx) error {
		b, err := tx.Bucket(Bucket)
		if err != nil {
			return err
		}
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if len(k) != 8 {
				return fmt.Errorf("%w: lease key %x is not 8 bytes", pagestore.ErrCorrupt, k)
			}
			r, err := unmarshal(v)
			if err != nil {
				return fmt.Errorf("%w: lease %016x: %v", pagestore.ErrCorrupt, k, err)
			}
			if id := int64(binary.BigEndian.Uint64(k)); r.ID != id {
				return fmt.Errorf("%w: lease record under key %016x has ID %016x", pagestore.ErrCorrupt, id, r.ID)
			}
			recs = append(recs, r)
		}
		return c.Err()
	})
	return recs, err
}
