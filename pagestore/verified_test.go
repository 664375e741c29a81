package pagestore

import (
	"sync"
	"testing"
)

// TestVerifiedSet: bits are per page, across the lazily allocated blocks;
// concurrent first marks in one block share one block (none is lost to a
// racing allocation); a fresh set holds no block at all.
func TestVerifiedSet(t *testing.T) {
	const pages = 3*verifiedChunk + 10
	v := newVerifiedSet(pages)
	for i := range v.blocks {
		if v.blocks[i].Load() != nil {
			t.Fatalf("block %d allocated before any page was verified", i)
		}
	}
	ids := []pgid{2, 63, 64, verifiedChunk - 1, verifiedChunk, 2*verifiedChunk + 5, pages - 1}
	for _, id := range ids {
		v.add(id)
	}
	added := map[pgid]bool{}
	for _, id := range ids {
		added[id] = true
	}
	for _, id := range ids {
		if !v.has(id) {
			t.Fatalf("page %d not verified after add", id)
		}
		if n := id + 1; n < pages && !added[n] && v.has(n) {
			t.Fatalf("page %d verified, but only its neighbour was added", n)
		}
	}
	v.remove(63)
	v.remove(verifiedChunk + 7) // never added: a no-op
	if v.has(63) || !v.has(64) || !v.has(2) {
		t.Fatal("remove cleared the wrong bits")
	}

	// 64 goroutines mark distinct pages of one untouched block at once.
	base := pgid(verifiedChunk)*1 + 1000
	var wg sync.WaitGroup
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v.add(base + pgid(g)*3)
		}()
	}
	wg.Wait()
	for g := 0; g < 64; g++ {
		if !v.has(base + pgid(g)*3) {
			t.Fatalf("page %d lost to a racing block allocation", base+pgid(g)*3)
		}
	}
}
