package btreeidx

import (
	"bytes"
	"encoding/binary"
	"slices"
)

// generation is one life of a key: its first revision created the key, each
// later revision is a put, and in every generation but a key's last, the
// final revision is the tombstone that deleted the key.
type generation struct {
	// ver is the number of revisions ever appended to this generation,
	// including ones a compaction has since dropped from revs, so the
	// version of revs[i] is ver-(len(revs)-1-i). A tombstone counts too;
	// that is harmless because no read ever returns a tombstone.
	ver int64
	// created is the revision that started this generation (etcd's
	// create_revision). It survives compaction of the revision itself.
	created Revision
	// revs is strictly increasing. Elements are never modified once
	// appended: revs is only appended to or resliced from the front. That
	// is what lets a copy share the backing array (see keyIndex.clone).
	revs []Revision
}

// keyIndex is the history of one user key, as the list of its generations.
//
// Invariants:
//   - generations is non-empty. Only the last generation may be empty, and
//     an empty last generation means the key is deleted now. Every other
//     generation ends with its tombstone.
//   - Revisions strictly increase across all generations; modified is the
//     last one appended.
//   - A keyIndex is written in place only by the Index whose owner token it
//     carries. Any other Index that reaches it through a shared B-tree node
//     must copy it first (Index.mutable); see BTree's ownership rule.
type keyIndex struct {
	// prefix is keyPrefix(key), first so that comparing it reads one
	// cache line of the entry and not the key's bytes.
	prefix      uint64
	key         []byte
	modified    Revision
	generations []generation
	owner       uint64
	// lease is the lease of the key's last put while the key exists,
	// else 0.
	lease int64
	// inBase: the Index's base holds this key too, so this entry hides
	// it; gone: an entry that only hides the base's (the key's history
	// was compacted away). See Index. scratch: the entry is Index.visit's
	// decoding of a base entry, overwritten by the next.
	inBase, gone, scratch bool
}

func compareKeyIndex(a, b *keyIndex) int { return compareKey(a, b.prefix, b.key) }

// newKeyIndex returns an entry for a copy of key, owned by owner.
func newKeyIndex(key []byte, owner uint64) *keyIndex {
	k := bytes.Clone(key)
	return &keyIndex{prefix: keyPrefix(k), key: k, owner: owner}
}

// keyPrefix is key's first 8 bytes as a big-endian number, zero-padded.
// Two keys whose prefixes differ are ordered as their prefixes are; equal
// prefixes say nothing (a key shorter than 8 bytes pads with zeros, as a
// longer key's zero bytes would read).
func keyPrefix(key []byte) uint64 {
	if len(key) >= 8 {
		return binary.BigEndian.Uint64(key)
	}
	var b [8]byte
	copy(b[:], key)
	return binary.BigEndian.Uint64(b[:])
}

// compareKey compares ki's key with key, whose keyPrefix is prefix, as
// bytes.Compare does.
//
// Why: a lookup in an index of many keys compares the sought key with
// about a dozen entries, each in its own place in memory. Through the
// prefix most comparisons read the entry alone; bytes.Compare read the
// entry for the key's address and then the key, two cache misses each.
func compareKey(ki *keyIndex, prefix uint64, key []byte) int {
	switch {
	case ki.prefix < prefix:
		return -1
	case ki.prefix > prefix:
		return 1
	}
	return bytes.Compare(ki.key, key)
}

// isEmpty reports whether the key has no revisions left: nothing to read,
// nothing a compaction must keep. The index drops such keys.
func (ki *keyIndex) isEmpty() bool {
	return len(ki.generations) == 0 ||
		len(ki.generations) == 1 && len(ki.generations[0].revs) == 0
}

// live reports whether the key exists now (its last generation has
// revisions, so it has no tombstone yet).
func (ki *keyIndex) live() bool {
	return len(ki.generations) > 0 && len(ki.generations[len(ki.generations)-1].revs) > 0
}

// put appends rev to the current generation, starting a new generation
// (and so a new create revision, with version 1) if the key is deleted.
func (ki *keyIndex) put(rev Revision) error {
	if len(ki.generations) > 0 && !rev.GreaterThan(ki.modified) {
		return ErrStaleRevision
	}
	if len(ki.generations) == 0 {
		ki.generations = append(ki.generations, generation{})
	}
	g := &ki.generations[len(ki.generations)-1]
	if len(g.revs) == 0 {
		g.created = rev
	}
	g.revs = append(g.revs, rev)
	g.ver++
	ki.modified = rev
	return nil
}

// tombstone ends the current generation with rev. A key that is not live
// has nothing to delete.
func (ki *keyIndex) tombstone(rev Revision) error {
	if !ki.live() {
		return ErrRevisionNotFound
	}
	if err := ki.put(rev); err != nil {
		return err
	}
	ki.generations = append(ki.generations, generation{})
	return nil
}

// restore starts an empty keyIndex from the oldest record a (possibly
// compacted) page store still holds for the key: the revisions before it
// are gone, but the record carries the generation's create revision and its
// version, so later puts continue the count.
func (ki *keyIndex) restore(created, modified Revision, ver int64) {
	ki.modified = modified
	ki.generations = []generation{{created: created, ver: ver, revs: []Revision{modified}}}
}

// restoreTombstone starts an empty keyIndex from a tombstone record: a
// generation holding only the tombstone (its puts were compacted away),
// followed by the empty generation of the deleted key. The tombstone's
// create revision is unknown and left zero; no read returns it.
func (ki *keyIndex) restoreTombstone(rev Revision) {
	ki.restore(Revision{}, rev, 1)
	ki.generations = append(ki.generations, generation{})
}

// findGeneration returns the index of the generation that holds the key's
// visible version at atRev, or -1 if the key did not exist at atRev (before
// its first revision, or after a tombstone and before the next create).
func (ki *keyIndex) findGeneration(atRev int64) int {
	last := len(ki.generations) - 1
	for gi := last; gi >= 0; gi-- {
		g := &ki.generations[gi]
		if len(g.revs) == 0 {
			continue
		}
		// Walking back from newer generations, every later generation
		// started after atRev. If this one was already deleted at atRev,
		// atRev falls in the gap between two lives.
		if gi != last && g.revs[len(g.revs)-1].Main <= atRev {
			return -1
		}
		if g.revs[0].Main <= atRev {
			return gi
		}
	}
	return -1
}

// get returns the version of the key visible at atRev: its mod and create
// revisions and its version (1 on create, +1 per put in the generation).
func (ki *keyIndex) get(atRev int64) (modified, created Revision, ver int64, err error) {
	// A read at or after the key's last change, which almost every read
	// is, sees the last generation as it stands: the key's last put
	// (modified), or nothing if that generation is empty because a
	// tombstone ended the one before. This reads no revision list, which
	// in a walk over many keys is a cache miss per key.
	if last := len(ki.generations) - 1; last >= 0 && atRev >= ki.modified.Main {
		g := &ki.generations[last]
		if len(g.revs) == 0 {
			return Revision{}, Revision{}, 0, ErrRevisionNotFound
		}
		return ki.modified, g.created, g.ver, nil
	}
	gi := ki.findGeneration(atRev)
	if gi < 0 {
		return Revision{}, Revision{}, 0, ErrRevisionNotFound
	}
	g := &ki.generations[gi]
	n := lastAtOrBefore(g.revs, atRev)
	if n < 0 {
		return Revision{}, Revision{}, 0, ErrRevisionNotFound
	}
	return g.revs[n], g.created, g.ver - int64(len(g.revs)-1-n), nil
}

// lastAtOrBefore returns the index of the last revision in revs (sorted)
// with Main <= atRev, or -1. Reads at the head revision, the common case,
// are answered by the first comparison.
func lastAtOrBefore(revs []Revision, atRev int64) int {
	n := len(revs) - 1
	if n < 0 || revs[n].Main <= atRev {
		return n
	}
	i, _ := slices.BinarySearchFunc(revs, atRev+1, func(r Revision, main int64) int {
		if r.Main < main {
			return -1
		}
		return 1
	})
	return i - 1
}

// since appends to dst the key's revisions with Main >= rev, in order, with
// only the last sub-revision of each main revision (a transaction that
// changed the key twice is one event for a watcher: its final state).
func (ki *keyIndex) since(rev int64, dst []Revision) []Revision {
	from := Revision{Main: rev}
	// Skip whole generations: everything before the newest generation
	// that started before from is older than from.
	start := 0
	for gi := len(ki.generations) - 1; gi > 0; gi-- {
		g := &ki.generations[gi]
		if len(g.revs) > 0 && g.revs[0].Compare(from) < 0 {
			start = gi
			break
		}
	}
	first := len(dst)
	for _, g := range ki.generations[start:] {
		for _, r := range g.revs {
			if r.Compare(from) < 0 {
				continue
			}
			if len(dst) > first && dst[len(dst)-1].Main == r.Main {
				dst[len(dst)-1] = r
				continue
			}
			dst = append(dst, r)
		}
	}
	return dst
}

// compactPlan finds what a compaction at atRev keeps of the key and records
// the kept revision <= atRev in available. It returns the first generation
// to keep and, in it, the index of the first revision to keep (-1 if all of
// that generation's revisions are newer than atRev and all are kept).
//
// What decides is the key's newest revision <= atRev, the one a read at
// atRev sees:
//   - a put: it is kept (and reported available), with everything newer;
//     everything older, including whole older generations, is dropped;
//   - a tombstone older than atRev: the key is deleted at every revision >=
//     atRev until its next generation, so the tombstone and everything
//     older are dropped and nothing is reported;
//   - a tombstone exactly at atRev: kept, as etcd keeps it (its record is
//     the delete event of revision atRev itself), until a later compaction;
//   - none (every revision is newer than atRev): everything is kept.
//
// When every key changes at most once per main revision, which etcd's txn
// validation guarantees, this is exactly etcd's rule ("skip generations
// whose tombstone is below atRev, then keep the newest revision <= atRev of
// the next one"). Stating it by the newest revision also keeps the right
// record if a key is deleted and put again within one main revision.
func (ki *keyIndex) compactPlan(atRev int64, available map[Revision]struct{}) (genIdx, revIdx int) {
	last := len(ki.generations) - 1
	for gi := last; gi >= 0; gi-- {
		g := &ki.generations[gi]
		i := lastAtOrBefore(g.revs, atRev)
		if i < 0 {
			continue
		}
		if gi != last && i == len(g.revs)-1 && g.revs[i].Main < atRev {
			// The newest revision <= atRev is this generation's
			// tombstone, older than atRev.
			return gi + 1, -1
		}
		if available != nil {
			available[g.revs[i]] = struct{}{}
		}
		return gi, i
	}
	return 0, -1
}

// garbage appends to dst the revisions a compaction planned by
// compactPlan drops: every revision of the generations before genIdx (the
// last of each is its tombstone) and those before revIdx in generation
// genIdx (never its last).
func (ki *keyIndex) garbage(genIdx, revIdx int, dst []Garbage) []Garbage {
	for gi := 0; gi < genIdx && gi < len(ki.generations); gi++ {
		revs := ki.generations[gi].revs
		for i, r := range revs {
			dst = append(dst, Garbage{Rev: r, Tombstone: i == len(revs)-1})
		}
	}
	if revIdx > 0 {
		for _, r := range ki.generations[genIdx].revs[:revIdx] {
			dst = append(dst, Garbage{Rev: r})
		}
	}
	return dst
}

// needsCompact reports whether a compaction planned by compactPlan changes
// the key, so an Index copies a shared keyIndex only when it must.
func needsCompact(genIdx, revIdx int) bool { return genIdx > 0 || revIdx > 0 }

// applyCompact drops what compactPlan said to drop. ki must be owned by the
// caller: the generations array is shifted in place (so the dropped
// generations' revision arrays are released), while revision arrays are only
// resliced because a clone may share them.
func (ki *keyIndex) applyCompact(genIdx, revIdx int) {
	if revIdx > 0 {
		g := &ki.generations[genIdx]
		g.revs = g.revs[revIdx:]
	}
	if genIdx > 0 {
		n := copy(ki.generations, ki.generations[genIdx:])
		clear(ki.generations[n:])
		ki.generations = ki.generations[:n]
	}
}

// keep records in available what a compaction at atRev would keep, without
// changing the key, except that a kept tombstone is left out. That is etcd's
// definition of the set that HashKV hashes at or below the compact revision:
// a tombstone at atRev carries no value, and the next compaction deletes its
// record, so it must not make the hashes of two members differ.
func (ki *keyIndex) keep(atRev int64, available map[Revision]struct{}) {
	if ki.isEmpty() {
		return
	}
	genIdx, revIdx := ki.compactPlan(atRev, available)
	g := &ki.generations[genIdx]
	if revIdx >= 0 && revIdx == len(g.revs)-1 && genIdx != len(ki.generations)-1 {
		delete(available, g.revs[revIdx])
	}
}

// clone returns a copy of ki owned by owner. The generations array is new,
// so generation fields can be changed in place; revision arrays are shared
// but clipped to their length, so an append to either copy reallocates
// instead of writing into the other's array.
func (ki *keyIndex) clone(owner uint64) *keyIndex {
	c := &keyIndex{
		prefix:      ki.prefix,
		key:         ki.key,
		modified:    ki.modified,
		owner:       owner,
		lease:       ki.lease,
		inBase:      ki.inBase,
		gone:        ki.gone,
		generations: make([]generation, len(ki.generations), len(ki.generations)+1),
	}
	for i, g := range ki.generations {
		g.revs = slices.Clip(g.revs)
		c.generations[i] = g
	}
	return c
}

// schedule calls fn for each revision of the key that a compaction above
// after drops, with the lowest compaction revision that drops it
// (becomes), as compactPlan decides: a revision goes once the next one of
// its generation is at or below the compaction; a generation's tombstone
// once the compaction is above it, or at the next generation's first
// revision if that shares its main revision. The last revision of the
// last generation never goes while the key exists.
func (ki *keyIndex) schedule(after int64, fn func(becomes int64, r Revision, tomb bool)) {
	last := len(ki.generations) - 1
	for gi, g := range ki.generations {
		for i, r := range g.revs {
			var becomes int64
			tomb := false
			switch {
			case i < len(g.revs)-1:
				becomes = g.revs[i+1].Main
			case gi != last:
				tomb = true
				becomes = r.Main + 1
				if next := ki.generations[gi+1].revs; len(next) > 0 && next[0].Main < becomes {
					becomes = next[0].Main
				}
			default:
				continue
			}
			if becomes > after {
				fn(becomes, r, tomb)
			}
		}
	}
}
