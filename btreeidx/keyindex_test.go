package btreeidx

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
)

func r(main int64) Revision       { return Revision{Main: main} }
func rs(main, sub int64) Revision { return Revision{Main: main, Sub: sub} }

// fooIndex builds the history used by the table tests, three lives of "foo":
//
//	gen 0: put 2, put 4, delete 6
//	gen 1: put 8, put 10, delete 12
//	gen 2: put 14.0, put 14.1, put 16 (etcd's txn validation never
//	       writes one key twice in a revision, but the index must still
//	       answer with the last sub-revision, as etcd's does)
//
// plus "bar": put 3, delete 5 (deleted now), and "baz": put 7 (live).
func fooIndex(t *testing.T) *Index {
	t.Helper()
	x := NewIndex()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	foo, bar, baz := []byte("foo"), []byte("bar"), []byte("baz")
	must(x.Put(foo, r(2)))
	must(x.Put(bar, r(3)))
	must(x.Put(foo, r(4)))
	must(x.Tombstone(bar, r(5)))
	must(x.Tombstone(foo, r(6)))
	must(x.Put(baz, r(7)))
	must(x.Put(foo, r(8)))
	must(x.Put(foo, r(10)))
	must(x.Tombstone(foo, r(12)))
	must(x.Put(foo, rs(14, 0)))
	must(x.Put(foo, rs(14, 1)))
	must(x.Put(foo, r(16)))
	return x
}

type getWant struct {
	at       int64
	mod, cre Revision
	ver      int64 // 0: not found
}

// fooGets is the hand-computed etcd answer for every revision of "foo".
var fooGets = []getWant{
	{1, Revision{}, Revision{}, 0}, // before the key existed
	{2, r(2), r(2), 1},             // create: version 1
	{3, r(2), r(2), 1},
	{4, r(4), r(2), 2},
	{5, r(4), r(2), 2},
	{6, Revision{}, Revision{}, 0}, // the tombstone itself
	{7, Revision{}, Revision{}, 0}, // gap between lives
	{8, r(8), r(8), 1},             // re-create: create_revision and version reset
	{9, r(8), r(8), 1},
	{10, r(10), r(8), 2},
	{11, r(10), r(8), 2},
	{12, Revision{}, Revision{}, 0},
	{13, Revision{}, Revision{}, 0},
	{14, rs(14, 1), rs(14, 0), 2}, // last sub-revision of main 14
	{15, rs(14, 1), rs(14, 0), 2},
	{16, r(16), rs(14, 0), 3},
	{100, r(16), rs(14, 0), 3},
}

func checkGets(t *testing.T, x *Index, key string, wants []getWant, from int64) {
	t.Helper()
	for _, w := range wants {
		if w.at < from {
			continue
		}
		mod, cre, ver, err := x.Get([]byte(key), w.at)
		if w.ver == 0 {
			if !errors.Is(err, ErrRevisionNotFound) {
				t.Errorf("Get(%s, %d) = %v %v %d %v, want not found", key, w.at, mod, cre, ver, err)
			}
			continue
		}
		if err != nil || mod != w.mod || cre != w.cre || ver != w.ver {
			t.Errorf("Get(%s, %d) = %v %v %d %v, want %v %v %d", key, w.at, mod, cre, ver, err, w.mod, w.cre, w.ver)
		}
	}
}

func TestKeyIndexGet(t *testing.T) {
	x := fooIndex(t)
	checkGets(t, x, "foo", fooGets, 0)
	checkGets(t, x, "bar", []getWant{{2, Revision{}, Revision{}, 0}, {3, r(3), r(3), 1}, {4, r(3), r(3), 1}, {5, Revision{}, Revision{}, 0}, {9, Revision{}, Revision{}, 0}}, 0)
	if _, _, _, err := x.Get([]byte("nope"), 10); !errors.Is(err, ErrRevisionNotFound) {
		t.Fatalf("Get of a missing key: %v", err)
	}
}

func TestKeyIndexWriteErrors(t *testing.T) {
	x := fooIndex(t)
	// Deleting a deleted or never-written key finds nothing to delete.
	if err := x.Tombstone([]byte("bar"), r(20)); !errors.Is(err, ErrRevisionNotFound) {
		t.Fatalf("Tombstone of deleted key: %v", err)
	}
	if err := x.Tombstone([]byte("nope"), r(20)); !errors.Is(err, ErrRevisionNotFound) {
		t.Fatalf("Tombstone of missing key: %v", err)
	}
	// Revisions must increase per key; the index refuses, never panics.
	if err := x.Put([]byte("foo"), r(16)); !errors.Is(err, ErrStaleRevision) {
		t.Fatalf("Put at the same revision: %v", err)
	}
	if err := x.Tombstone([]byte("foo"), rs(15, 9)); !errors.Is(err, ErrStaleRevision) {
		t.Fatalf("Tombstone at an older revision: %v", err)
	}
	checkGets(t, x, "foo", fooGets, 0)
	// A deleted key comes back with a new generation.
	if err := x.Put([]byte("bar"), r(20)); err != nil {
		t.Fatal(err)
	}
	checkGets(t, x, "bar", []getWant{{19, Revision{}, Revision{}, 0}, {20, r(20), r(20), 1}, {3, r(3), r(3), 1}}, 0)
}

func TestKeyIndexRanges(t *testing.T) {
	x := fooIndex(t)
	type want struct {
		keys []string
		revs []Revision
	}
	cases := []struct {
		key, end string
		nilEnd   bool
		at       int64
		want     want
	}{
		{key: "foo", nilEnd: true, at: 16, want: want{[]string{"foo"}, []Revision{r(16)}}},
		{key: "foo", nilEnd: true, at: 7, want: want{}},
		{key: "fo", nilEnd: true, at: 16, want: want{}},
		{key: "a", end: "z", at: 4, want: want{[]string{"bar", "foo"}, []Revision{r(3), r(4)}}},
		{key: "a", end: "z", at: 7, want: want{[]string{"baz"}, []Revision{r(7)}}},
		{key: "bar", end: "baz", at: 4, want: want{[]string{"bar"}, []Revision{r(3)}}},
		{key: "baz", end: "\x00", at: 16, want: want{[]string{"baz", "foo"}, []Revision{r(7), r(16)}}},
		{key: "", end: "\x00", at: 16, want: want{[]string{"baz", "foo"}, []Revision{r(7), r(16)}}},
		{key: "z", end: "a", at: 16, want: want{}},
		{key: "foo", end: "foo", at: 16, want: want{}},
	}
	for _, c := range cases {
		var end []byte
		if !c.nilEnd {
			end = []byte(c.end)
		}
		keys, revs := x.Range([]byte(c.key), end, c.at)
		var got []string
		for _, k := range keys {
			got = append(got, string(k))
		}
		if !slices.Equal(got, c.want.keys) || !slices.Equal(revs, c.want.revs) {
			t.Errorf("Range(%q, %q, %d) = %q %v, want %q %v", c.key, c.end, c.at, got, revs, c.want.keys, c.want.revs)
		}
		if n := x.CountRevisions([]byte(c.key), end, c.at, 0); n != len(c.want.keys) {
			t.Errorf("CountRevisions(%q, %q, %d) = %d, want %d", c.key, c.end, c.at, n, len(c.want.keys))
		}
		revs2, total := x.Revisions([]byte(c.key), end, c.at, 1, true)
		if total != len(c.want.keys) || len(revs2) != min(1, total) || total > 0 && revs2[0] != c.want.revs[0] {
			t.Errorf("Revisions(%q, %q, %d, limit 1) = %v total %d", c.key, c.end, c.at, revs2, total)
		}
	}
	// Without withTotal the walk stops at the limit.
	if revs, total := x.Revisions(nil, []byte("\x00"), 4, 1, false); total != 1 || len(revs) != 1 {
		t.Errorf("Revisions without total = %v %d", revs, total)
	}
	if n := x.CountRevisions(nil, []byte("\x00"), 4, 1); n != 1 {
		t.Errorf("CountRevisions with limit 1 = %d", n)
	}
}

func TestKeyIndexRangeSince(t *testing.T) {
	x := fooIndex(t)
	cases := []struct {
		key, end string
		nilEnd   bool
		rev      int64
		want     []Revision
	}{
		// Main 14 changed foo twice: only its last sub-revision is an event.
		{key: "foo", nilEnd: true, rev: 1, want: []Revision{r(2), r(4), r(6), r(8), r(10), r(12), rs(14, 1), r(16)}},
		{key: "foo", nilEnd: true, rev: 9, want: []Revision{r(10), r(12), rs(14, 1), r(16)}},
		{key: "foo", nilEnd: true, rev: 14, want: []Revision{rs(14, 1), r(16)}},
		{key: "foo", nilEnd: true, rev: 17, want: nil},
		{key: "a", end: "z", rev: 4, want: []Revision{r(4), r(5), r(6), r(7), r(8), r(10), r(12), rs(14, 1), r(16)}},
		{key: "bar", end: "\x00", rev: 1, want: []Revision{r(2), r(3), r(4), r(5), r(6), r(7), r(8), r(10), r(12), rs(14, 1), r(16)}},
	}
	for _, c := range cases {
		var end []byte
		if !c.nilEnd {
			end = []byte(c.end)
		}
		if got := x.RangeSince([]byte(c.key), end, c.rev); !slices.Equal(got, c.want) {
			t.Errorf("RangeSince(%q, %q, %d) = %v, want %v", c.key, c.end, c.rev, got, c.want)
		}
	}
}

func revSet(revs ...Revision) map[Revision]struct{} {
	m := make(map[Revision]struct{})
	for _, r := range revs {
		m[r] = struct{}{}
	}
	return m
}

// TestKeyIndexCompact checks Compact at every revision of the fooIndex
// history against hand-computed etcd results: the revisions returned as
// available, what Keep reports (the same, less a tombstone at the compact
// revision), which keys survive, and that every read at or above the
// compact revision is unchanged.
func TestKeyIndexCompact(t *testing.T) {
	cases := []struct {
		rev       int64
		available map[Revision]struct{}
		keep      map[Revision]struct{}
		keys      []string // keys left in the index
	}{
		{1, revSet(), revSet(), []string{"bar", "baz", "foo"}},
		{2, revSet(r(2)), revSet(r(2)), []string{"bar", "baz", "foo"}},
		{3, revSet(r(2), r(3)), revSet(r(2), r(3)), []string{"bar", "baz", "foo"}},
		{4, revSet(r(4), r(3)), revSet(r(4), r(3)), []string{"bar", "baz", "foo"}},
		// bar's tombstone at 5 is kept by Compact(5), left out of Keep(5).
		{5, revSet(r(4), r(5)), revSet(r(4)), []string{"bar", "baz", "foo"}},
		// foo's first life ends at 6: its tombstone stays for now.
		{6, revSet(r(6)), revSet(), []string{"baz", "foo"}},
		// Between lives: nothing of foo <= 7 is needed.
		{7, revSet(r(7)), revSet(r(7)), []string{"baz", "foo"}},
		{8, revSet(r(8), r(7)), revSet(r(8), r(7)), []string{"baz", "foo"}},
		{11, revSet(r(10), r(7)), revSet(r(10), r(7)), []string{"baz", "foo"}},
		{12, revSet(r(12), r(7)), revSet(r(7)), []string{"baz", "foo"}},
		{13, revSet(r(7)), revSet(r(7)), []string{"baz", "foo"}},
		{14, revSet(rs(14, 1), r(7)), revSet(rs(14, 1), r(7)), []string{"baz", "foo"}},
		{16, revSet(r(16), r(7)), revSet(r(16), r(7)), []string{"baz", "foo"}},
		{99, revSet(r(16), r(7)), revSet(r(16), r(7)), []string{"baz", "foo"}},
	}
	for _, c := range cases {
		x := fooIndex(t)
		if got := x.Keep(c.rev); !maps.Equal(got, c.keep) {
			t.Errorf("Keep(%d) = %v, want %v", c.rev, got, c.keep)
		}
		if got := x.Compact(c.rev); !maps.Equal(got, c.available) {
			t.Errorf("Compact(%d) = %v, want %v", c.rev, got, c.available)
		}
		var left []string
		x.tree.Ascend(func(ki *keyIndex) bool { left = append(left, string(ki.key)); return true })
		if !slices.Equal(left, c.keys) {
			t.Errorf("after Compact(%d) keys %q, want %q", c.rev, left, c.keys)
		}
		checkGets(t, x, "foo", fooGets, c.rev)
		// Compaction is idempotent, and a second one at the same
		// revision reports the same kept set.
		if got := x.Compact(c.rev); !maps.Equal(got, c.available) {
			t.Errorf("second Compact(%d) = %v, want %v", c.rev, got, c.available)
		}
		checkGets(t, x, "foo", fooGets, c.rev)
	}
	// Compacting past a deleted key's tombstone drops the key.
	x := fooIndex(t)
	x.Compact(5)
	x.Compact(6)
	if _, ok := x.lookup([]byte("bar")); ok {
		t.Errorf("bar survived a compaction above its tombstone")
	}
}

// TestKeyIndexCompactTrims checks what the compacted entry holds, not only
// what reads return: dropped generations and revisions are really gone.
func TestKeyIndexCompactTrims(t *testing.T) {
	x := fooIndex(t)
	x.Compact(11)
	ki, _ := x.lookup([]byte("foo"))
	if len(ki.generations) != 2 || !slices.Equal(ki.generations[0].revs, []Revision{r(10), r(12)}) ||
		ki.generations[0].ver != 3 || ki.generations[0].created != r(8) {
		t.Fatalf("after Compact(11): %+v", ki.generations)
	}
	if _, _, _, err := x.Get([]byte("foo"), 9); !errors.Is(err, ErrRevisionNotFound) {
		t.Fatalf("read below the compaction found a dropped revision")
	}
}

// TestIndexCloneIsolation writes different histories into an index and its
// clone and checks that each sees only its own.
func TestIndexCloneIsolation(t *testing.T) {
	x := fooIndex(t)
	c := x.Clone()
	// Both sides append to the same generation, whose revision array has
	// spare capacity: the copies must not share it.
	if err := x.Put([]byte("foo"), rs(20, 1)); err != nil {
		t.Fatal(err)
	}
	if err := c.Tombstone([]byte("foo"), r(20)); err != nil {
		t.Fatal(err)
	}
	x.Compact(20)
	if err := c.Put([]byte("new"), r(21)); err != nil {
		t.Fatal(err)
	}
	if mod, _, ver, err := x.Get([]byte("foo"), 20); err != nil || ver != 4 || mod != rs(20, 1) {
		t.Fatalf("original: foo at 20 mod %v ver %d err %v", mod, ver, err)
	}
	if _, _, _, err := c.Get([]byte("foo"), 20); !errors.Is(err, ErrRevisionNotFound) {
		t.Fatalf("clone: foo at 20 err %v", err)
	}
	checkGets(t, c, "foo", fooGets[:len(fooGets)-1], 0) // old history intact
	if _, _, _, err := x.Get([]byte("new"), 21); err == nil {
		t.Fatal("clone's new key is visible in the original")
	}
	if x.Len() != 2 || c.Len() != 4 {
		t.Fatalf("Len: original %d clone %d", x.Len(), c.Len())
	}
}

func TestIndexRestore(t *testing.T) {
	// The page store after Compact(11) on fooIndex holds, in revision
	// order: baz put 7, foo put 10 (create 8, version 2), foo delete 12,
	// foo puts 14.0, 14.1, 16.
	x := NewIndex()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(x.Restore([]byte("baz"), r(7), r(7), 1, 0, false))
	must(x.Restore([]byte("foo"), r(10), r(8), 2, 0, false))
	must(x.Restore([]byte("foo"), r(12), Revision{}, 0, 0, true))
	must(x.Restore([]byte("foo"), rs(14, 0), rs(14, 0), 1, 0, false))
	must(x.Restore([]byte("foo"), rs(14, 1), rs(14, 0), 2, 0, false))
	must(x.Restore([]byte("foo"), r(16), rs(14, 0), 3, 0, false))
	checkGets(t, x, "foo", fooGets, 11)
	live := fooIndex(t)
	live.Compact(11)
	for _, rev := range []int64{11, 12, 13, 16, 20} {
		if a, b := x.Keep(rev), live.Keep(rev); !maps.Equal(a, b) {
			t.Errorf("Keep(%d): restored %v live %v", rev, a, b)
		}
	}
	// A store whose oldest record of a key is a tombstone.
	y := NewIndex()
	must(y.Restore([]byte("bar"), r(5), Revision{}, 0, 0, true))
	if err := y.Restore([]byte("bar"), r(6), Revision{}, 0, 0, true); !errors.Is(err, ErrRevisionNotFound) {
		t.Fatalf("second tombstone: %v", err)
	}
	must(y.Restore([]byte("bar"), r(9), r(9), 1, 0, false))
	checkGets(t, y, "bar", []getWant{{5, Revision{}, Revision{}, 0}, {8, Revision{}, Revision{}, 0}, {9, r(9), r(9), 1}}, 0)
	if got := y.Compact(6); len(got) != 0 || y.Len() != 1 {
		t.Fatalf("Compact(6) after restore: %v, %d keys", got, y.Len())
	}
}

// TestIndexCompactManyKeys covers compaction across several batches, with
// keys dropped inside batches and at batch boundaries, on an index whose
// entries are shared with a clone (so every change copies).
func TestIndexCompactManyKeys(t *testing.T) {
	const n = compactBatch*4 + 7
	x := NewIndex()
	key := func(i int) []byte { return []byte(fmt.Sprintf("k%05d", i)) }
	rev := int64(0)
	for i := range n {
		rev++
		if err := x.Put(key(i), r(rev)); err != nil {
			t.Fatal(err)
		}
	}
	want := make(map[Revision]struct{})
	for i := range n {
		rev++
		if i%3 == 0 {
			if err := x.Tombstone(key(i), r(rev)); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := x.Put(key(i), r(rev)); err != nil {
			t.Fatal(err)
		}
		want[r(rev)] = struct{}{}
	}
	snap := x.Clone()
	got := x.Compact(rev + 1)
	if !maps.Equal(got, want) {
		t.Fatalf("Compact kept %d revisions, want %d", len(got), len(want))
	}
	if wantLen := n - (n+2)/3; x.Len() != wantLen {
		t.Fatalf("after Compact: %d keys, want %d", x.Len(), wantLen)
	}
	for i := range n {
		_, _, ver, err := x.Get(key(i), rev)
		if i%3 == 0 && err == nil || i%3 != 0 && (err != nil || ver != 2) {
			t.Fatalf("key %d after Compact: ver %d err %v", i, ver, err)
		}
	}
	// The snapshot still has every key and its whole history.
	if snap.Len() != n {
		t.Fatalf("snapshot lost keys: %d", snap.Len())
	}
	if _, _, ver, err := snap.Get(key(0), int64(n)); err != nil || ver != 1 {
		t.Fatalf("snapshot history: ver %d err %v", ver, err)
	}
}

// TestKeyIndexCompactSameRevision covers a key deleted and put again within
// one main revision (which etcd's txn validation rules out, but the index
// must not lose the put): compaction at that revision keeps the put.
func TestKeyIndexCompactSameRevision(t *testing.T) {
	x := NewIndex()
	k := []byte("qux")
	for _, step := range []struct {
		rev Revision
		del bool
	}{{r(10), false}, {rs(20, 0), false}, {rs(20, 1), true}, {rs(20, 2), false}} {
		var err error
		if step.del {
			err = x.Tombstone(k, step.rev)
		} else {
			err = x.Put(k, step.rev)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if got, want := x.Compact(20), revSet(rs(20, 2)); !maps.Equal(got, want) {
		t.Fatalf("Compact(20) = %v, want %v", got, want)
	}
	mod, cre, ver, err := x.Get(k, 20)
	if err != nil || mod != rs(20, 2) || cre != rs(20, 2) || ver != 1 {
		t.Fatalf("Get at 20 after Compact(20) = %v %v %d %v", mod, cre, ver, err)
	}
	if got := x.RangeSince(k, nil, 20); !slices.Equal(got, []Revision{rs(20, 2)}) {
		t.Fatalf("RangeSince(20) = %v", got)
	}
}

// TestCompareKeyMatchesBytes: comparing through the 8-byte prefix orders
// any two keys as bytes.Compare does, short keys, zero bytes and shared
// prefixes included.
func TestCompareKeyMatchesBytes(t *testing.T) {
	r := testRand(t)
	key := func() []byte {
		k := make([]byte, r.IntN(13))
		for i := range k {
			k[i] = []byte{0, 1, 'a', 0x7f, 0x80, 0xff}[r.IntN(6)]
		}
		return k
	}
	for i := 0; i < 200000; i++ {
		a, b := key(), key()
		ki := newKeyIndex(a, 1)
		if got, want := compareKey(ki, keyPrefix(b), b), bytes.Compare(a, b); got != want {
			t.Fatalf("compareKey(%x, %x) = %d, bytes.Compare %d", a, b, got, want)
		}
		if got, want := compareKeyIndex(ki, newKeyIndex(b, 1)), bytes.Compare(a, b); got != want {
			t.Fatalf("compareKeyIndex(%x, %x) = %d, bytes.Compare %d", a, b, got, want)
		}
	}
}
