package btreeidx

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/strata-db/strata/vfs"
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

// BenchmarkIndexBase compares reads of an index held in memory with the
// same index resting on a base (NewIndexWithBase, nothing in memory), on
// STRATA_BASE_KEYS keys (default 200,000) with two revisions each, at
// the head revision: a point Get, a page of 500 (Revisions), keys-only
// and count-only over all keys, and WriteBase itself.
func BenchmarkIndexBase(b *testing.B) {
	nkeys := 200_000
	if v, err := strconv.Atoi(os.Getenv("STRATA_BASE_KEYS")); err == nil && v > 0 {
		nkeys = v
	}
	keys := make([][]byte, nkeys)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "/registry/configmaps/ns-%04d/cm-%08d", i%1000, i)
	}
	slices.SortFunc(keys, bytes.Compare)
	mem := NewIndex()
	rev := int64(0)
	for round := range 2 {
		for i := range keys {
			rev++
			if err := mem.Put(keys[(i*7919+round)%nkeys], r(rev)); err != nil {
				b.Fatal(err)
			}
		}
	}
	path := filepath.Join(b.TempDir(), "base")
	start := time.Now()
	if err := WriteBase(vfs.Default, path, mem.Clone(), rev, [16]byte{}); err != nil {
		b.Fatal(err)
	}
	wrote := time.Since(start)
	start = time.Now()
	base, err := OpenBase(vfs.Default, path)
	if err != nil {
		b.Fatal(err)
	}
	opened := time.Since(start)
	st, _ := os.Stat(path)
	b.Logf("%d keys: WriteBase %v, OpenBase %v (warm cache), %.1f MiB", nkeys, wrote, opened, float64(st.Size())/(1<<20))
	b.Run("open-cold", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			f, err := os.Open(path)
			if err != nil {
				b.Fatal(err)
			}
			if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
				b.Fatal(err)
			}
			f.Close()
			b.StartTimer()
			if _, err := OpenBase(vfs.Default, path); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(st.Size())/(1<<20), "MiB")
	})
	for _, c := range []struct {
		name string
		x    *Index
	}{{"memory", mem}, {"base", NewIndexWithBase(base)}} {
		x := c.x
		b.Run(c.name+"/get", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, _, _, err := x.Get(keys[(i*31)%nkeys], rev); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/page500", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				lo := (i * 500) % (nkeys - 500)
				if revs, _ := x.Revisions(keys[lo], []byte{0}, rev, 500, false); len(revs) != 500 {
					b.Fatalf("a page of %d", len(revs))
				}
			}
		})
		b.Run(c.name+"/keys-only-all", func(b *testing.B) {
			b.ReportAllocs()
			var out []KeyAt
			for b.Loop() {
				if out, _ = x.Keys([]byte{0}, []byte{0}, rev, 0, true, out[:0]); len(out) != nkeys {
					b.Fatalf("%d keys", len(out))
				}
			}
		})
		b.Run(c.name+"/count-all", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if n := x.CountRevisions([]byte{0}, []byte{0}, rev, 0); n != nkeys {
					b.Fatalf("count %d", n)
				}
			}
		})
	}
}
