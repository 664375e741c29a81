package pagestore

import (
	"testing"
)

// revisionDB returns a page store holding 20,000 revision keys with
// valSize-byte values in bucket "key", its leaves packed (format version
// 3) or written with 16-byte elements as a version 2 writer did.
func revisionDB(b *testing.B, packed bool, valSize int) *DB {
	packLeaves = packed
	defer func() { packLeaves = true }()
	db := openT(b, tmpDB(b), &Options{NoSync: true})
	b.Cleanup(func() { db.Close() })
	val := make([]byte, valSize)
	if err := db.Update(func(tx *Tx) error {
		bk, err := tx.CreateBucket([]byte("key"))
		if err != nil {
			return err
		}
		for i := uint64(1); i <= 20000; i++ {
			if err := bk.Put(revKey(i), val); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	return db
}

// benchGetSeq measures Get of 100 consecutive revision keys (a 100-key
// prefix range as mvcc reads it: one Get per revision) among 20,000
// records of 281-byte values, in either leaf format:
//
//	go test ./pagestore -run '^$' -bench 'BenchmarkGetSeq|BenchmarkScan' -count 8
func benchGetSeq(b *testing.B, packed bool) {
	db := revisionDB(b, packed, 281)
	tx, err := db.Begin(false)
	if err != nil {
		b.Fatal(err)
	}
	defer tx.Rollback()
	bk, _ := tx.Bucket([]byte("key"))
	keys := make([][]byte, 100)
	for i := range keys {
		keys[i] = revKey(uint64(5000 + i))
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, k := range keys {
			v, err := bk.Get(k)
			if err != nil || len(v) != 281 {
				b.Fatalf("Get %x: %d bytes, %v", k, len(v), err)
			}
		}
	}
}

func BenchmarkGetSeqPacked(b *testing.B)  { benchGetSeq(b, true) }
func BenchmarkGetSeqClassic(b *testing.B) { benchGetSeq(b, false) }

// benchScan measures a cursor walking 1,000 keys (a read transaction
// each), in either leaf format. With readKeys it also reads a byte of
// every key, as mvcc's scans do (they parse each revision).
func benchScan(b *testing.B, packed, readKeys bool) {
	db := revisionDB(b, packed, 256)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tx, err := db.Begin(false)
		if err != nil {
			b.Fatal(err)
		}
		bk, _ := tx.Bucket([]byte("key"))
		c := bk.Cursor()
		n, sum := 0, 0
		for k, _ := c.Seek(revKey(5000)); k != nil && n < 1000; k, _ = c.Next() {
			if readKeys {
				sum += int(k[7])
			}
			n++
		}
		tx.Rollback()
		if n != 1000 || readKeys && sum == 0 {
			b.Fatalf("scanned %d keys (byte sum %d)", n, sum)
		}
	}
}

func BenchmarkScanPacked(b *testing.B)          { benchScan(b, true, false) }
func BenchmarkScanClassic(b *testing.B)         { benchScan(b, false, false) }
func BenchmarkScanReadKeysPacked(b *testing.B)  { benchScan(b, true, true) }
func BenchmarkScanReadKeysClassic(b *testing.B) { benchScan(b, false, true) }
