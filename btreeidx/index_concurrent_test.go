package btreeidx

import (
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/strata-db/strata/vfs"
)

// TestIndexConcurrent runs one writer (puts, deletes) and one maintainer
// (compactions, and bases written from clones and swapped in, one after
// the other as the store runs them) against readers of the live index and
// of clones. Its assertions are light; its point is to run under -race,
// where any access outside the documented protocol is reported.
func TestIndexConcurrent(t *testing.T) {
	x := NewIndex()
	const keys, revs = 64, 3000
	key := func(i int) []byte { return []byte(fmt.Sprintf("key-%03d", i)) }
	for i := range keys {
		if err := x.Put(key(i), r(int64(i+1))); err != nil {
			t.Fatal(err)
		}
	}
	base := int64(keys)
	var applied atomic.Int64
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Add(1)
	go func() { // the apply goroutine
		defer wg.Done()
		defer close(done)
		for rev := base + 1; rev <= base+revs; rev++ {
			k := key(int(rev) % keys)
			if rev%7 == 0 {
				_ = x.Tombstone(k, r(rev))
			} else if err := x.Put(k, r(rev)); err != nil {
				t.Error(err)
				return
			}
			applied.Store(rev)
		}
	}()
	wg.Add(1)
	go func() { // the compactor goroutine
		defer wg.Done()
		dir := t.TempDir()
		last := int64(0)
		for n := 0; ; n++ {
			select {
			case <-done:
				return
			default:
			}
			rev := applied.Load()
			if rev-100 <= last {
				continue
			}
			last = rev - 100
			x.CompactGarbage(last)
			snap := x.Clone()
			path := filepath.Join(dir, fmt.Sprint("base-", n))
			if err := WriteBase(vfs.Default, path, snap, applied.Load(), [16]byte{}); err != nil {
				t.Error(err)
				return
			}
			b, err := OpenBase(vfs.Default, path)
			if err != nil {
				t.Error(err)
				return
			}
			x.ReplaceBase(b, snap)
		}
	}()
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				if g == 0 {
					// A live read at the base revision never changes
					// until compaction passes it.
					x.Get(key(3), base)
					x.Range(key(0), []byte("\x00"), base+revs)
					x.RangeSince(key(10), key(20), base)
				} else {
					// A clone is read without any lock while the
					// writer goes on.
					c := x.Clone()
					n := c.CountRevisions(nil, []byte("\x00"), base+revs, 0)
					if m := c.CountRevisions(nil, []byte("\x00"), base+revs, 0); m != n {
						t.Errorf("clone changed under a reader: %d then %d", n, m)
						return
					}
					c.Keep(base)
				}
			}
		}()
	}
	wg.Wait()
}

func TestIndexReadsDoNotAllocate(t *testing.T) {
	x := fooIndex(t)
	foo := []byte("foo")
	if n := testing.AllocsPerRun(100, func() { x.Get(foo, 10) }); n != 0 {
		t.Errorf("Get allocates %v times", n)
	}
	if n := testing.AllocsPerRun(100, func() { x.CountRevisions(nil, []byte("\x00"), 10, 0) }); n != 0 {
		t.Errorf("CountRevisions allocates %v times", n)
	}
	if n := testing.AllocsPerRun(100, func() { _ = x.Put(foo, r(1000)); x.Get(foo, 10) }); n > 1 {
		t.Errorf("Put of an existing key allocates %v times", n)
	}
}
