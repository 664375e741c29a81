package pagestore

import (
	"testing"
)

// benchGetSeq measures Get of 100 consecutive revision keys (a 100-key
// prefix range as mvcc reads it: one Get per revision) in a 20,000-record
// bucket of 281-byte values, its leaves packed (format version 3) or
// written with 16-byte elements as a version 2 writer did:
//
//	go test ./pagestore -run '^$' -bench 'BenchmarkGetSeq' -count 8
func benchGetSeq(b *testing.B, packed bool) {
	packLeaves = packed
	defer func() { packLeaves = true }()
	db := openT(b, tmpDB(b), &Options{NoSync: true})
	defer db.Close()
	val := make([]byte, 281)
	const n = 20000
	db.Update(func(tx *Tx) error {
		bk, _ := tx.CreateBucket([]byte("key"))
		for i := uint64(1); i <= n; i++ {
			bk.Put(revKey(i), val)
		}
		return nil
	})
	packLeaves = true
	tx, _ := db.Begin(false)
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
				b.Fatal("miss")
			}
		}
	}
}

func BenchmarkGetSeqPacked(b *testing.B)  { benchGetSeq(b, true) }
func BenchmarkGetSeqClassic(b *testing.B) { benchGetSeq(b, false) }

var touch byte

func benchScan(b *testing.B, packed bool) {
	packLeaves = packed
	defer func() { packLeaves = true }()
	db := openT(b, tmpDB(b), &Options{NoSync: true})
	defer db.Close()
	val := make([]byte, 256)
	const n = 20000
	db.Update(func(tx *Tx) error {
		bk, _ := tx.CreateBucket([]byte("key"))
		for i := uint64(1); i <= n; i++ {
			bk.Put(revKey(i), val)
		}
		return nil
	})
	packLeaves = true
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tx, _ := db.Begin(false)
		bk, _ := tx.Bucket([]byte("key"))
		c := bk.Cursor()
		j := 0
		for k, _ := c.Seek(revKey(5000)); k != nil && j < 1000; k, _ = c.Next() {
			j += int(k[7] & touch)
			j++
		}
		tx.Rollback()
	}
}

func BenchmarkScanPacked(b *testing.B)  { benchScan(b, true) }
func BenchmarkScanClassic(b *testing.B) { benchScan(b, false) }

func BenchmarkScanTouchPacked(b *testing.B)  { touch = 1; benchScan(b, true); touch = 0 }
func BenchmarkScanTouchClassic(b *testing.B) { touch = 1; benchScan(b, false); touch = 0 }
