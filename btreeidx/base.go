package btreeidx

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"

	"github.com/cespare/xxhash/v2"
	"golang.org/x/sys/unix"

	"github.com/strata-db/strata/vfs"
)

// A base is an Index's history of every key as of one revision, written to
// a file and mapped read-only, so that an Index need not hold it in memory
// nor rebuild it when its store opens (see the package doc, "Base").
//
// File format (little-endian unless said):
//
//	header (4096 bytes): "STRATAIX", version u32, 0 u32, revision i64,
//	    compact revision i64, keys i64, live keys i64, token [16]byte,
//	    three table references (index offset i64, index length i64,
//	    entries i64): entries, schedule, leases; then xxhash64 of all
//	    the header's bytes before it
//	the three tables (table.go), one after the other
//
// entries: user key → the key's history, compacted at the compact
// revision: lease, modified main, modified sub, generation count, and per
// generation ver, created main, created sub, revision count, the first
// revision's main and sub, then each next one's main as the difference
// from the previous and its sub (all uvarints).
//
// schedule: becomes (u64 BE) | main (u64 BE) | sub (u64 BE) | tombstone
// (one byte) → user key: every revision of the entries that a compaction
// at revision >= becomes drops (keyIndex.schedule), so a compaction finds
// the garbage among keys it never loads.
//
// leases: lease (u64 BE) | user key → nothing: the live keys with a
// lease.
//
// Crash safety: a base is written to a temporary file, synced, renamed
// into place and its directory synced; an interrupted write leaves the
// previous base (or none). Opening checks the header's and every block's
// checksum, and the token against the store's (WriteBase's caller keeps
// them so a base is never used with a store it was not written from).

const (
	baseMagic      = "STRATAIX"
	baseVersion    = 1
	baseHeaderSize = 4096
	baseHeaderUsed = 8 + 4 + 4 + 8*4 + 16 + 3*24
)

// Base is an opened base file. It is immutable and safe for concurrent
// use; its mapping is released when no Index refers to it anymore.
type Base struct {
	path       string
	data       []byte
	rev        int64
	compactRev int64
	keys, live int64
	token      [16]byte
	entries    *table
	sched      *table
	leases     *table
}

// ErrBaseCorrupt is wrapped by OpenBase's errors for a damaged file.
var ErrBaseCorrupt = errTableCorrupt

// Rev is the revision the base is the index of: every write up to it.
func (b *Base) Rev() int64 { return b.rev }

// CompactRev is the compaction revision the base's histories are
// compacted at (-1: none).
func (b *Base) CompactRev() int64 { return b.compactRev }

// Token is the token WriteBase was given.
func (b *Base) Token() [16]byte { return b.token }

// Keys is the number of keys the base holds.
func (b *Base) Keys() int64 { return b.keys }

// Path is the file's path.
func (b *Base) Path() string { return b.path }

// OpenBase maps the base file at path and checks it completely: a damaged
// file is refused with an error wrapping ErrBaseCorrupt that names the
// file and the offset.
func OpenBase(fsys vfs.FS, path string) (*Base, error) {
	b, check, err := OpenBaseUnchecked(fsys, path)
	if err != nil {
		return nil, err
	}
	if err := check(); err != nil {
		return nil, err
	}
	return b, nil
}

// OpenBaseUnchecked is OpenBase in two steps, for a caller with other
// work to do while the file is checked: it maps the file and checks its
// header and its tables' index blocks, and returns check, which reads
// and checks every data block (checksums, entries, counts) as OpenBase
// does, with OpenBase's errors. The check reads the whole file, which
// at millions of keys is most of the time a store takes to open; a store
// reads its records since the base meanwhile (mvcc.Store.restore).
//
// Until check has returned nil the base must not be read: its tables
// read as empty. check is called once, and the base is usable only if it
// returned nil.
func OpenBaseUnchecked(fsys vfs.FS, path string) (*Base, func() error, error) {
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return nil, nil, err
	}
	if size < baseHeaderSize {
		return nil, nil, fmt.Errorf("%w: %s: cut short at offset %d, inside its header", ErrBaseCorrupt, path, size)
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("btreeidx: mmap %s: %w", path, err)
	}
	// The check reads the whole file in order: ask for all of it at
	// once, rather than a fault's read-around at a time
	// (BenchmarkIndexBase/open-cold, 1M keys: 134 ms instead of 172).
	_ = unix.Madvise(data, unix.MADV_WILLNEED)
	b, err := parseBase(path, data)
	if err != nil {
		unix.Munmap(data)
		return nil, nil, err
	}
	runtime.AddCleanup(b, func(data []byte) { unix.Munmap(data) }, data)
	return b, b.checkBlocks, nil
}

// checkBlocks checks the data blocks of the base's tables.
func (b *Base) checkBlocks() error {
	for _, t := range []*table{b.entries, b.sched, b.leases} {
		if err := t.checkBlocks(b.path); err != nil {
			return err
		}
	}
	return nil
}

func parseBase(path string, data []byte) (*Base, error) {
	h := data[:baseHeaderSize]
	if string(h[:8]) != baseMagic {
		return nil, fmt.Errorf("%w: %s: not a Strata index base (magic %q at offset 0)", ErrBaseCorrupt, path, h[:8])
	}
	if sum := binary.LittleEndian.Uint64(h[baseHeaderUsed:]); xxhash.Sum64(h[:baseHeaderUsed]) != sum {
		return nil, fmt.Errorf("%w: %s: header checksum mismatch (offset 0)", ErrBaseCorrupt, path)
	}
	if v := binary.LittleEndian.Uint32(h[8:]); v != baseVersion {
		return nil, fmt.Errorf("btreeidx: %s: base format version %d; this Strata reads %d", path, v, baseVersion)
	}
	le := binary.LittleEndian
	b := &Base{path: path, data: data,
		rev: int64(le.Uint64(h[16:])), compactRev: int64(le.Uint64(h[24:])),
		keys: int64(le.Uint64(h[32:])), live: int64(le.Uint64(h[40:]))}
	copy(b.token[:], h[48:64])
	refs := make([]tableRef, 3)
	for i := range refs {
		p := h[64+24*i:]
		refs[i] = tableRef{indexOff: int64(le.Uint64(p)), indexLen: int64(le.Uint64(p[8:])), count: int64(le.Uint64(p[16:]))}
	}
	var err error
	if b.entries, err = openTableIndex(path, data, refs[0]); err != nil {
		return nil, err
	}
	if b.sched, err = openTableIndex(path, data, refs[1]); err != nil {
		return nil, err
	}
	if b.leases, err = openTableIndex(path, data, refs[2]); err != nil {
		return nil, err
	}
	if b.entries.count != b.keys {
		return nil, fmt.Errorf("%w: %s: %d entries, the header says %d keys", ErrBaseCorrupt, path, b.entries.count, b.keys)
	}
	return b, nil
}

// get returns key's history (a new keyIndex owned by no Index), if the
// base holds the key.
func (b *Base) get(key []byte) (*keyIndex, bool) {
	it := b.entries.iter()
	if !it.seekGE(key) || !bytes.Equal(it.key, key) {
		return nil, false
	}
	return b.decode(it.key, it.value), true
}

// decode builds the keyIndex of an entry; it copies everything, so the
// result outlives the mapping.
func (b *Base) decode(key, v []byte) *keyIndex {
	ki, err := decodeKeyIndex(key, v)
	if err != nil {
		b.undecodable(err)
	}
	return ki
}

// decodeScratch decodes an entry into scratch, reusing its arrays and
// copying key into its key buffer: for walks that use each entry only
// while they hold it, and so allocate nothing per key.
func (b *Base) decodeScratch(scratch *keyIndex, key, v []byte) {
	if err := decodeKeyIndexInto(scratch, append(scratch.key[:0], key...), v); err != nil {
		b.undecodable(err)
	}
	scratch.scratch = true
}

func (b *Base) undecodable(err error) {
	// Every block's checksum was checked when the base was opened, so
	// this entry was written so: a bug, not damage.
	panic(fmt.Sprintf("btreeidx: %s: a checked entry does not decode: %v", b.path, err))
}

func appendKeyIndex(dst []byte, ki *keyIndex) []byte {
	u := func(v int64) { dst = binary.AppendUvarint(dst, uint64(v)) }
	u(ki.lease)
	u(ki.modified.Main)
	u(ki.modified.Sub)
	u(int64(len(ki.generations)))
	for _, g := range ki.generations {
		u(g.ver)
		u(g.created.Main)
		u(g.created.Sub)
		u(int64(len(g.revs)))
		prev := int64(0)
		for _, r := range g.revs {
			u(r.Main - prev)
			u(r.Sub)
			prev = r.Main
		}
	}
	return dst
}

var errBadEntry = errors.New("bad entry")

func decodeKeyIndex(key, v []byte) (*keyIndex, error) {
	ki := &keyIndex{}
	if err := decodeKeyIndexInto(ki, bytes.Clone(key), v); err != nil {
		return nil, err
	}
	return ki, nil
}

// decodeKeyIndexInto decodes the entry (key, v) into dst, overwriting
// what dst held but reusing its generation and revision arrays. dst takes
// key as is.
func decodeKeyIndexInto(dst *keyIndex, key, v []byte) error {
	u := func() int64 {
		x, n := binary.Uvarint(v)
		if n <= 0 {
			v = nil
			return -1
		}
		v = v[n:]
		return int64(x)
	}
	gens := dst.generations
	*dst = keyIndex{prefix: keyPrefix(key), key: key}
	dst.lease = u()
	dst.modified = Revision{Main: u(), Sub: u()}
	ng := u()
	if ng < 0 || ng > int64(len(v)) {
		return errBadEntry
	}
	if int64(cap(gens)) >= ng {
		gens = gens[:ng]
	} else {
		gens = append(gens[:cap(gens)], make([]generation, int(ng)-cap(gens))...)
	}
	dst.generations = gens
	for i := range gens {
		g := &gens[i]
		revs := g.revs[:0]
		g.ver = u()
		g.created = Revision{Main: u(), Sub: u()}
		nr := u()
		if nr < 0 || nr > int64(len(v)) {
			return errBadEntry
		}
		if int64(cap(revs)) < nr {
			revs = make([]Revision, 0, nr)
		}
		prev := int64(0)
		for range nr {
			d, s := u(), u()
			if d < 0 || s < 0 {
				return errBadEntry
			}
			prev += d
			revs = append(revs, Revision{Main: prev, Sub: s})
		}
		g.revs = revs
	}
	if v == nil || len(v) != 0 || dst.lease < 0 || ng == 0 {
		return errBadEntry
	}
	return nil
}

// peekAt is keyIndex.get(atRev) for the encoded base entry v, answered
// without decoding it into a keyIndex, when atRev is at or after the
// key's last change: then what a read sees is the key's last generation
// as it stands, its last revision, create revision and version if it has
// revisions, nothing if a tombstone ended it. A compaction since the base
// (fromBase) changes neither: it keeps each live generation's last
// revision and drops only generations a tombstone at or before it ended.
// ok is false when atRev is before the last change or v does not parse
// as expected; the caller then decodes the entry.
func peekAt(v []byte, atRev int64) (mod, created Revision, ver int64, found, ok bool) {
	bad := false
	u := func() int64 {
		x, n := binary.Uvarint(v)
		if n <= 0 {
			bad = true
			return 0
		}
		v = v[n:]
		return int64(x)
	}
	u() // lease
	if modMain := u(); bad || atRev < modMain {
		return Revision{}, Revision{}, 0, false, false
	}
	u() // modified.Sub
	ng := u()
	if bad || ng <= 0 {
		return Revision{}, Revision{}, 0, false, false
	}
	var nr int64
	for range ng {
		ver = u()
		created = Revision{Main: u(), Sub: u()}
		nr = u()
		if bad || nr < 0 || nr > int64(len(v)) {
			return Revision{}, Revision{}, 0, false, false
		}
		prev := int64(0)
		for range nr {
			prev += u()
			mod = Revision{Main: prev, Sub: u()}
		}
	}
	if bad || len(v) != 0 {
		return Revision{}, Revision{}, 0, false, false
	}
	if nr == 0 {
		return Revision{}, Revision{}, 0, false, true
	}
	return mod, created, ver, true, true
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// scheduleKey is a schedule table key.
func scheduleKey(dst []byte, becomes int64, r Revision, tomb bool) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(becomes))
	dst = binary.BigEndian.AppendUint64(dst, uint64(r.Main))
	dst = binary.BigEndian.AppendUint64(dst, uint64(r.Sub))
	t := byte(0)
	if tomb {
		t = 1
	}
	return append(dst, t)
}

// garbageBetween calls fn for each scheduled revision that becomes
// garbage at a compaction revision in (after, upTo], with its key (valid
// during the call).
func (b *Base) garbageBetween(after, upTo int64, fn func(g Garbage, key []byte)) {
	it := b.sched.iter()
	for ok := it.seekGE(scheduleKey(nil, after+1, Revision{}, false)); ok; ok = it.next() {
		k := it.key
		if len(k) != 25 {
			panic(fmt.Sprintf("btreeidx: %s: a checked schedule entry has a %d-byte key", b.path, len(k)))
		}
		if int64(binary.BigEndian.Uint64(k)) > upTo {
			return
		}
		r := Revision{Main: int64(binary.BigEndian.Uint64(k[8:])), Sub: int64(binary.BigEndian.Uint64(k[16:]))}
		fn(Garbage{Rev: r, Tombstone: k[24] == 1}, it.value)
	}
}

// WriteBase writes the base of snap (an Index no one writes anymore,
// typically a Clone) as the index of every write up to rev, with token,
// to path: its keys, each compacted at snap's last compaction, the
// schedule of their garbage and their leases.
func WriteBase(fsys vfs.FS, path string, snap *Index, rev int64, token [16]byte) error {
	tmp := path + ".tmp"
	f, err := fsys.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	closed := false
	defer func() {
		if !closed {
			f.Close()
			fsys.Remove(tmp)
		}
	}()
	if _, err := f.Write(make([]byte, baseHeaderSize)); err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	// The schedule is collected as numbers and encoded as it is written:
	// a key per scheduled revision, allocated and compared as bytes,
	// took a third of the write of a million keys.
	type sched struct {
		becomes int64
		rev     Revision
		tomb    bool
		user    []byte
	}
	var scheds []sched
	type leased struct {
		lease int64
		key   []byte
	}
	var leases []leased
	var keys, live int64
	ew := newTableWriter(bw, baseHeaderSize)
	var buf []byte
	var werr error
	compacted := snap.CompactedRev()
	snap.mu.RLock()
	var arena keyArena
	snap.visitAll(func(ki *keyIndex) bool {
		buf = appendKeyIndex(buf[:0], ki)
		if werr = ew.add(ki.key, buf); werr != nil {
			return false
		}
		keys++
		var kept []byte // ki.key, kept past the call (see visit)
		keep := func() []byte {
			if kept == nil {
				kept = arena.keep(ki.key, ki)
			}
			return kept
		}
		if ki.live() {
			live++
			if ki.lease != 0 {
				leases = append(leases, leased{ki.lease, keep()})
			}
		}
		ki.schedule(compacted, func(becomes int64, r Revision, tomb bool) {
			scheds = append(scheds, sched{becomes, r, tomb, keep()})
		})
		return true
	})
	snap.mu.RUnlock()
	if werr != nil {
		return werr
	}
	entriesRef, off, err := ew.finish()
	if err != nil {
		return err
	}
	// The order of scheduleKey's bytes: becomes, then the revision, then
	// the tombstone mark, each big-endian.
	slices.SortFunc(scheds, func(a, b sched) int {
		if c := cmp.Compare(a.becomes, b.becomes); c != 0 {
			return c
		}
		if c := a.rev.Compare(b.rev); c != 0 {
			return c
		}
		return cmp.Compare(b2i(a.tomb), b2i(b.tomb))
	})
	sw := newTableWriter(bw, off)
	var skey []byte
	for _, s := range scheds {
		skey = scheduleKey(skey[:0], s.becomes, s.rev, s.tomb)
		if err := sw.add(skey, s.user); err != nil {
			return err
		}
	}
	schedRef, off, err := sw.finish()
	if err != nil {
		return err
	}
	slices.SortFunc(leases, func(a, b leased) int {
		if a.lease != b.lease {
			return cmp.Compare(a.lease, b.lease)
		}
		return bytes.Compare(a.key, b.key)
	})
	lw := newTableWriter(bw, off)
	for _, l := range leases {
		if err := lw.add(append(binary.BigEndian.AppendUint64(nil, uint64(l.lease)), l.key...), nil); err != nil {
			return err
		}
	}
	leasesRef, _, err := lw.finish()
	if err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	h := make([]byte, baseHeaderSize)
	copy(h, baseMagic)
	le := binary.LittleEndian
	le.PutUint32(h[8:], baseVersion)
	le.PutUint64(h[16:], uint64(rev))
	le.PutUint64(h[24:], uint64(compacted))
	le.PutUint64(h[32:], uint64(keys))
	le.PutUint64(h[40:], uint64(live))
	copy(h[48:64], token[:])
	for i, r := range []tableRef{entriesRef, schedRef, leasesRef} {
		p := h[64+24*i:]
		le.PutUint64(p, uint64(r.indexOff))
		le.PutUint64(p[8:], uint64(r.indexLen))
		le.PutUint64(p[16:], uint64(r.count))
	}
	le.PutUint64(h[baseHeaderUsed:], xxhash.Sum64(h[:baseHeaderUsed]))
	if _, err := f.WriteAt(h, 0); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	closed = true
	if err := f.Close(); err != nil {
		fsys.Remove(tmp)
		return err
	}
	if err := fsys.Rename(tmp, path); err != nil {
		fsys.Remove(tmp)
		return err
	}
	return fsys.SyncDir(filepath.Dir(path))
}
