package etcdsnap

import (
	"math/rand"
	"testing"
	"time"
)

// TestBranchPlanShapes feeds branchPlan random sequences of leaves (first
// key lengths) and checks the shape bbolt needs: every branch node has at
// least two children, each level's counts add up to the nodes below it,
// the top level is one node, and the pages are what the nodes' sizes
// give. It prints a seed to replay with -seed; the lone-child merge and
// the dropped level are counted to show they were exercised.
func TestBranchPlanShapes(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	t.Logf("seed %d (replay: go test ./etcdsnap -run TestBranchPlanShapes -seed %d)", seed, seed)
	rng := rand.New(rand.NewSource(seed))
	merged, dropped := 0, 0
	for round := 0; round < 3000; round++ {
		leaves := 1 + rng.Intn(2000)
		if round%3 == 0 {
			leaves = 1 + rng.Intn(20)
		}
		keyLen := func() int64 {
			switch rng.Intn(10) {
			case 0:
				return int64(1 + rng.Intn(maxKeySize))
			case 1:
				return int64(1000 + rng.Intn(2000))
			}
			return int64(1 + rng.Intn(40))
		}
		lens := make([]int64, leaves)
		var b branchPlan
		for i := range lens {
			lens[i] = keyLen()
			b.add(0, lens[i])
		}
		// Count what finish will do before it does it.
		for _, lv := range b.levels {
			if lv.open == 1 && len(lv.counts) > 0 {
				merged++
			}
		}
		b.finish(1)
		if leaves == 1 {
			if len(b.levels) != 0 || b.pages != 0 {
				t.Fatalf("one leaf: %d levels, %d pages", len(b.levels), b.pages)
			}
			continue
		}
		if len(b.levels) == 0 {
			t.Fatalf("%d leaves and no branch level", leaves)
		}
		// Recompute the nodes' sizes bottom-up from the counts.
		children := lens
		var pages int64
		for l, lv := range b.levels {
			var sum int
			var next []int64
			i := 0
			for _, c := range lv.counts {
				if c < 2 {
					t.Fatalf("round %d: level %d has a node with %d children", round, l, c)
				}
				size := int64(pageHeaderSize)
				for j := 0; j < int(c); j++ {
					size += branchElemSize + children[i+j]
				}
				pages += pagesFor(size)
				next = append(next, children[i])
				i += int(c)
				sum += int(c)
			}
			if sum != len(children) {
				t.Fatalf("round %d: level %d has %d children in its nodes, %d below", round, l, sum, len(children))
			}
			if l == len(b.levels)-1 && len(lv.counts) != 1 {
				t.Fatalf("round %d: the top level has %d nodes", round, len(lv.counts))
			}
			if l == len(b.levels)-1 {
				if root := pagesFor(pageHeaderSize + sizeOf(children)); root != b.root {
					t.Fatalf("round %d: root pages %d, planned %d", round, root, b.root)
				}
			}
			children = next
		}
		if pages != b.pages {
			t.Fatalf("round %d: %d branch pages from the counts, planned %d", round, pages, b.pages)
		}
	}
	// A level ending in one node of one child is dropped when a merge
	// left a single node below it.
	var b branchPlan
	for _, l := range []int64{2000, 2000, 100} { // two fill a page, the third is alone
		b.add(0, l)
	}
	b.finish(1)
	if len(b.levels) == 1 && len(b.levels[0].counts) == 1 && b.levels[0].counts[0] == 3 {
		dropped++
	}
	if merged == 0 || dropped == 0 {
		t.Fatalf("the merge (%d) or the dropped level (%d) was never exercised", merged, dropped)
	}
	t.Logf("%d lone children merged", merged)
}

func sizeOf(keys []int64) int64 {
	var s int64
	for _, k := range keys {
		s += branchElemSize + k
	}
	return s
}
