package mvcc

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestWatcherGroupModel checks match against a linear scan while watchers
// of single keys, ranges and from-key ranges come and go.
func TestWatcherGroupModel(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	key := func() []byte { return []byte(fmt.Sprintf("%02d", r.IntN(30))) }
	g := newWatcherGroup()
	var all []*watcher
	for step := 0; step < 3000; step++ {
		if len(all) > 0 && r.IntN(3) == 0 {
			i := r.IntN(len(all))
			if !g.remove(all[i]) {
				t.Fatal("remove of a member failed")
			}
			if g.remove(all[i]) {
				t.Fatal("second remove succeeded")
			}
			all = append(all[:i], all[i+1:]...)
		} else {
			w := &watcher{key: key()}
			switch r.IntN(3) {
			case 1:
				w.end = key()
			case 2:
				w.end = []byte{}
			}
			g.add(w)
			all = append(all, w)
		}
		if g.len() != len(all) {
			t.Fatalf("len %d, want %d", g.len(), len(all))
		}
		k := key()
		got := map[*watcher]bool{}
		g.match(k, func(w *watcher) { got[w] = true })
		n := 0
		for _, w := range all {
			if w.contains(k) {
				n++
				if !got[w] {
					t.Fatalf("step %d: %q-%q does not match %q", step, w.key, w.end, k)
				}
			}
		}
		if n != len(got) {
			t.Fatalf("step %d: %d matches, want %d", step, len(got), n)
		}
		seen := 0
		g.each(func(*watcher) bool { seen++; return true })
		if seen != len(all) {
			t.Fatalf("each visited %d of %d", seen, len(all))
		}
	}
}
