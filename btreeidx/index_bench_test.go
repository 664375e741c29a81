package btreeidx

import (
	"fmt"
	"testing"
)

// BenchmarkIndex measures the key index on 100k keys with three revisions
// each, for reference by mvcc's own benchmarks:
//
//	put         a new revision of an existing key
//	put-new     the first revision of a key (index restarts every 100k keys)
//	get-latest  Get at the head revision
//	get-old     Get at a revision in the middle of the history
//	range100    Revisions over 100 consecutive keys at the head revision
//	clone-put   Clone, then one Put on the original (the copy-on-write cost
//	            a writer pays after a snapshot was taken)
func BenchmarkIndex(b *testing.B) {
	const nkeys = 100_000
	keys := make([][]byte, nkeys)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "/registry/pods/default/pod-%06d", i)
	}
	build := func() (*Index, int64) {
		x := NewIndex()
		rev := int64(0)
		for round := range 3 {
			for i := range keys {
				rev++
				if err := x.Put(keys[(i*7919+round)%nkeys], r(rev)); err != nil {
					b.Fatal(err)
				}
			}
		}
		return x, rev
	}
	x, head := build()
	b.Run("put", func(b *testing.B) {
		b.ReportAllocs()
		y, rev := build()
		for i := 0; b.Loop(); i++ {
			rev++
			if err := y.Put(keys[i%nkeys], r(rev)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("put-new", func(b *testing.B) {
		b.ReportAllocs()
		y := NewIndex()
		for i := 0; b.Loop(); i++ {
			if i%nkeys == 0 {
				y = NewIndex()
			}
			if err := y.Put(keys[(i*7919)%nkeys], r(int64(i+1))); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("get-latest", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, _, _, err := x.Get(keys[(i*31)%nkeys], head); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("get-old", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			x.Get(keys[(i*31)%nkeys], head/2)
		}
	})
	b.Run("range100", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			lo := (i * 31) % (nkeys - 100)
			if revs, _ := x.Revisions(keys[lo], keys[lo+100], head, 0, false); len(revs) != 100 {
				b.Fatalf("range saw %d keys", len(revs))
			}
		}
	})
	b.Run("clone-put", func(b *testing.B) {
		b.ReportAllocs()
		y, rev := build()
		for i := 0; b.Loop(); i++ {
			_ = y.Clone()
			rev++
			if err := y.Put(keys[(i*31)%nkeys], r(rev)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkIndexShortKeys: Get and Put of 10,000 8-byte keys in a random
// order, as etcd's benchmark's txn-put (--key-size=8
// --key-space-size=10000) makes them.
func BenchmarkIndexShortKeys(b *testing.B) {
	const nkeys = 10_000
	keys := make([][]byte, nkeys)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "%08d", (i*7919)%nkeys)
	}
	x := NewIndex()
	rev := int64(0)
	for _, k := range keys {
		rev++
		if err := x.Put(k, r(rev)); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("get", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if _, _, _, err := x.Get(keys[(i*31)%nkeys], rev); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("put", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			rev++
			if _, _, _, _, err := x.PutPrior(keys[(i*31)%nkeys], r(rev), 0); err != nil {
				b.Fatal(err)
			}
		}
	})
}
