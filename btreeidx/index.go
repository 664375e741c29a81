package btreeidx

import (
	"bytes"
	"encoding/binary"
	"slices"
	"sync"
)

// compactBatch is how many keys Compact processes per hold of the write
// lock. Between batches writers get the lock, so a compaction of millions of
// keys never stalls apply for longer than one batch. Measured on 200k keys
// (2 shared cores under load): about 1.1 us a key when the entries are owned,
// 4.5 us when every entry is shared with a clone and has to be copied, so a
// batch of 256 holds the lock for roughly 0.3 to 1.2 ms.
const compactBatch = 256

// Index maps each user key to the revisions of its generations and answers
// which revision of a key is visible at a given store revision, with etcd's
// semantics (see the package doc).
//
// Concurrency and ownership:
//   - An Index is safe for concurrent use. Writes (Put, Tombstone, Restore,
//     Compact's batches, Clone) hold mu exclusively; reads hold it shared.
//   - Writes must come from one goroutine in increasing revision order, as
//     the apply loop produces them. A write whose revision is not above the
//     key's last one fails with ErrStaleRevision.
//   - A read holds the shared lock for its whole duration, so a large Range
//     delays the writer. For long reads take Clone (O(1) under the write
//     lock) and read the clone, which no writer of the original touches.
//   - Keys passed to writes are copied; keys returned by Range belong to the
//     index and must not be modified.
type Index struct {
	// mu guards tree and owner, and every keyIndex that owner owns.
	mu   sync.RWMutex
	tree *BTree[*keyIndex]
	// owner is stamped on the keyIndexes this Index may change in place.
	// Clone gives both indexes new tokens, so an entry that existed at the
	// time of the Clone is copied by whichever index writes it first.
	owner uint64
	// live is how many keys exist now (their last generation has
	// revisions): etcd's etcd_debugging_mvcc_keys_total. Every write
	// that changes a key's liveness (Put, Tombstone, Restore) adjusts it
	// under mu; Compact never does (it keeps the generation live at the
	// compacted revision and only drops keys that are already deleted).
	live int
	// base, if set, holds every key the tree does not (base.go): the
	// tree is then what changed since the base was written. A tree
	// entry hides the base's entry for its key; a gone entry hides it
	// and says the key has no history left.
	base *Base
	// compacted is the revision of the last compaction (-1: none).
	// Entries read from the base are compacted at it.
	compacted int64
}

// NewIndex returns an empty index.
func NewIndex() *Index {
	return &Index{tree: New(compareKeyIndex), owner: newOwner(), compacted: -1}
}

// NewIndexWithBase returns an index holding what b holds, with nothing
// in memory: it reads keys from b until writes change them.
func NewIndexWithBase(b *Base) *Index {
	return &Index{tree: New(compareKeyIndex), owner: newOwner(), base: b, live: int(b.live), compacted: b.compactRev}
}

// Clone returns an independent snapshot of the index in O(1). Writes to
// either index afterwards are invisible to the other.
func (x *Index) Clone() *Index {
	x.mu.Lock()
	defer x.mu.Unlock()
	c := &Index{tree: x.tree.Clone(), owner: newOwner(), live: x.live, base: x.base, compacted: x.compacted}
	x.owner = newOwner()
	return c
}

// Base returns the index's base, or nil.
func (x *Index) Base() *Base {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.base
}

// CompactedRev is the revision of the index's last compaction (-1:
// none): a base written from it is compacted there.
func (x *Index) CompactedRev() int64 {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.compacted
}

// Len returns the number of keys in the index, including deleted keys whose
// history a compaction has not yet dropped. With a base it walks every
// key.
func (x *Index) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.base == nil {
		return x.tree.Len()
	}
	n := 0
	x.visitAll(func(*keyIndex) bool { n++; return true })
	return n
}

// Live returns the number of keys that exist now, not counting deleted
// keys whose history is still indexed. It is maintained by the writes, so
// it costs no walk.
func (x *Index) Live() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.live
}

// lookup returns the entry for key. The probe closure does not escape, so a
// lookup does not allocate.
func (x *Index) lookup(key []byte) (*keyIndex, bool) {
	ki, ok, _ := x.find(key)
	return ki, ok
}

// find returns the entry for key (from the tree, or a new one read from
// the base, which no Index owns), and whether the base holds the key
// (so that a new tree entry for it hides the base's). The caller holds
// mu.
func (x *Index) find(key []byte) (ki *keyIndex, found, inBase bool) {
	p := keyPrefix(key)
	if ki, ok := x.tree.GetFunc(func(ki *keyIndex) int { return compareKey(ki, p, key) }); ok {
		if ki.gone {
			return nil, false, true
		}
		return ki, true, ki.inBase
	}
	if x.base == nil {
		return nil, false, false
	}
	ki, ok := x.base.get(key)
	if !ok {
		return nil, false, false
	}
	x.fromBase(ki)
	if ki.isEmpty() {
		return nil, false, true
	}
	return ki, true, true
}

// fromBase prepares an entry just read from the base: compacted at the
// index's last compaction (which the base may predate), marked as hiding
// the base's.
func (x *Index) fromBase(ki *keyIndex) {
	ki.inBase = true
	if x.compacted > x.base.compactRev {
		if genIdx, revIdx := ki.compactPlan(x.compacted, nil); needsCompact(genIdx, revIdx) {
			ki.applyCompact(genIdx, revIdx)
		}
	}
}

// mutable returns ki if x owns it, else a copy that x owns and has put in
// its tree in place of ki.
func (x *Index) mutable(ki *keyIndex) *keyIndex {
	if ki.owner == x.owner {
		return ki
	}
	c := ki.clone(x.owner)
	x.tree.ReplaceOrInsert(c)
	return c
}

// Put records a put of key at rev: it creates the key (version 1, create
// revision rev) if the key does not exist or is deleted, and otherwise adds
// a version to its current generation.
func (x *Index) Put(key []byte, rev Revision) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	ki, ok, inBase := x.find(key)
	_, err := x.putLocked(key, ki, ok, inBase, rev, 0)
	return err
}

// PutPrior is Get(key, rev.Main) followed by a put of key at rev with
// lease (0: none), with one lookup: the store's put needs the key's
// previous create revision and version, and its previous lease (prevLease,
// 0 when it had none or did not exist).
func (x *Index) PutPrior(key []byte, rev Revision, lease int64) (created Revision, ver, prevLease int64, ok bool, err error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	ki, found, inBase := x.find(key)
	if found {
		if _, c, v, gerr := ki.get(rev.Main); gerr == nil {
			created, ver, ok = c, v, true
		}
	}
	prevLease, err = x.putLocked(key, ki, found, inBase, rev, lease)
	if err != nil {
		return Revision{}, 0, 0, false, err
	}
	return created, ver, prevLease, ok, nil
}

// putLocked is the put once key has been looked up (find). The caller
// holds mu for writing.
func (x *Index) putLocked(key []byte, ki *keyIndex, found, inBase bool, rev Revision, lease int64) (prevLease int64, err error) {
	if !found {
		ki = newKeyIndex(key, x.owner)
		ki.inBase = inBase
		if err := ki.put(rev); err != nil {
			return 0, err
		}
		ki.lease = lease
		x.tree.ReplaceOrInsert(ki)
		x.live++
		return 0, nil
	}
	if !rev.GreaterThan(ki.modified) {
		return 0, ErrStaleRevision
	}
	wasLive := ki.live()
	if wasLive {
		prevLease = ki.lease
	}
	m := x.mutable(ki)
	if err := m.put(rev); err != nil {
		return 0, err
	}
	m.lease = lease
	if !wasLive {
		x.live++
	}
	return prevLease, nil
}

// Lease returns the lease of key's last put if key exists, else 0.
func (x *Index) Lease(key []byte) int64 {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if ki, ok := x.lookup(key); ok && ki.live() {
		return ki.lease
	}
	return 0
}

// LeasedKeys calls fn for every existing key with a lease, until fn
// returns false. The key belongs to the index.
func (x *Index) LeasedKeys(fn func(key []byte, lease int64) bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	stop := false
	x.tree.Ascend(func(ki *keyIndex) bool {
		if !ki.gone && ki.live() && ki.lease != 0 {
			stop = !fn(ki.key, ki.lease)
		}
		return !stop
	})
	if stop || x.base == nil {
		return
	}
	it := x.base.leases.iter()
	for ok := it.first(); ok; ok = it.next() {
		key := it.key[8:]
		p := keyPrefix(key)
		if _, inTree := x.tree.GetFunc(func(ki *keyIndex) int { return compareKey(ki, p, key) }); inTree {
			continue // the tree's entry says (above)
		}
		if !fn(bytes.Clone(key), int64(binary.BigEndian.Uint64(it.key))) {
			return
		}
	}
}

// Tombstone records a delete of key at rev. It fails with
// ErrRevisionNotFound if the key does not exist now.
func (x *Index) Tombstone(key []byte, rev Revision) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	ki, ok := x.lookup(key)
	if !ok || !ki.live() {
		return ErrRevisionNotFound
	}
	if !rev.GreaterThan(ki.modified) {
		return ErrStaleRevision
	}
	m := x.mutable(ki)
	if err := m.tombstone(rev); err != nil {
		return err
	}
	m.lease = 0
	x.live--
	return nil
}

// Restore adds one record read back from the page store while rebuilding
// the index on open. Records must come in revision order (the order of the
// revision-keyed bucket). The first record of a key may be any version of it
// (older ones may be compacted away): for a put, created and ver are the
// record's create_revision and version; for a tombstone they are ignored.
// Later records of the key are applied as Put and Tombstone; a tombstone of a
// key that is not live returns ErrRevisionNotFound and changes nothing.
func (x *Index) Restore(key []byte, rev, created Revision, ver, lease int64, tombstone bool) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	ki, ok, inBase := x.find(key)
	if !ok {
		ki = newKeyIndex(key, x.owner)
		ki.inBase = inBase
		if tombstone {
			ki.restoreTombstone(rev)
		} else {
			ki.restore(created, rev, ver)
			ki.lease = lease
			x.live++
		}
		x.tree.ReplaceOrInsert(ki)
		return nil
	}
	if !rev.GreaterThan(ki.modified) {
		return ErrStaleRevision
	}
	wasLive := ki.live()
	if tombstone && !wasLive {
		return ErrRevisionNotFound
	}
	m := x.mutable(ki)
	var err error
	if tombstone {
		err = m.tombstone(rev)
		m.lease = 0
	} else {
		err = m.put(rev)
		m.lease = lease
	}
	if err == nil && wasLive != m.live() {
		if wasLive {
			x.live--
		} else {
			x.live++
		}
	}
	return err
}

// Get returns the version of key visible at atRev: its mod revision, its
// create revision and its version. It fails with ErrRevisionNotFound if the
// key did not exist at atRev.
func (x *Index) Get(key []byte, atRev int64) (modified, created Revision, ver int64, err error) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	ki, ok := x.lookup(key)
	if !ok {
		return Revision{}, Revision{}, 0, ErrRevisionNotFound
	}
	return ki.get(atRev)
}

// isFromKey reports whether end means "every key >= key": etcd's range_end
// "\x00", or the empty non-nil end that etcd's server turns it into.
func isFromKey(end []byte) bool {
	return end != nil && (len(end) == 0 || len(end) == 1 && end[0] == 0)
}

// visit calls fn on the entries with key in [key, end) in order, until fn
// returns false: the tree's, and the base's that the tree does not hide.
// end follows etcd's range_end conventions except nil, which the callers
// handle as a single-key lookup. The caller holds mu.
//
// A base entry is decoded into one scratch entry that the next base
// entry overwrites: fn must not keep it, nor its key or arrays, past
// the call. (A walk over a million keys of the base then allocates
// nothing per key.)
func (x *Index) visit(key, end []byte, fn func(*keyIndex) bool) {
	var scratch *keyIndex // the base entry in hand; allocated only with a base
	if x.base != nil {
		scratch = new(keyIndex)
	}
	x.walk(key, end, func(k, v []byte) bool {
		x.base.decodeScratch(scratch, k, v)
		x.fromBase(scratch)
		return scratch.isEmpty() || fn(scratch)
	}, func(ki *keyIndex) bool {
		return ki.gone || fn(ki)
	})
}

// visitAt is visit for a read at atRev: fn gets each key that exists at
// atRev, with what keyIndex.get returns for it. ki is the key's entry
// when the walk has one; a base entry whose answer is read off its
// encoding (peekAt, the common case of a read at or after the key's last
// change) comes with ki nil and k valid only during the call.
func (x *Index) visitAt(key, end []byte, atRev int64, fn func(k []byte, ki *keyIndex, mod, created Revision, ver int64) bool) {
	var scratch *keyIndex
	if x.base != nil {
		scratch = new(keyIndex)
	}
	at := func(ki *keyIndex) bool {
		mod, created, ver, err := ki.get(atRev)
		return err != nil || fn(ki.key, ki, mod, created, ver)
	}
	x.walk(key, end, func(k, v []byte) bool {
		if mod, created, ver, found, ok := peekAt(v, atRev); ok {
			return !found || fn(k, nil, mod, created, ver)
		}
		x.base.decodeScratch(scratch, k, v)
		x.fromBase(scratch)
		return scratch.isEmpty() || at(scratch)
	}, func(ki *keyIndex) bool {
		return ki.gone || at(ki)
	})
}

// walk merges the tree's entries in [key, end) with the base's, in key
// order, a tree entry hiding the base's of the same key: onBase gets a
// base entry still encoded (k and v valid only during the call), onTree
// a tree entry. Either returning false ends the walk.
func (x *Index) walk(key, end []byte, onBase func(k, v []byte) bool, onTree func(*keyIndex) bool) {
	bounded := !isFromKey(end)
	if bounded && bytes.Compare(key, end) >= 0 {
		return
	}
	var it Iter[*keyIndex]
	it.reset(x.tree)
	p := keyPrefix(key)
	// mk is the tree's next entry in range, nil when there is none; it is
	// checked against end once, when the tree's iterator reaches it, not
	// again for each base entry walked before it.
	var mk *keyIndex
	nextTree := func(ok bool) {
		mk = nil
		if ok {
			if ki := it.Item(); !bounded || bytes.Compare(ki.key, end) < 0 {
				mk = ki
			}
		}
	}
	nextTree(it.SeekGEFunc(func(ki *keyIndex) int { return compareKey(ki, p, key) }))
	var bit *tableIter
	baseOK := false
	if x.base != nil {
		bit = x.base.entries.iter()
		baseOK = bit.seekGE(key)
	}
	for {
		if baseOK && bounded && bytes.Compare(bit.key, end) >= 0 {
			baseOK = false
		}
		switch {
		case mk == nil && !baseOK:
			return
		case baseOK && (mk == nil || bytes.Compare(bit.key, mk.key) < 0):
			more := onBase(bit.key, bit.value)
			baseOK = bit.next()
			if !more {
				return
			}
		default:
			if baseOK && bytes.Equal(bit.key, mk.key) {
				baseOK = bit.next() // hidden by the tree's entry
			}
			ki := mk
			nextTree(it.Next())
			if !onTree(ki) {
				return
			}
		}
	}
}

// keyArena keeps the keys of a walk's entries for its result: a tree
// entry's key as is (the entry owns it and never changes it), a base
// entry's (held in visit's scratch entry) copied into chunks shared by
// many keys rather than one allocation each.
type keyArena struct{ buf []byte }

const keyArenaChunk = 64 << 10

// keep returns key k of a walk's entry ki (nil: a base entry read
// without decoding, k valid only during the walk's call) for a result.
func (a *keyArena) keep(k []byte, ki *keyIndex) []byte {
	if ki != nil && !ki.scratch {
		return ki.key
	}
	n := len(k)
	if cap(a.buf)-len(a.buf) < n {
		a.buf = make([]byte, 0, max(keyArenaChunk, n))
	}
	a.buf = append(a.buf, k...)
	return a.buf[len(a.buf)-n : len(a.buf) : len(a.buf)]
}

// visitAll is visit over every key.
func (x *Index) visitAll(fn func(*keyIndex) bool) { x.visit(nil, []byte{0}, fn) }

// Range returns the keys in [key, end) that exist at atRev, in key order,
// with the mod revision each has at atRev. end nil means key alone; end
// "\x00" (or empty and non-nil) means every key >= key.
func (x *Index) Range(key, end []byte, atRev int64) (keys [][]byte, revs []Revision) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if end == nil {
		ki, ok := x.lookup(key)
		if !ok {
			return nil, nil
		}
		rev, _, _, err := ki.get(atRev)
		if err != nil {
			return nil, nil
		}
		return [][]byte{ki.key}, []Revision{rev}
	}
	var arena keyArena
	x.visitAt(key, end, atRev, func(k []byte, ki *keyIndex, mod, _ Revision, _ int64) bool {
		keys = append(keys, arena.keep(k, ki))
		revs = append(revs, mod)
		return true
	})
	return keys, revs
}

// Revisions returns the mod revisions at atRev of the keys in [key, end)
// (end as for Range), at most limit of them if limit > 0. With withTotal,
// total is the number of keys in range regardless of limit (etcd's count);
// without it, the walk stops at the limit and total is len(revs).
func (x *Index) Revisions(key, end []byte, atRev int64, limit int, withTotal bool) (revs []Revision, total int) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if end == nil {
		ki, ok := x.lookup(key)
		if !ok {
			return nil, 0
		}
		rev, _, _, err := ki.get(atRev)
		if err != nil {
			return nil, 0
		}
		return []Revision{rev}, 1
	}
	x.visitAt(key, end, atRev, func(_ []byte, _ *keyIndex, mod, _ Revision, _ int64) bool {
		full := limit > 0 && len(revs) >= limit
		if full && !withTotal {
			return false
		}
		if !full {
			revs = append(revs, mod)
		}
		total++
		return true
	})
	return revs, total
}

// KeyAt is a key as a read at some revision sees it: the revisions of
// the version visible there. Key belongs to the index and must not be
// modified.
type KeyAt struct {
	Key      []byte
	Modified Revision
	Created  Revision
	Version  int64
}

// Keys is Revisions with each key's create revision and version beside
// its mod revision, appended to out: everything etcd's keys-only read
// returns, which the index answers without the stored values.
func (x *Index) Keys(key, end []byte, atRev int64, limit int, withTotal bool, out []KeyAt) (keys []KeyAt, total int) {
	keys = out
	var arena keyArena
	total = x.eachKey(key, end, atRev, limit, withTotal, func(ki *keyIndex, ka KeyAt) {
		ka.Key = arena.keep(ka.Key, ki)
		keys = append(keys, ka)
	})
	return keys, total
}

// EachKey is Keys calling fn with each key instead of collecting them,
// for a caller that encodes them as it goes: ka.Key is valid only during
// the call. fn runs under the index's read lock and must not call back
// into the index.
func (x *Index) EachKey(key, end []byte, atRev int64, limit int, withTotal bool, fn func(ka KeyAt)) (total int) {
	return x.eachKey(key, end, atRev, limit, withTotal, func(_ *keyIndex, ka KeyAt) { fn(ka) })
}

func (x *Index) eachKey(key, end []byte, atRev int64, limit int, withTotal bool, fn func(ki *keyIndex, ka KeyAt)) (total int) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if end == nil {
		ki, ok := x.lookup(key)
		if !ok {
			return 0
		}
		mod, created, ver, err := ki.get(atRev)
		if err != nil {
			return 0
		}
		fn(ki, KeyAt{Key: ki.key, Modified: mod, Created: created, Version: ver})
		return 1
	}
	n := 0
	x.visitAt(key, end, atRev, func(k []byte, ki *keyIndex, mod, created Revision, ver int64) bool {
		full := limit > 0 && n >= limit
		if full && !withTotal {
			return false
		}
		if !full {
			fn(ki, KeyAt{Key: k, Modified: mod, Created: created, Version: ver})
			n++
		}
		total++
		return true
	})
	return total
}

// CountRevisions returns how many keys in [key, end) (end as for Range)
// exist at atRev, counting no further than limit if limit > 0.
func (x *Index) CountRevisions(key, end []byte, atRev int64, limit int) int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if end == nil {
		ki, ok := x.lookup(key)
		if !ok {
			return 0
		}
		if _, _, _, err := ki.get(atRev); err != nil {
			return 0
		}
		return 1
	}
	n := 0
	x.visitAt(key, end, atRev, func([]byte, *keyIndex, Revision, Revision, int64) bool {
		n++
		return limit <= 0 || n < limit
	})
	return n
}

// RangeSince returns, sorted by revision, the revisions >= (rev, 0) of the
// keys in [key, end) (end as for Range), puts and tombstones alike, keeping
// only the last sub-revision of each key per main revision. A watcher that
// falls behind catches up by reading these records from the page store.
func (x *Index) RangeSince(key, end []byte, rev int64) []Revision {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if end == nil {
		ki, ok := x.lookup(key)
		if !ok {
			return nil
		}
		return ki.since(rev, nil)
	}
	var revs []Revision
	x.visit(key, end, func(ki *keyIndex) bool {
		revs = ki.since(rev, revs)
		return true
	})
	slices.SortFunc(revs, Revision.Compare)
	return revs
}

// Compact drops from the index every revision that no read at a revision >=
// rev can return, and returns the revisions <= rev that such reads still
// need: for each key, the newest revision <= rev of the generation live at
// rev (including a tombstone exactly at rev). The store deletes every
// other record with a revision <= rev. Keys left with no revisions are
// removed.
//
// The work is done in batches of compactBatch keys, each under the write
// lock, so writers proceed between batches. rev must not be above the
// revision already applied: then keys written meanwhile only have revisions
// above rev, and missing or revisiting them changes nothing.
func (x *Index) Compact(rev int64) map[Revision]struct{} {
	available := make(map[Revision]struct{})
	x.compact(rev, available, nil)
	return available
}

// Garbage is a revision a compaction dropped from the index: the store's
// record of it can go. A tombstone's record key carries a mark.
type Garbage struct {
	Rev       Revision
	Tombstone bool
}

// CompactGarbage is Compact for a store that deletes what the index
// drops instead of what it keeps: it returns, in no particular order,
// every revision the compaction dropped (all at or below rev), and builds
// no set of what is kept, so its cost and memory follow the garbage, not
// the live keys. Every record at or below rev that the index held is in
// exactly one of CompactGarbage's result and Compact's.
func (x *Index) CompactGarbage(rev int64) []Garbage {
	var garbage []Garbage
	x.compact(rev, nil, &garbage)
	return garbage
}

// compact drops what a compaction at rev drops, recording what it keeps
// in available and what it drops in garbage, each when not nil.
//
// With a base, the base's schedule names the revisions that become
// garbage at compactions in (last compaction, rev]; their keys are first
// read into the tree (where the walk below compacts them), so the work
// follows the garbage, not the base's keys. Every base key with garbage
// at or below rev is then in the tree: one with garbage at or below the
// last compaction was read in by that compaction, one written since was
// read in by the write. So a key a write reads in while this compaction
// runs has no garbage at or below rev, and the walk may miss it.
func (x *Index) compact(rev int64, available map[Revision]struct{}, garbage *[]Garbage) {
	x.mu.RLock()
	prev, base := x.compacted, x.base
	x.mu.RUnlock()
	if base != nil && rev > prev {
		x.readInScheduled(base, max(prev, base.compactRev), rev)
	}
	var after []byte
	started := false
	batch := make([]*keyIndex, 0, compactBatch)
	for {
		x.mu.Lock()
		batch = batch[:0]
		var it Iter[*keyIndex]
		it.reset(x.tree)
		var ok bool
		if !started {
			ok = it.First()
		} else {
			ok = it.SeekGEFunc(func(ki *keyIndex) int {
				if c := bytes.Compare(ki.key, after); c != 0 {
					return c
				}
				return -1 // strictly after the last key done
			})
		}
		for ; ok && len(batch) < compactBatch; ok = it.Next() {
			batch = append(batch, it.Item())
		}
		// The iterator is done before the tree changes below.
		for _, ki := range batch {
			if ki.gone {
				continue
			}
			genIdx, revIdx := ki.compactPlan(rev, available)
			if needsCompact(genIdx, revIdx) {
				if garbage != nil {
					*garbage = ki.garbage(genIdx, revIdx, *garbage)
				}
				ki = x.mutable(ki)
				ki.applyCompact(genIdx, revIdx)
			}
			if ki.isEmpty() {
				if ki.inBase {
					x.tree.ReplaceOrInsert(&keyIndex{prefix: ki.prefix, key: ki.key, owner: x.owner, inBase: true, gone: true})
				} else {
					x.tree.Delete(ki)
				}
			}
		}
		x.mu.Unlock()
		if len(batch) < compactBatch {
			break
		}
		after, started = batch[len(batch)-1].key, true
	}
	x.mu.Lock()
	x.compacted = max(x.compacted, rev)
	if available != nil && x.base != nil {
		// The base's keys that stayed out of the tree keep what they
		// have at or below rev.
		x.visitAll(func(ki *keyIndex) bool {
			ki.compactPlan(rev, available) // again for the tree's: no change
			return true
		})
	}
	x.mu.Unlock()
}

// readInScheduled reads into the tree, a batch of keys per hold of the
// write lock, the base's keys with a revision that becomes garbage at a
// compaction in (after, upTo].
func (x *Index) readInScheduled(b *Base, after, upTo int64) {
	var keys [][]byte
	flush := func() {
		x.mu.Lock()
		for _, key := range keys {
			p := keyPrefix(key)
			if _, ok := x.tree.GetFunc(func(ki *keyIndex) int { return compareKey(ki, p, key) }); ok {
				continue
			}
			ki, ok := b.get(key)
			if !ok {
				continue
			}
			x.fromBase(ki)
			ki.owner = x.owner
			if ki.isEmpty() {
				ki.gone, ki.generations = true, nil
			}
			x.tree.ReplaceOrInsert(ki)
		}
		x.mu.Unlock()
		keys = keys[:0]
	}
	b.garbageBetween(after, upTo, func(_ Garbage, key []byte) {
		if len(keys) > 0 && bytes.Equal(keys[len(keys)-1], key) {
			return
		}
		keys = append(keys, bytes.Clone(key))
		if len(keys) == compactBatch {
			flush()
		}
	})
	flush()
}

// Keep returns the revisions a compaction at rev would keep, less kept
// tombstones (see keyIndex.keep), without changing the index. HashKV uses
// it to hash the same record set on every member.
func (x *Index) Keep(rev int64) map[Revision]struct{} {
	available := make(map[Revision]struct{})
	x.mu.RLock()
	defer x.mu.RUnlock()
	x.visitAll(func(ki *keyIndex) bool {
		ki.keep(rev, available)
		return true
	})
	return available
}

// ReplaceBase makes b, written from snap (a Clone of x taken when b's
// revision was x's last), x's base, and drops from x's tree every entry
// that has not changed since snap was taken: b holds it now. Entries that
// changed since stay and hide b's. An entry that a compaction since snap
// removed from the tree (a key deleted, its history compacted away, that
// the old base did not hold) is replaced by a gone entry: b holds the key
// as snap saw it, alive, and nothing else would hide it. The drop goes a
// batch at a time, each under the write lock; until an entry is dropped
// it hides an identical one in b.
func (x *Index) ReplaceBase(b *Base, snap *Index) {
	x.mu.Lock()
	x.base = b
	x.mu.Unlock()
	var batch []*keyIndex
	drop := func() {
		x.mu.Lock()
		for _, ki := range batch {
			cur, ok := x.tree.Get(ki)
			switch {
			case !ok && !ki.gone && !ki.isEmpty():
				x.tree.ReplaceOrInsert(&keyIndex{prefix: ki.prefix, key: ki.key, owner: x.owner, inBase: true, gone: true})
			case !ok:
			case cur == ki:
				x.tree.Delete(ki)
			case !ki.gone && !cur.inBase:
				// b holds the key as snap saw it: the tree's newer
				// entry now hides b's, and if a compaction empties it,
				// a gone entry must keep hiding it.
				x.mutable(cur).inBase = true
			}
		}
		x.mu.Unlock()
		batch = batch[:0]
	}
	snap.tree.Ascend(func(ki *keyIndex) bool {
		batch = append(batch, ki)
		if len(batch) == compactBatch {
			drop()
		}
		return true
	})
	drop()
}
