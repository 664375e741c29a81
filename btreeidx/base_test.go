package btreeidx

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/strata-db/strata/vfs"
)

// TestScheduleMatchesCompaction checks keyIndex.schedule against the
// compaction itself on random key histories (deletes and puts again in
// the same main revision included): for every compaction revision, the
// revisions scheduled to become garbage at or below it are exactly those
// compactPlan drops.
func TestScheduleMatchesCompaction(t *testing.T) {
	rng := testRand(t)
	for round := 0; round < 3000; round++ {
		ki, main := randomHistory(t, rng)
		for at := int64(0); at <= main+1; at++ {
			c := ki.clone(2)
			genIdx, revIdx := c.compactPlan(at, nil)
			want := map[Revision]bool{}
			if needsCompact(genIdx, revIdx) {
				for _, g := range c.garbage(genIdx, revIdx, nil) {
					want[g.Rev] = g.Tombstone
				}
			}
			got := map[Revision]bool{}
			ki.schedule(-1, func(becomes int64, r Revision, tomb bool) {
				if becomes <= at {
					got[r] = tomb
				}
			})
			if !maps.Equal(got, want) {
				t.Fatalf("round %d, history %v: a compaction at %d drops %v; the schedule says %v", round, ki.generations, at, want, got)
			}
		}
	}
}

// randomHistory is one key's history of 1 to 12 puts and deletes, some
// at the main revision of the change before; main is its last revision.
func randomHistory(t *testing.T, rng *rand.Rand) (ki *keyIndex, main int64) {
	t.Helper()
	ki = newKeyIndex([]byte("k"), 1)
	main = 1
	for n := 1 + rng.IntN(12); n > 0; n-- {
		sub := int64(0)
		if rng.IntN(3) > 0 {
			main += 1 + rng.Int64N(3)
		} else {
			sub = ki.modified.Sub + 1 // same main revision as the last change
		}
		r := Revision{Main: main, Sub: sub}
		if ki.live() && rng.IntN(3) == 0 {
			if err := ki.tombstone(r); err != nil {
				t.Fatal(err)
			}
		} else if err := ki.put(r); err != nil {
			t.Fatal(err)
		}
	}
	return ki, main
}

// TestPeekAtMatchesGet: wherever peekAt answers a read from a base
// entry's encoding, the answer is the one the decoded entry gives, after
// any compaction since the base; and it answers every read at or after
// the key's last change.
func TestPeekAtMatchesGet(t *testing.T) {
	rng := testRand(t)
	for round := 0; round < 3000; round++ {
		ki, main := randomHistory(t, rng)
		enc := appendKeyIndex(nil, ki)
		for compactAt := int64(0); compactAt <= main+1; compactAt += 1 + rng.Int64N(3) {
			c := ki.clone(2)
			if genIdx, revIdx := c.compactPlan(compactAt, nil); needsCompact(genIdx, revIdx) {
				c.applyCompact(genIdx, revIdx)
			}
			for at := compactAt; at <= main+2; at++ {
				mod, created, ver, found, ok := peekAt(enc, at)
				if !ok {
					if at >= ki.modified.Main {
						t.Fatalf("round %d, history %v: no answer at %d, after the last change %v", round, ki.generations, at, ki.modified)
					}
					continue
				}
				var wmod, wcreated Revision
				var wver int64
				wfound := false
				if !c.isEmpty() {
					var err error
					wmod, wcreated, wver, err = c.get(at)
					wfound = err == nil
				}
				if found != wfound || found && (mod != wmod || created != wcreated || ver != wver) {
					t.Fatalf("round %d, history %v, compacted at %d: at %d peekAt says %v %v %d found %v; the entry says %v %v %d found %v",
						round, ki.generations, compactAt, at, mod, created, ver, found, wmod, wcreated, wver, wfound)
				}
			}
		}
	}
	if _, _, _, _, ok := peekAt([]byte{0x80}, 100); ok {
		t.Fatal("peekAt answered from a truncated entry")
	}
}

// TestOpenBaseDamaged: a base whose bytes changed anywhere, or that was
// cut short, is refused with an error naming the file and an offset, and
// never opens with different contents.
func TestOpenBaseDamaged(t *testing.T) {
	rng := testRand(t)
	x := NewIndex()
	for i := 0; i < 3000; i++ {
		k := []byte(fmt.Sprintf("/registry/pods/ns-%02d/pod-%05d", i%7, i))
		if _, _, _, _, err := x.PutPrior(k, Revision{Main: int64(i + 2)}, int64(i%3)); err != nil {
			t.Fatal(err)
		}
		if i%5 == 0 {
			if err := x.Put(k, Revision{Main: int64(i + 2), Sub: 1}); err != nil {
				t.Fatal(err)
			}
		}
	}
	path := filepath.Join(t.TempDir(), "base")
	if err := WriteBase(vfs.Default, path, x.Clone(), 3001, [16]byte{1}); err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenBase(vfs.Default, path); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad")
	for i := 0; i < 300; i++ {
		b := bytes.Clone(good)
		what := ""
		if i%10 == 0 {
			n := rng.IntN(len(b))
			b, what = b[:n], fmt.Sprintf("cut at %d", n)
		} else {
			off := rng.IntN(len(b))
			b[off] ^= byte(1 + rng.IntN(255))
			what = fmt.Sprintf("byte %d changed", off)
			if off >= baseHeaderUsed+8 && off < baseHeaderSize {
				continue // the header's unused tail
			}
		}
		if err := os.WriteFile(bad, b, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := OpenBase(vfs.Default, bad)
		if !errors.Is(err, ErrBaseCorrupt) || !bytes.Contains([]byte(err.Error()), []byte(bad)) || !bytes.Contains([]byte(err.Error()), []byte("offset")) {
			t.Fatalf("%s: OpenBase: %v; want ErrBaseCorrupt naming the file and an offset", what, err)
		}
	}
}

// TestReplaceBaseAfterCompactedDelete: a key that the base being
// swapped in holds alive, but that was deleted after the base's Clone
// and whose history a compaction then removed from the tree, stays
// deleted once the base is in: ReplaceBase hides the base's copy, which
// would otherwise bring the key back alive, with its lease.
func TestReplaceBaseAfterCompactedDelete(t *testing.T) {
	x := NewIndex()
	if _, _, _, _, err := x.PutPrior([]byte("k"), r(2), 7); err != nil {
		t.Fatal(err)
	}
	if err := x.Put([]byte("other"), r(3)); err != nil {
		t.Fatal(err)
	}
	snap := x.Clone()
	if err := x.Tombstone([]byte("k"), r(4)); err != nil {
		t.Fatal(err)
	}
	if err := x.Put([]byte("other"), r(5)); err != nil {
		t.Fatal(err)
	}
	// Past the tombstone (one at the compaction's revision is kept):
	// k's entry leaves the tree.
	x.CompactGarbage(5)
	path := filepath.Join(t.TempDir(), "base")
	if err := WriteBase(vfs.Default, path, snap, 3, [16]byte{}); err != nil {
		t.Fatal(err)
	}
	b, err := OpenBase(vfs.Default, path)
	if err != nil {
		t.Fatal(err)
	}
	x.ReplaceBase(b, snap)
	if _, _, _, err := x.Get([]byte("k"), 5); err != ErrRevisionNotFound {
		t.Errorf("Get(k) after the swap: %v, want ErrRevisionNotFound (k was deleted at 4)", err)
	}
	if n := x.CountRevisions([]byte("a"), []byte("z"), 5, 0); n != 1 {
		t.Errorf("count after the swap: %d, want 1 (other)", n)
	}
	x.LeasedKeys(func(key []byte, lease int64) bool {
		t.Errorf("LeasedKeys after the swap names %s (lease %d); no key exists with a lease", key, lease)
		return true
	})
}
