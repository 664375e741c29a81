package btreeidx

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	"github.com/strata-db/strata/vfs"
)

// histEvent is one change in the naive model: a put or a delete of a key.
type histEvent struct {
	key string
	rev Revision
	del bool
	// lease is the put's lease (what the store's record carries).
	lease int64
}

// history is the naive reference for the index: the full list of changes in
// revision order, never compacted. Every answer is computed by scanning it.
type history struct {
	events []histEvent
	byKey  map[string][]int // positions in events, per key, in order
}

func newHistory() *history { return &history{byKey: make(map[string][]int)} }

func (h *history) add(e histEvent) {
	h.byKey[e.key] = append(h.byKey[e.key], len(h.events))
	h.events = append(h.events, e)
}

// last returns the position in byKey[key] of the key's newest change with
// Main <= atRev, or -1.
func (h *history) last(key string, atRev int64) int {
	evs := h.byKey[key]
	i := sort.Search(len(evs), func(i int) bool { return h.events[evs[i]].rev.Main > atRev })
	return i - 1
}

// get: the newest change at or before atRev decides. A delete means not
// found; a put's generation starts after the previous delete, and its
// version counts the puts from there.
func (h *history) get(key string, atRev int64) (mod, created Revision, ver int64, ok bool) {
	i := h.last(key, atRev)
	if i < 0 {
		return
	}
	return h.at(key, i)
}

// at returns the state the key's i-th change left: not found for a delete,
// else the put's revision, its generation's first put and its version.
func (h *history) at(key string, i int) (mod, created Revision, ver int64, ok bool) {
	evs := h.byKey[key]
	e := h.events[evs[i]]
	if e.del {
		return
	}
	j := i
	for j > 0 && !h.events[evs[j-1]].del {
		j--
	}
	return e.rev, h.events[evs[j]].rev, int64(i - j + 1), true
}

// pos returns the position of the change at rev among the key's changes.
func (h *history) pos(key string, rev Revision) int {
	evs := h.byKey[key]
	i, _ := slices.BinarySearchFunc(evs, rev, func(p int, r Revision) int { return h.events[p].rev.Compare(r) })
	return i
}

func (h *history) live(key string) bool {
	evs := h.byKey[key]
	return len(evs) > 0 && !h.events[evs[len(evs)-1]].del
}

// kept is the model of Compact(rev)'s result for one key: the newest change
// <= rev if it is a put, or a delete at exactly rev (Keep leaves that out).
func (h *history) kept(key string, rev int64, withTombstone bool, into map[Revision]struct{}) {
	i := h.last(key, rev)
	if i < 0 {
		return
	}
	e := h.events[h.byKey[key][i]]
	if !e.del || withTombstone && e.rev.Main == rev {
		into[e.rev] = struct{}{}
	}
}

func (h *history) keys() []string {
	return slices.Sorted(maps.Keys(h.byKey))
}

func (h *history) clone() *history {
	c := &history{events: slices.Clone(h.events), byKey: make(map[string][]int, len(h.byKey))}
	for k, v := range h.byKey {
		c.byKey[k] = slices.Clone(v)
	}
	return c
}

const modelKeys = 40

func modelKey(i int) string { return fmt.Sprintf("k%02d", i) }

// modelRun is one index under test with its reference: the full history,
// and the page store a compacting server would hold (the records not yet
// deleted by a compaction).
type modelRun struct {
	t     *testing.T
	rng   *rand.Rand
	x     *Index
	h     *history
	store map[Revision]histEvent
	// compacted is the last compaction revision, cur the last revision
	// written; reads are compared at revisions in [compacted, cur].
	compacted, cur int64
	delPct         int // tenths of changes that are deletes
	snaps          []snapshot

	compactions, dropped, forks int
	// leases is each existing key's lease (the model of Index.Lease).
	leases map[string]int64
	// bases counts the bases written (checkpoint), swapped in live and
	// opened as a new index.
	bases, swapped, reopened int
	// checkpointing: a checkpoint is between its Clone and its swap
	// (one at a time, as the store runs them).
	checkpointing bool
	// lastBase is the last base written, which checkReplay opens with
	// the records written after it, as a store reopening does.
	lastBase *Base
	replayed int
}

// snapshot is an Index.Clone kept read-only, with the revisions at which it
// must still answer exactly as the index did when it was taken.
type snapshot struct {
	x         *Index
	rev       int64 // last revision written before the Clone
	compacted int64
}

// TestIndexModel drives the index with random transactions (1-3 changes on
// distinct keys per main revision, as etcd's txn validation guarantees, and
// in 4% of them a second change of one of those keys), deletes of missing
// keys, compactions, read-only snapshots and forks, and compares every
// answer with the naive history. Reads are compared at revisions >= the
// last compaction, where the index must still be exact. At intervals and at
// the end it rebuilds an index through Restore from the records a
// compacted store would hold, and checks it answers like the live one.
//
// A fork is a Clone that gets its own random future (with its own copy of
// the history), run in lockstep with the original's: both write keyIndexes
// and nodes they share, so a write leaking through either way shows up as a
// mismatch with one of the two histories.
func TestIndexModel(t *testing.T) {
	m := &modelRun{
		t: t, rng: testRand(t), x: NewIndex(), h: newHistory(),
		store: make(map[Revision]histEvent), cur: 1, delPct: 3, leases: map[string]int64{},
	}
	const revisions = 30_000
	for m.cur < revisions {
		m.step(true)
	}
	m.checkRestore()
	m.checkReplay()
	if m.bases == 0 || m.swapped == 0 || m.reopened == 0 || m.replayed == 0 {
		t.Fatalf("%d bases written, %d swapped in, %d reopened, %d replayed: the run exercised too little", m.bases, m.swapped, m.reopened, m.replayed)
	}
	t.Logf("%d revisions, %d changes, %d compactions, %d keys dropped by compaction, %d forks, %d bases (%d swapped in live, %d reopened), %d keys left after compaction at %d",
		m.cur, len(m.h.events), m.compactions, m.dropped, m.forks, m.bases, m.swapped, m.reopened, m.x.Len(), m.compacted)
}

// step writes one transaction and then, at random, compacts, takes a
// snapshot, checks a restore or (if mayFork) runs a fork; every 50
// revisions it compares reads with the model.
func (m *modelRun) step(mayFork bool) {
	t, rng := m.t, m.rng
	t.Helper()
	rev := m.cur + 1
	if rev%5000 == 0 {
		// Alternate put-heavy and delete-heavy phases, so keys are also
		// wholly deleted and then dropped by compaction.
		m.delPct = 3 + 4*rng.IntN(2)
	}
	var sub int64
	changed := false
	txnKeys := rng.Perm(modelKeys)[:1+rng.IntN(3)]
	if rng.IntN(25) == 0 {
		// etcd's txn validation never changes a key twice in one
		// revision, but the index must stay correct if a caller does
		// (for instance delete then put again).
		txnKeys = append(txnKeys, txnKeys[0])
	}
	for _, ki := range txnKeys {
		k := modelKey(ki)
		e := histEvent{key: k, rev: Revision{rev, sub}, del: rng.IntN(10) < m.delPct}
		if e.del {
			err := m.x.Tombstone([]byte(k), e.rev)
			if !m.h.live(k) {
				if !errors.Is(err, ErrRevisionNotFound) {
					t.Fatalf("Tombstone(%s) of a missing key: %v", k, err)
				}
				continue // nothing deleted, no sub-revision used
			}
			if err != nil {
				t.Fatalf("Tombstone(%s, %v): %v", k, e.rev, err)
			}
			delete(m.leases, k)
		} else if rng.IntN(2) == 0 {
			if err := m.x.Put([]byte(k), e.rev); err != nil {
				t.Fatalf("Put(%s, %v): %v", k, e.rev, err)
			}
			delete(m.leases, k)
		} else {
			// PutPrior reports what Get said just before, and the
			// key's lease until now.
			_, wc, wv, gerr := m.x.Get([]byte(k), e.rev.Main)
			lease := int64(rng.IntN(3))
			c, v, prevLease, ok, err := m.x.PutPrior([]byte(k), e.rev, lease)
			if err != nil {
				t.Fatalf("PutPrior(%s, %v): %v", k, e.rev, err)
			}
			if ok != (gerr == nil) || c != wc || v != wv || prevLease != m.leases[k] {
				t.Fatalf("PutPrior(%s, %v) = %v, %d, lease %d, %v; Get before it gave %v, %d, %v, model lease %d", k, e.rev, c, v, prevLease, ok, wc, wv, gerr, m.leases[k])
			}
			e.lease = lease
			if lease != 0 {
				m.leases[k] = lease
			} else {
				delete(m.leases, k)
			}
		}
		m.h.add(e)
		m.store[e.rev] = e
		sub++
		changed = true
	}
	if changed {
		m.cur = rev // revisions move only when something changed
	}

	switch rng.IntN(200) {
	case 0, 1:
		m.compact(m.compacted + rng.Int64N(m.cur-m.compacted+1))
	case 2:
		m.snaps = append(m.snaps, snapshot{m.x.Clone(), m.cur, m.compacted})
		if len(m.snaps) > 4 {
			m.snaps = m.snaps[1:]
		}
	case 3:
		m.checkRestore()
		m.checkReplay()
	case 4:
		if mayFork {
			m.fork()
		}
	case 5, 6:
		if !m.checkpointing {
			m.checkpoint(mayFork)
		}
	}
	if m.cur%50 == 0 && changed {
		m.checkReads(m.x, m.cur, max(m.compacted, 1))
		m.checkSince()
		for _, s := range m.snaps {
			// A snapshot answers as the index did when it was taken,
			// whatever the live index did since.
			m.checkReads(s.x, s.rev, max(s.compacted, 1))
		}
	}
}

// fork runs a clone of the index on its own copy of the model, in lockstep
// with the original, so each writes entries the other shares and reads them
// back after the other wrote.
func (m *modelRun) fork() {
	m.forks++
	f := &modelRun{
		t: m.t, rng: m.rng, x: m.x.Clone(), h: m.h.clone(), store: maps.Clone(m.store),
		compacted: m.compacted, cur: m.cur, delPct: m.delPct, leases: maps.Clone(m.leases),
	}
	for range 150 {
		f.step(false)
		m.step(false)
	}
	f.checkReads(f.x, f.cur, max(f.compacted, 1))
	f.checkRestore()
}

// compact compacts at c and checks the kept set, Keep, and that the index
// holds nothing else at or below c; then drops the store's other records.
func (m *modelRun) compact(c int64) {
	t := m.t
	t.Helper()
	want := make(map[Revision]struct{})
	wantKeep := make(map[Revision]struct{})
	for _, k := range m.h.keys() {
		m.h.kept(k, c, true, want)
		m.h.kept(k, c, false, wantKeep)
	}
	if m.lastBase != nil && c > m.lastBase.Rev() {
		// The store never deletes records above its base file's
		// revision (it removes the file first, and writes a new base
		// once the compaction is done); the model writes the new base
		// first, so that checkReplay has one to open.
		m.writeBase(m.x.Clone(), m.cur)
	}
	before := m.x.Len()
	// CompactGarbage on a clone drops the same revisions and names each
	// record at or below c that Compact does not keep, tombstones marked.
	y := m.x.Clone()
	garbage := y.CompactGarbage(c)
	if got := m.x.Compact(c); !maps.Equal(got, want) {
		t.Fatalf("Compact(%d) = %v; model %v", c, got, want)
	}
	gotGarbage := map[Revision]bool{}
	for _, g := range garbage {
		if _, dup := gotGarbage[g.Rev]; dup {
			t.Fatalf("CompactGarbage(%d) names %v twice", c, g.Rev)
		}
		gotGarbage[g.Rev] = g.Tombstone
	}
	wantGarbage := map[Revision]bool{}
	for r, e := range m.store {
		if _, ok := want[r]; !ok && r.Main <= c {
			wantGarbage[r] = e.del
		}
	}
	if !maps.Equal(gotGarbage, wantGarbage) {
		t.Fatalf("CompactGarbage(%d) = %v; model %v", c, gotGarbage, wantGarbage)
	}
	checkIndexTight(t, y, c, want)
	if got := m.x.Keep(c); !maps.Equal(got, wantKeep) {
		t.Fatalf("Keep(%d) = %v; model %v", c, got, wantKeep)
	}
	checkIndexTight(t, m.x, c, want)
	m.compactions++
	m.dropped += before - m.x.Len()
	for r := range m.store {
		if _, ok := want[r]; !ok && r.Main <= c {
			delete(m.store, r)
		}
	}
	m.compacted = c
}

// checkpoint writes a base of the index from a Clone and then either
// swaps it in while the index keeps changing (writes and compactions
// between the Clone and the swap, when mayFork: the base is what the
// Clone saw, the index's tree keeps what changed since), or opens a new
// index on it alone, as a store reopening does; then compares reads.
func (m *modelRun) checkpoint(mayFork bool) {
	t := m.t
	t.Helper()
	snap, rev := m.x.Clone(), m.cur
	live := m.rng.IntN(2) == 0
	m.checkpointing = true
	defer func() { m.checkpointing = false }()
	if live && mayFork {
		for range m.rng.IntN(30) {
			m.step(false)
		}
	}
	b := m.writeBase(snap, rev)
	if live {
		m.x.ReplaceBase(b, snap)
		m.swapped++
	} else if m.cur == rev {
		m.x = NewIndexWithBase(b)
		m.reopened++
	}
	m.checkReads(m.x, m.cur, max(m.compacted, 1))
	m.checkSince()
}

// writeBase writes a base of snap at rev, opens it and makes it
// lastBase.
func (m *modelRun) writeBase(snap *Index, rev int64) *Base {
	t := m.t
	t.Helper()
	path := filepath.Join(t.TempDir(), "base")
	var token [16]byte
	token[0] = byte(m.bases)
	if err := WriteBase(vfs.Default, path, snap, rev, token); err != nil {
		t.Fatal(err)
	}
	b, err := OpenBase(vfs.Default, path)
	if err != nil {
		t.Fatal(err)
	}
	if b.Rev() != rev || b.Token() != token || b.Keys() != int64(snap.Len()) {
		t.Fatalf("base: revision %d token %x keys %d; written at %d with %x from %d keys", b.Rev(), b.Token(), b.Keys(), rev, token, snap.Len())
	}
	m.bases++
	if rev >= m.compacted {
		// A base older than a compaction is never kept: the store
		// writes its bases and compacts in one goroutine.
		m.lastBase = b
	}
	return b
}

// checkReplay opens the last base written as a store reopening does: a
// new index on the base, the records the modeled store holds above the
// base's revision restored in revision order, then the last compaction
// redone if the base predates it. No compaction has deleted a record
// above the base's revision (see compact), so those records are every
// change since the base. The
// result must answer as the live index does, and compact as it does.
func (m *modelRun) checkReplay() {
	t, rng, h := m.t, m.rng, m.h
	t.Helper()
	b := m.lastBase
	if b == nil {
		return
	}
	m.replayed++
	recs := slices.SortedFunc(maps.Values(m.store), func(a, b histEvent) int { return a.rev.Compare(b.rev) })
	y := NewIndexWithBase(b)
	for _, e := range recs {
		if e.rev.Main <= b.Rev() {
			continue
		}
		var created Revision
		var ver int64
		if !e.del {
			_, created, ver, _ = h.at(e.key, h.pos(e.key, e.rev))
		}
		if err := y.Restore([]byte(e.key), e.rev, created, ver, e.lease, e.del); err != nil {
			t.Fatalf("Restore(%s, %v) over a base at %d: %v", e.key, e.rev, b.Rev(), err)
		}
	}
	if m.compacted > b.CompactRev() {
		y.CompactGarbage(m.compacted)
	}
	if y.Len() != m.x.Len() || y.Live() != m.x.Live() {
		t.Fatalf("replayed index (base at %d, compacted at %d, now %d) has %d keys (%d live), the written one %d (%d live)", b.Rev(), b.CompactRev(), m.compacted, y.Len(), y.Live(), m.x.Len(), m.x.Live())
	}
	got := map[string]int64{}
	y.LeasedKeys(func(k []byte, l int64) bool { got[string(k)] = l; return true })
	if !maps.Equal(got, m.leases) {
		t.Fatalf("replayed index: LeasedKeys = %v; model %v", got, m.leases)
	}
	m.checkReads(y, m.cur, max(m.compacted, 1))
	for _, rev := range []int64{m.compacted, m.compacted + rng.Int64N(m.cur-m.compacted+1)} {
		if a, b := m.x.Keep(rev), y.Keep(rev); !maps.Equal(a, b) {
			t.Fatalf("Keep(%d): replayed %v, live %v", rev, b, a)
		}
	}
	// The next compaction drops from both what the store holds: the
	// replayed index may also name revisions the store no longer has
	// (from the base, which a compaction since deleted), never fewer.
	c := m.compacted + rng.Int64N(m.cur-m.compacted+1)
	want := map[Revision]bool{}
	for _, g := range m.x.Clone().CompactGarbage(c) {
		want[g.Rev] = g.Tombstone
	}
	gotG := map[Revision]bool{}
	for _, g := range y.CompactGarbage(c) {
		if _, inStore := m.store[g.Rev]; inStore {
			gotG[g.Rev] = g.Tombstone
		}
	}
	if !maps.Equal(gotG, want) {
		t.Fatalf("replayed index: CompactGarbage(%d) = %v; live %v", c, gotG, want)
	}
}

// checkReads compares Get, Range, Revisions and CountRevisions of x with
// the model at random revisions in [minRev, maxRev].
func (m *modelRun) checkReads(x *Index, maxRev, minRev int64) {
	t, rng, h := m.t, m.rng, m.h
	t.Helper()
	// Live counts the keys that exist at the index's last revision.
	live := 0
	for _, k := range h.keys() {
		if _, _, _, ok := h.get(k, maxRev); ok {
			live++
		}
	}
	if got := x.Live(); got != live {
		t.Fatalf("Live() = %d at revision %d; model %d", got, maxRev, live)
	}
	if x == m.x {
		// Leases: the index's current ones.
		got := map[string]int64{}
		x.LeasedKeys(func(k []byte, l int64) bool {
			if _, dup := got[string(k)]; dup {
				t.Fatalf("LeasedKeys names %s twice", k)
			}
			got[string(k)] = l
			return true
		})
		if !maps.Equal(got, m.leases) {
			t.Fatalf("LeasedKeys = %v; model %v", got, m.leases)
		}
		k := modelKey(rng.IntN(modelKeys))
		if l := x.Lease([]byte(k)); l != m.leases[k] {
			t.Fatalf("Lease(%s) = %d; model %d", k, l, m.leases[k])
		}
	}
	for range 8 {
		at := minRev + rng.Int64N(maxRev-minRev+1)
		k := modelKey(rng.IntN(modelKeys))
		mod, cre, ver, err := x.Get([]byte(k), at)
		wm, wc, wv, ok := h.get(k, at)
		if ok != (err == nil) || ok && (mod != wm || cre != wc || ver != wv) {
			t.Fatalf("Get(%s, %d) = %v %v %d %v; model %v %v %d %v", k, at, mod, cre, ver, err, wm, wc, wv, ok)
		}
	}
	at := minRev + rng.Int64N(maxRev-minRev+1)
	lo, hi := rng.IntN(modelKeys+1), rng.IntN(modelKeys+1)
	var end []byte
	if rng.IntN(4) == 0 {
		end = []byte("\x00")
		hi = modelKeys
	} else {
		end = []byte(modelKey(hi))
	}
	var wantKeys []string
	var wantRevs []Revision
	for i := lo; i < hi; i++ {
		if m, _, _, ok := h.get(modelKey(i), at); ok {
			wantKeys = append(wantKeys, modelKey(i))
			wantRevs = append(wantRevs, m)
		}
	}
	keys, revs := x.Range([]byte(modelKey(lo)), end, at)
	var gotKeys []string
	for _, k := range keys {
		gotKeys = append(gotKeys, string(k))
	}
	if !slices.Equal(gotKeys, wantKeys) || !slices.Equal(revs, wantRevs) {
		t.Fatalf("Range(%s, %q, %d) = %v %v; model %v %v", modelKey(lo), end, at, gotKeys, revs, wantKeys, wantRevs)
	}
	limit := rng.IntN(4)
	revs, total := x.Revisions([]byte(modelKey(lo)), end, at, limit, true)
	wantLim := wantRevs
	if limit > 0 && len(wantLim) > limit {
		wantLim = wantLim[:limit]
	}
	if total != len(wantRevs) || !slices.Equal(revs, wantLim) {
		t.Fatalf("Revisions(limit %d) = %v total %d; model %v total %d", limit, revs, total, wantLim, len(wantRevs))
	}
	// Keys: the same walk with each key's create revision and version,
	// with and without the total (without it the walk stops at the
	// limit and total is what it returned).
	withTotal := rng.IntN(2) == 0
	ks, total := x.Keys([]byte(modelKey(lo)), end, at, limit, withTotal, nil)
	wantTotal := len(wantRevs)
	if !withTotal {
		wantTotal = len(wantLim)
	}
	if total != wantTotal || len(ks) != len(wantLim) {
		t.Fatalf("Keys(limit %d, withTotal %v) = %d keys total %d; model %d keys total %d", limit, withTotal, len(ks), total, len(wantLim), wantTotal)
	}
	for i, k := range ks {
		wm, wc, wv, _ := h.get(string(k.Key), at)
		if string(k.Key) != wantKeys[i] || k.Modified != wm || k.Created != wc || k.Version != wv {
			t.Fatalf("Keys(limit %d)[%d] = %s %v %v %d; model %s %v %v %d", limit, i, k.Key, k.Modified, k.Created, k.Version, wantKeys[i], wm, wc, wv)
		}
	}
	if n := x.CountRevisions([]byte(modelKey(lo)), end, at, 0); n != len(wantRevs) {
		t.Fatalf("CountRevisions = %d; model %d", n, len(wantRevs))
	}
}

// checkSince compares RangeSince with the model above the compaction, where
// every revision is intact.
func (m *modelRun) checkSince() {
	t, rng, h := m.t, m.rng, m.h
	t.Helper()
	since := m.compacted + 1 + rng.Int64N(m.cur-m.compacted+1)
	lo, hi := rng.IntN(modelKeys+1), rng.IntN(modelKeys+1)
	// Per key, the changes since, with only the last change of a key in
	// each main revision; then all keys in revision order.
	var want []Revision
	for _, k := range h.keys() {
		if k < modelKey(lo) || k >= modelKey(hi) {
			continue
		}
		first := len(want)
		for _, p := range h.byKey[k] {
			e := h.events[p]
			if e.rev.Main < since {
				continue
			}
			if len(want) > first && want[len(want)-1].Main == e.rev.Main {
				want[len(want)-1] = e.rev
				continue
			}
			want = append(want, e.rev)
		}
	}
	slices.SortFunc(want, Revision.Compare)
	got := m.x.RangeSince([]byte(modelKey(lo)), []byte(modelKey(hi)), since)
	if !slices.Equal(got, want) {
		t.Fatalf("RangeSince(%s, %s, %d) = %v; model %v", modelKey(lo), modelKey(hi), since, got, want)
	}
}

// checkRestore rebuilds an index from the modeled store, in revision order
// as the store does on open, and compares it with the live one.
func (m *modelRun) checkRestore() {
	t, rng, h := m.t, m.rng, m.h
	t.Helper()
	recs := slices.SortedFunc(maps.Values(m.store), func(a, b histEvent) int { return a.rev.Compare(b.rev) })
	y := NewIndex()
	for _, e := range recs {
		var created Revision
		var ver int64
		if !e.del {
			// The record's own create revision and version (not those
			// of the last change in its main revision).
			_, created, ver, _ = h.at(e.key, h.pos(e.key, e.rev))
		}
		if err := y.Restore([]byte(e.key), e.rev, created, ver, 0, e.del); err != nil {
			t.Fatalf("Restore(%s, %v): %v", e.key, e.rev, err)
		}
	}
	if y.Len() != m.x.Len() || y.Live() != m.x.Live() {
		t.Fatalf("restored index has %d keys (%d live), the written one %d (%d live)", y.Len(), y.Live(), m.x.Len(), m.x.Live())
	}
	for range 20 {
		at := m.compacted + rng.Int64N(m.cur-m.compacted+1)
		k := modelKey(rng.IntN(modelKeys))
		m1, c1, v1, e1 := m.x.Get([]byte(k), at)
		m2, c2, v2, e2 := y.Get([]byte(k), at)
		if m1 != m2 || c1 != c2 || v1 != v2 || (e1 == nil) != (e2 == nil) {
			t.Fatalf("restored Get(%s, %d) = %v %v %d %v; live %v %v %d %v", k, at, m2, c2, v2, e2, m1, c1, v1, e1)
		}
	}
	for _, rev := range []int64{m.compacted, m.compacted + rng.Int64N(m.cur-m.compacted+1)} {
		if a, b := m.x.Keep(rev), y.Keep(rev); !maps.Equal(a, b) {
			t.Fatalf("Keep(%d): restored %v, live %v", rev, b, a)
		}
	}
}

// checkIndexTight checks the keyIndex invariants of every entry, and that
// after Compact(c) returned available the index holds no revision <= c
// other than those: compaction dropped everything it could.
func checkIndexTight(t *testing.T, x *Index, c int64, available map[Revision]struct{}) {
	t.Helper()
	x.mu.RLock()
	defer x.mu.RUnlock()
	x.visitAll(func(ki *keyIndex) bool {
		if ki.isEmpty() {
			t.Fatalf("empty key %q left in the index", ki.key)
		}
		var prev Revision
		for gi, g := range ki.generations {
			if len(g.revs) == 0 && gi != len(ki.generations)-1 {
				t.Fatalf("key %q: empty generation %d is not the last", ki.key, gi)
			}
			for _, r := range g.revs {
				if !r.GreaterThan(prev) {
					t.Fatalf("key %q: revisions not increasing: %v after %v", ki.key, r, prev)
				}
				prev = r
				if _, ok := available[r]; r.Main <= c && !ok {
					t.Fatalf("key %q: revision %v <= compaction %d survived but is not available", ki.key, r, c)
				}
			}
		}
		if prev != ki.modified {
			t.Fatalf("key %q: modified %v, last revision %v", ki.key, ki.modified, prev)
		}
		return true
	})
}
