package pagestore

import (
	"encoding/binary"
	"testing"
)

// BenchmarkPutAppend is one Put of an ascending 17-byte revision key and
// a 256-byte value, 1,000 to a transaction that is rolled back (no I/O):
// the CPU side of seq-insert.
func BenchmarkPutAppend(b *testing.B) {
	db := openT(b, tmpDB(b), &Options{NoSync: true})
	val := make([]byte, 256)
	keys := make([][]byte, 1000)
	for i := range keys {
		keys[i] = make([]byte, 17)
		binary.BigEndian.PutUint64(keys[i], uint64(i+1))
	}
	b.ResetTimer()
	for n := 0; n < b.N; n += len(keys) {
		tx, err := db.Begin(true)
		if err != nil {
			b.Fatal(err)
		}
		bk, err := tx.CreateBucketIfNotExists([]byte("key"))
		if err != nil {
			b.Fatal(err)
		}
		for _, k := range keys {
			if err := bk.Put(k, val); err != nil {
				b.Fatal(err)
			}
		}
		tx.Rollback()
	}
}
