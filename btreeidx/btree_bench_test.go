package btreeidx

import (
	"math/rand/v2"
	"runtime"
	"testing"

	gbtree "github.com/google/btree"
)

// BenchmarkBTree compares this package's BTree with github.com/google/btree
// (BTreeG, degree 32, i.e. at most 63 items a node, the same geometry and the
// one etcd uses) in one run, on int items:
//
//	insert      one ReplaceOrInsert of a random key; the tree restarts empty
//	            every benchN inserts, so sizes 0..benchN are all measured
//	get         one Get of a present random key in a benchN-item tree
//	range       one AscendRange over 100 consecutive items from a random key
//	clone       one Clone of a benchN-item tree
//	clonewrite  Clone, then one insert into the clone (the copy-on-write path
//	            copy that the first write after a snapshot pays)
//
// Run: go test ./btreeidx -run '^$' -bench BenchmarkBTree -benchmem
func BenchmarkBTree(b *testing.B) {
	const benchN = 100_000
	perm := rand.New(rand.NewPCG(1, 2)).Perm(benchN)

	type impl struct {
		name string
		new  func() treeOps
		full treeOps // benchN items, for the read and clone cases
	}
	impls := []*impl{
		{name: "ours", new: func() treeOps { return oursTree{NewOrdered[int]()} }},
		{name: "google", new: func() treeOps { return googleTree{gbtree.NewOrderedG[int](32)} }},
	}
	for _, im := range impls {
		im.full = im.new()
		for _, v := range perm {
			im.full.insert(v)
		}
	}
	cases := []struct {
		name string
		run  func(b *testing.B, im *impl)
	}{
		{"insert", func(b *testing.B, im *impl) {
			tr := im.new()
			for i := 0; b.Loop(); i++ {
				if i%benchN == 0 {
					tr = im.new()
				}
				tr.insert(perm[i%benchN])
			}
		}},
		{"get", func(b *testing.B, im *impl) {
			for i := 0; b.Loop(); i++ {
				if !im.full.get(perm[i%benchN]) {
					b.Fatal("missing key")
				}
			}
		}},
		{"range", func(b *testing.B, im *impl) {
			for i := 0; b.Loop(); i++ {
				lo := perm[i%benchN]
				if n := im.full.rangeCount(lo, lo+100); n != min(100, benchN-lo) {
					b.Fatalf("range from %d saw %d items", lo, n)
				}
			}
		}},
		{"clone", func(b *testing.B, im *impl) {
			for b.Loop() {
				sinkTree = im.full.clone()
			}
		}},
		{"clonewrite", func(b *testing.B, im *impl) {
			for i := 0; b.Loop(); i++ {
				c := im.full.clone()
				c.insert(perm[i%benchN])
			}
		}},
	}
	// Case-major order puts the two implementations of a case next to
	// each other in time, which matters on a shared, noisy machine.
	for _, c := range cases {
		for _, im := range impls {
			b.Run(im.name+"/"+c.name, func(b *testing.B) {
				b.ReportAllocs()
				// Start each case from a collected heap, so neither
				// implementation pays for the other's garbage.
				runtime.GC()
				c.run(b, im)
			})
		}
	}
}

var sinkTree treeOps

// treeOps is the common surface the benchmark drives; the wrappers are thin
// so both trees pay the same interface-call overhead.
type treeOps interface {
	insert(int)
	get(int) bool
	rangeCount(lo, hi int) int
	clone() treeOps
}

type oursTree struct{ t *BTree[int] }

func (o oursTree) insert(v int)   { o.t.ReplaceOrInsert(v) }
func (o oursTree) get(v int) bool { _, ok := o.t.Get(v); return ok }
func (o oursTree) clone() treeOps { return oursTree{o.t.Clone()} }
func (o oursTree) rangeCount(lo, hi int) int {
	n := 0
	o.t.AscendRange(lo, hi, func(int) bool { n++; return true })
	return n
}

type googleTree struct{ t *gbtree.BTreeG[int] }

func (g googleTree) insert(v int)   { g.t.ReplaceOrInsert(v) }
func (g googleTree) get(v int) bool { _, ok := g.t.Get(v); return ok }
func (g googleTree) clone() treeOps { return googleTree{g.t.Clone()} }
func (g googleTree) rangeCount(lo, hi int) int {
	n := 0
	g.t.AscendRange(lo, hi, func(int) bool { n++; return true })
	return n
}
