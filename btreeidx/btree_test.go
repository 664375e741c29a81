package btreeidx

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// model is the reference for the randomized test: a sorted slice of distinct
// ints, where every operation is obviously correct.
type model []int

func (m *model) insert(v int) bool {
	i, found := slices.BinarySearch(*m, v)
	if found {
		return true
	}
	*m = slices.Insert(*m, i, v)
	return false
}

func (m *model) delete(v int) bool {
	i, found := slices.BinarySearch(*m, v)
	if found {
		*m = slices.Delete(*m, i, i+1)
	}
	return found
}

// between returns the model's items in [lo, hi).
func (m model) between(lo, hi int) []int {
	i, _ := slices.BinarySearch(m, lo)
	j, _ := slices.BinarySearch(m, hi)
	if j < i {
		return nil
	}
	return m[i:j]
}

// checkTree verifies the structural invariants of t: items sorted, node
// fill between minItems and maxItems (root excepted), all leaves at one
// depth, zeroed slots past n, and Len matching the item count.
func checkTree(t *testing.T, tr *BTree[int]) {
	t.Helper()
	count := 0
	leafDepth := -1
	var prev *int
	var walk func(n *node[int], depth int, isRoot bool)
	walk = func(n *node[int], depth int, isRoot bool) {
		if !isRoot && (n.n < minItems || n.n > maxItems) {
			t.Fatalf("node with %d items (min %d max %d)", n.n, minItems, maxItems)
		}
		if isRoot && n.n == 0 {
			t.Fatalf("empty root is kept")
		}
		for i := n.n; i < maxItems; i++ {
			if n.items[i] != 0 {
				t.Fatalf("slot %d past n=%d not zeroed", i, n.n)
			}
		}
		if n.children == nil {
			if leafDepth == -1 {
				leafDepth = depth
			} else if leafDepth != depth {
				t.Fatalf("leaves at depths %d and %d", leafDepth, depth)
			}
		} else {
			for i := n.n + 1; i <= maxItems; i++ {
				if n.children[i] != nil {
					t.Fatalf("child slot %d past n=%d not nil", i, n.n)
				}
			}
		}
		for i := 0; i <= n.n; i++ {
			if n.children != nil {
				walk(n.children[i], depth+1, false)
			}
			if i < n.n {
				v := n.items[i]
				if prev != nil && *prev >= v {
					t.Fatalf("items out of order: %d then %d", *prev, v)
				}
				prev = &v
				count++
			}
		}
	}
	if tr.root != nil {
		walk(tr.root, 0, true)
	}
	if count != tr.Len() {
		t.Fatalf("Len()=%d but tree holds %d items", tr.Len(), count)
	}
}

func collect(walk func(func(int) bool)) []int {
	var out []int
	walk(func(v int) bool { out = append(out, v); return true })
	return out
}

func reversed(s []int) []int {
	out := slices.Clone(s)
	slices.Reverse(out)
	return out
}

// checkAgainst compares every read operation of tr with the model m, using
// random probes drawn from rng.
func checkAgainst(t *testing.T, rng *rand.Rand, tr *BTree[int], m model, keySpace int) {
	t.Helper()
	checkTree(t, tr)
	if got := collect(tr.Ascend); !slices.Equal(got, m) {
		t.Fatalf("Ascend = %v..., model %v...", head(got), head(m))
	}
	if got := collect(tr.Descend); !slices.Equal(got, reversed(m)) {
		t.Fatalf("Descend mismatch")
	}
	if got := slices.Collect(tr.All()); !slices.Equal(got, m) {
		t.Fatalf("All mismatch")
	}
	for range 4 {
		lo, hi := rng.IntN(keySpace+2)-1, rng.IntN(keySpace+2)-1
		want := m.between(lo, hi)
		if got := collect(func(f func(int) bool) { tr.AscendRange(lo, hi, f) }); !slices.Equal(got, want) {
			t.Fatalf("AscendRange(%d,%d) = %v, want %v", lo, hi, got, want)
		}
		wantD := reversed(m.between(hi+1, lo+1)) // (hi, lo]
		if got := collect(func(f func(int) bool) { tr.DescendRange(lo, hi, f) }); !slices.Equal(got, wantD) {
			t.Fatalf("DescendRange(%d,%d) = %v, want %v", lo, hi, got, wantD)
		}
		if got := collect(func(f func(int) bool) { tr.AscendGreaterOrEqual(lo, f) }); !slices.Equal(got, m.between(lo, 1<<40)) {
			t.Fatalf("AscendGreaterOrEqual(%d) mismatch", lo)
		}
		if got := collect(func(f func(int) bool) { tr.AscendLessThan(lo, f) }); !slices.Equal(got, m.between(-10, lo)) {
			t.Fatalf("AscendLessThan(%d) mismatch", lo)
		}
		if got := collect(func(f func(int) bool) { tr.DescendLessOrEqual(lo, f) }); !slices.Equal(got, reversed(m.between(-10, lo+1))) {
			t.Fatalf("DescendLessOrEqual(%d) mismatch", lo)
		}
		if got := collect(func(f func(int) bool) { tr.DescendGreaterThan(lo, f) }); !slices.Equal(got, reversed(m.between(lo+1, 1<<40))) {
			t.Fatalf("DescendGreaterThan(%d) mismatch", lo)
		}
		// Early stop: the callback sees exactly the first k items.
		k := rng.IntN(5)
		var seen []int
		tr.AscendGreaterOrEqual(lo, func(v int) bool {
			seen = append(seen, v)
			return len(seen) < k
		})
		all := m.between(lo, 1<<40)
		if wantK := all[:min(max(k, 1), len(all))]; !slices.Equal(seen, wantK) {
			t.Fatalf("early stop at %d from %d: got %v want %v", k, lo, seen, wantK)
		}
	}
	checkIter(t, rng, tr, m, keySpace)
}

// checkIter walks the cursor forward and backward from random seeks.
func checkIter(t *testing.T, rng *rand.Rand, tr *BTree[int], m model, keySpace int) {
	t.Helper()
	it := tr.Iter()
	var fw []int
	for ok := it.First(); ok; ok = it.Next() {
		fw = append(fw, it.Item())
	}
	if !slices.Equal(fw, m) {
		t.Fatalf("Iter forward mismatch: %d vs %d items", len(fw), len(m))
	}
	var bw []int
	for ok := it.Last(); ok; ok = it.Prev() {
		bw = append(bw, it.Item())
	}
	if !slices.Equal(bw, reversed(m)) {
		t.Fatalf("Iter backward mismatch")
	}
	for range 4 {
		key := rng.IntN(keySpace+2) - 1
		i, _ := slices.BinarySearch(m, key)
		ok := it.SeekGE(key)
		if ok != (i < len(m)) || ok && it.Item() != m[i] {
			t.Fatalf("SeekGE(%d) = %v,%d; model index %d of %d", key, ok, it.Item(), i, len(m))
		}
		// Zig-zag from the seek point and compare with model positions.
		pos := i
		for n := 0; ok && n < 20; n++ {
			if rng.IntN(2) == 0 {
				ok, pos = it.Next(), pos+1
			} else {
				ok, pos = it.Prev(), pos-1
			}
			want := pos >= 0 && pos < len(m)
			if ok != want {
				t.Fatalf("cursor at model pos %d: valid=%v want %v", pos, ok, want)
			}
			if !ok {
				break
			}
			if it.Item() != m[pos] {
				t.Fatalf("cursor at pos %d: %d want %d", pos, it.Item(), m[pos])
			}
		}
		j, found := slices.BinarySearch(m, key)
		if !found {
			j--
		}
		ok = it.SeekLE(key)
		if ok != (j >= 0) || ok && it.Item() != m[j] {
			t.Fatalf("SeekLE(%d) = %v,%d; model index %d", key, ok, it.Item(), j)
		}
	}
}

func head(s []int) []int { return s[:min(len(s), 10)] }

// TestBTreeModel runs random mutations against a set of trees that are
// clones of one another, each with its own sorted-slice model. Every tree is
// mutated independently after a Clone, so any write that leaks through a
// shared node shows up as a mismatch against the other tree's model.
func TestBTreeModel(t *testing.T) {
	rng := testRand(t)
	const ops = 240_000
	type pair struct {
		tr *BTree[int]
		m  model
	}
	keySpace := 4000
	trees := []*pair{{tr: NewOrdered[int]()}}
	clones := 0
	for op := range ops {
		if op%40_000 == 0 {
			// Vary the key space so the trees grow to several levels
			// and also shrink back through merges.
			keySpace = []int{300, 4000, 20000}[rng.IntN(3)]
		}
		p := trees[rng.IntN(len(trees))]
		switch r := rng.IntN(100); {
		case r < 45:
			v := rng.IntN(keySpace)
			old, replaced := p.tr.ReplaceOrInsert(v)
			if wasIn := p.m.insert(v); replaced != wasIn || replaced && old != v {
				t.Fatalf("op %d: ReplaceOrInsert(%d) = %d,%v, model had it: %v", op, v, old, replaced, wasIn)
			}
		case r < 80:
			v := rng.IntN(keySpace)
			got, ok := p.tr.Delete(v)
			if want := p.m.delete(v); ok != want || ok && got != v {
				t.Fatalf("op %d: Delete(%d) = %d,%v want %v", op, v, got, ok, want)
			}
		case r < 83:
			got, ok := p.tr.DeleteMin()
			if ok != (len(p.m) > 0) || ok && got != p.m[0] {
				t.Fatalf("op %d: DeleteMin = %d,%v", op, got, ok)
			}
			if ok {
				p.m = p.m[1:]
			}
		case r < 86:
			got, ok := p.tr.DeleteMax()
			if ok != (len(p.m) > 0) || ok && got != p.m[len(p.m)-1] {
				t.Fatalf("op %d: DeleteMax = %d,%v", op, got, ok)
			}
			if ok {
				p.m = p.m[:len(p.m)-1]
			}
		case r < 97:
			v := rng.IntN(keySpace)
			_, want := slices.BinarySearch(p.m, v)
			got, ok := p.tr.Get(v)
			if ok != want || ok && got != v || p.tr.Has(v) != want {
				t.Fatalf("op %d: Get(%d) = %d,%v want %v", op, v, got, ok, want)
			}
			mn, okMin := p.tr.Min()
			mx, okMax := p.tr.Max()
			if okMin != (len(p.m) > 0) || okMax != okMin || okMin && (mn != p.m[0] || mx != p.m[len(p.m)-1]) {
				t.Fatalf("op %d: Min/Max = %d,%d", op, mn, mx)
			}
			if p.tr.Len() != len(p.m) {
				t.Fatalf("op %d: Len = %d want %d", op, p.tr.Len(), len(p.m))
			}
		case r < 99:
			if rng.IntN(4) != 0 {
				// Clone in 0.5% of ops, so that clones live for
				// about a thousand ops and diverge a lot.
				break
			}
			// Clone: the new tree starts with a copy of the model.
			clones++
			if len(trees) < 6 {
				trees = append(trees, &pair{tr: p.tr.Clone(), m: slices.Clone(p.m)})
			} else {
				// Drop one and replace it by a fresh clone.
				i := rng.IntN(len(trees))
				trees[i] = &pair{tr: p.tr.Clone(), m: slices.Clone(p.m)}
			}
		default:
			if rng.IntN(20) == 0 {
				p.tr.Clear()
				p.m = nil
			}
		}
		if op%1000 == 0 {
			for _, q := range trees {
				checkAgainst(t, rng, q.tr, q.m, keySpace)
			}
		}
	}
	for _, q := range trees {
		checkAgainst(t, rng, q.tr, q.m, keySpace)
	}
	t.Logf("%d ops, %d clones, final tree sizes:", ops, clones)
	for _, q := range trees {
		t.Logf("  %d items", q.tr.Len())
	}
}

// TestCloneIsolation is a deterministic check of the ownership rule: after a
// Clone both trees can be written and neither sees the other's writes.
func TestCloneIsolation(t *testing.T) {
	a := NewOrdered[int]()
	for i := range 10_000 {
		a.ReplaceOrInsert(i * 2)
	}
	b := a.Clone()
	for i := range 10_000 {
		a.ReplaceOrInsert(i*2 + 1)
		b.Delete(i * 2)
	}
	if a.Len() != 20_000 || b.Len() != 0 {
		t.Fatalf("a.Len=%d b.Len=%d", a.Len(), b.Len())
	}
	for i := range 20_000 {
		if !a.Has(i) {
			t.Fatalf("a lost %d", i)
		}
	}
	checkTree(t, a)
	checkTree(t, b)
}

func TestEmptyTree(t *testing.T) {
	tr := NewOrdered[string]()
	if _, ok := tr.Get("x"); ok {
		t.Fatal("Get on empty")
	}
	if _, ok := tr.Delete("x"); ok {
		t.Fatal("Delete on empty")
	}
	if _, ok := tr.DeleteMin(); ok {
		t.Fatal("DeleteMin on empty")
	}
	if _, ok := tr.Min(); ok {
		t.Fatal("Min on empty")
	}
	it := tr.Iter()
	if it.First() || it.Last() || it.SeekGE("a") || it.SeekLE("a") || it.Next() || it.Prev() || it.Valid() {
		t.Fatal("cursor valid on empty tree")
	}
	var zero Iter[string]
	if zero.First() || zero.Last() || zero.SeekGE("a") || zero.SeekLE("a") || zero.Next() || zero.Prev() || zero.Valid() {
		t.Fatal("zero Iter is valid")
	}
	tr.Ascend(func(string) bool { t.Fatal("Ascend on empty"); return false })
	tr.ReplaceOrInsert("a")
	tr.Delete("a")
	if tr.Len() != 0 || tr.root != nil {
		t.Fatal("tree not empty after delete")
	}
}

func ExampleBTree_Clone() {
	live := NewOrdered[int]()
	for i := range 5 {
		live.ReplaceOrInsert(i)
	}
	snap := live.Clone() // O(1); hand snap to a reader
	live.Delete(0)
	live.ReplaceOrInsert(9)
	fmt.Println(slices.Collect(snap.All()), slices.Collect(live.All()))
	// Output: [0 1 2 3 4] [1 2 3 4 9]
}
