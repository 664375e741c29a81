package etcdsnap

import (
	"context"
	"crypto/sha256"
	"io"
	"testing"

	"github.com/strata-db/strata/pagestore"
)

// BenchmarkWriteEtcd plans and writes the etcd snapshot.db of a 64 MiB
// key bucket (1 KiB values) to io.Discard: both passes, the SHA-256, no
// network. Compare with BenchmarkWriteStrataImage, the page copy.
func BenchmarkWriteEtcd(b *testing.B) {
	db := benchStore(b)
	tx, err := db.Begin(false)
	if err != nil {
		b.Fatal(err)
	}
	defer tx.Rollback()
	for b.Loop() {
		e, err := PlanEtcd(context.Background(), tx, EtcdOptions{})
		if err != nil {
			b.Fatal(err)
		}
		n, err := e.WriteTo(io.Discard)
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(n)
	}
}

// BenchmarkWriteStrataImage copies the same store's pages and hashes
// them, as the server streams the opt-in Strata format.
func BenchmarkWriteStrataImage(b *testing.B) {
	db := benchStore(b)
	tx, err := db.Begin(false)
	if err != nil {
		b.Fatal(err)
	}
	defer tx.Rollback()
	for b.Loop() {
		n, err := tx.WriteTo(sha256.New())
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(n)
	}
}

func benchStore(b *testing.B) *pagestore.DB {
	return openStore(b, func(tx *pagestore.Tx) error {
		v := fill(1024, 'v')
		for i := 0; i < 64<<10; i++ {
			if err := put(tx, "key", revKey(int64(i)), v); err != nil {
				return err
			}
		}
		return nil
	})
}
