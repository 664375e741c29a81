package btreeidx

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/cespare/xxhash/v2"
)

// A table is a sorted run of (key, value) pairs inside a base file
// (base.go): the entries in data blocks, then an index block naming each
// data block's last key, offset and length.
//
// Block format, for data and index blocks alike:
//
//	entry*  restart-offset (u32 LE)*  restart-count (u32 LE)  xxhash64 (u64 LE)
//	entry:  shared (uvarint)  unshared (uvarint)  value-length (uvarint)
//	        key[shared:]  value
//
// A key shares its first `shared` bytes with the previous key of the
// block, except at a restart point (every tableRestartEvery entries),
// where it is whole; a seek binary-searches the restart points and walks
// at most tableRestartEvery entries. The checksum covers everything
// before it. In an index block the value is the data block's offset and
// length (uvarints).

const (
	tableBlockSize    = 16 << 10
	tableRestartEvery = 16
)

// tableRef locates a table in its file: its index block and entry count.
type tableRef struct {
	indexOff, indexLen int64
	count              int64
}

// errTableCorrupt is wrapped by every decoding failure.
var errTableCorrupt = errors.New("btreeidx: base file is corrupt")

// tableWriter writes one table, streaming, to w at offset off.
type tableWriter struct {
	w        io.Writer
	off      int64
	block    []byte
	restarts []uint32
	inBlock  int
	lastKey  []byte
	index    []byte // the index block under construction
	iRest    []uint32
	iCount   int
	iLastKey []byte
	count    int64
	started  bool
}

func newTableWriter(w io.Writer, off int64) *tableWriter {
	return &tableWriter{w: w, off: off}
}

// add appends key → value; keys must strictly ascend.
func (t *tableWriter) add(key, value []byte) error {
	if t.started && bytes.Compare(key, t.lastKey) <= 0 {
		return fmt.Errorf("btreeidx: table keys out of order: %q after %q", key, t.lastKey)
	}
	t.started = true
	t.block, t.restarts = appendTableEntry(t.block, t.restarts, t.inBlock, t.lastKey, key, value)
	t.inBlock++
	t.lastKey = append(t.lastKey[:0], key...)
	t.count++
	if len(t.block) >= tableBlockSize {
		return t.flush()
	}
	return nil
}

func appendTableEntry(block []byte, restarts []uint32, n int, prev, key, value []byte) ([]byte, []uint32) {
	shared := 0
	if n%tableRestartEvery == 0 {
		restarts = append(restarts, uint32(len(block)))
	} else {
		for shared < len(prev) && shared < len(key) && prev[shared] == key[shared] {
			shared++
		}
	}
	block = binary.AppendUvarint(block, uint64(shared))
	block = binary.AppendUvarint(block, uint64(len(key)-shared))
	block = binary.AppendUvarint(block, uint64(len(value)))
	block = append(block, key[shared:]...)
	return append(block, value...), restarts
}

func sealBlock(block []byte, restarts []uint32) []byte {
	for _, r := range restarts {
		block = binary.LittleEndian.AppendUint32(block, r)
	}
	block = binary.LittleEndian.AppendUint32(block, uint32(len(restarts)))
	return binary.LittleEndian.AppendUint64(block, xxhash.Sum64(block))
}

// flush writes the current data block and notes it in the index.
func (t *tableWriter) flush() error {
	if t.inBlock == 0 {
		return nil
	}
	b := sealBlock(t.block, t.restarts)
	if _, err := t.w.Write(b); err != nil {
		return err
	}
	var v [2 * binary.MaxVarintLen64]byte
	n := binary.PutUvarint(v[:], uint64(t.off))
	n += binary.PutUvarint(v[n:], uint64(len(b)))
	t.index, t.iRest = appendTableEntry(t.index, t.iRest, t.iCount, t.iLastKey, t.lastKey, v[:n])
	t.iCount++
	t.iLastKey = append(t.iLastKey[:0], t.lastKey...)
	t.off += int64(len(b))
	t.block, t.restarts, t.inBlock = t.block[:0], t.restarts[:0], 0
	return nil
}

// finish writes the last data block and the index block, and returns the
// table's reference and the offset after it.
func (t *tableWriter) finish() (tableRef, int64, error) {
	if err := t.flush(); err != nil {
		return tableRef{}, 0, err
	}
	b := sealBlock(t.index, t.iRest)
	if _, err := t.w.Write(b); err != nil {
		return tableRef{}, 0, err
	}
	ref := tableRef{indexOff: t.off, indexLen: int64(len(b)), count: t.count}
	return ref, t.off + int64(len(b)), nil
}

// table reads a table from its file's bytes. Every block was checked
// when the table was opened, so reads only decode.
type table struct {
	data   []byte
	blocks []tableBlock // checked data blocks
	count  int64
	// The data blocks the index names, until checkBlocks checks them,
	// and the index block's offset, for errors.
	unchecked []blockRef
	indexOff  int64
}

// blockRef is a data block as the index names it: its last key (a
// copy) and its place in the file.
type blockRef struct {
	last     []byte
	off, len int64
}

type tableBlock struct {
	last []byte // the block's last key (a copy)
	body []byte // entries and restart offsets, checked
	nres int
}

// openTableIndex checks the index block of ref and returns the table
// with its data blocks not yet checked: the table reads as empty until
// checkBlocks has checked them. name is the file's name, for errors.
func openTableIndex(name string, data []byte, ref tableRef) (*table, error) {
	idx, err := checkBlock(name, data, ref.indexOff, ref.indexLen)
	if err != nil {
		return nil, err
	}
	t := &table{data: data, count: ref.count, indexOff: ref.indexOff}
	err = idx.each(func(k, v []byte) error {
		off, a := binary.Uvarint(v)
		ln, b := binary.Uvarint(v[max(a, 0):])
		if a <= 0 || b <= 0 {
			return fmt.Errorf("%w: %s: index block at offset %d: bad block reference", errTableCorrupt, name, ref.indexOff)
		}
		t.unchecked = append(t.unchecked, blockRef{last: bytes.Clone(k), off: int64(off), len: int64(ln)})
		return nil
	}, name, ref.indexOff)
	if err != nil {
		return nil, err
	}
	return t, nil
}

// checkBlocks checks every data block the index named and makes them
// the table's.
func (t *table) checkBlocks(name string) error {
	var n int64
	blocks := make([]tableBlock, 0, len(t.unchecked))
	for _, r := range t.unchecked {
		blk, err := checkBlock(name, t.data, r.off, r.len)
		if err != nil {
			return err
		}
		c, err := blk.countEntries(name, r.off)
		if err != nil {
			return err
		}
		n += c
		blk.last = r.last
		blocks = append(blocks, blk)
	}
	if n != t.count {
		return fmt.Errorf("%w: %s: the table at offset %d holds %d entries, its header says %d", errTableCorrupt, name, t.indexOff, n, t.count)
	}
	t.blocks, t.unchecked = blocks, nil
	return nil
}

// checkBlock verifies the block at [off, off+n) of data.
func checkBlock(name string, data []byte, off, n int64) (tableBlock, error) {
	if off < 0 || n < 12 || off > int64(len(data)) || n > int64(len(data))-off {
		return tableBlock{}, fmt.Errorf("%w: %s: block at offset %d (%d bytes) is outside the file", errTableCorrupt, name, off, n)
	}
	b := data[off : off+n]
	sum := binary.LittleEndian.Uint64(b[len(b)-8:])
	b = b[:len(b)-8]
	if xxhash.Sum64(b) != sum {
		return tableBlock{}, fmt.Errorf("%w: %s: block at offset %d: checksum mismatch", errTableCorrupt, name, off)
	}
	nres := int(binary.LittleEndian.Uint32(b[len(b)-4:]))
	// Only an empty table's index block has no entries, and so no
	// restart point.
	if 4+4*nres > len(b) || nres == 0 && len(b) != 4 {
		return tableBlock{}, fmt.Errorf("%w: %s: block at offset %d: %d restart points", errTableCorrupt, name, off, nres)
	}
	return tableBlock{body: b[:len(b)-4], nres: nres}, nil
}

func (b *tableBlock) restart(i int) int {
	return int(binary.LittleEndian.Uint32(b.body[len(b.body)-4*b.nres+4*i:]))
}

func (b *tableBlock) entries() []byte { return b.body[:len(b.body)-4*b.nres] }

// decodeEntry decodes the entry at p of the block's entries, with the
// previous key prev (nil at a restart point). It returns the key (in
// buf), the value (aliasing the block) and the next position.
func decodeEntry(ents []byte, p int, prev, buf []byte) (key, value []byte, next int, ok bool) {
	shared, a := binary.Uvarint(ents[p:])
	if a <= 0 {
		return nil, nil, 0, false
	}
	p += a
	unshared, b := binary.Uvarint(ents[p:])
	if b <= 0 {
		return nil, nil, 0, false
	}
	p += b
	vlen, c := binary.Uvarint(ents[p:])
	if c <= 0 {
		return nil, nil, 0, false
	}
	p += c
	if shared > uint64(len(prev)) || unshared > uint64(len(ents)-p) || vlen > uint64(len(ents)-p)-unshared {
		return nil, nil, 0, false
	}
	key = append(append(buf[:0], prev[:shared]...), ents[p:p+int(unshared)]...)
	p += int(unshared)
	return key, ents[p : p+int(vlen)], p + int(vlen), true
}

// each calls fn on every entry of the block in order. The key is valid
// only during the call: two buffers take turns holding the current and
// the previous key, so a walk of every block at open does not allocate
// per entry.
func (b *tableBlock) each(fn func(k, v []byte) error, name string, off int64) error {
	ents := b.entries()
	var key, spare []byte
	for p := 0; p < len(ents); {
		k, v, next, ok := decodeEntry(ents, p, key, spare)
		if !ok {
			return fmt.Errorf("%w: %s: block at offset %d: bad entry at %d", errTableCorrupt, name, off, p)
		}
		if err := fn(k, v); err != nil {
			return err
		}
		key, spare, p = k, key, next
	}
	return nil
}

func (b *tableBlock) countEntries(name string, off int64) (int64, error) {
	var n int64
	err := b.each(func(k, v []byte) error { n++; return nil }, name, off)
	return n, err
}

// tableIter walks a table in key order. The key and value it returns
// are valid until the next call.
type tableIter struct {
	t     *table
	bi    int // current block
	p     int // position of the next entry in the block's entries
	key   []byte
	value []byte
	valid bool
}

func (t *table) iter() *tableIter { return &tableIter{t: t, bi: len(t.blocks)} }

// first positions the iterator at the first entry.
func (it *tableIter) first() bool {
	it.bi, it.p = 0, 0
	it.key = it.key[:0]
	return it.next()
}

// seekGE positions the iterator at the first entry with key >= target.
func (it *tableIter) seekGE(target []byte) bool {
	t := it.t
	it.bi = sort.Search(len(t.blocks), func(i int) bool { return bytes.Compare(t.blocks[i].last, target) >= 0 })
	if it.bi == len(t.blocks) {
		it.valid = false
		return false
	}
	b := &t.blocks[it.bi]
	ents := b.entries()
	// The last restart point whose key is < target; walk from there.
	r := sort.Search(b.nres, func(i int) bool {
		k, _, _, ok := decodeEntry(ents, b.restart(i), nil, nil)
		return !ok || bytes.Compare(k, target) >= 0
	})
	it.p = b.restart(max(r-1, 0))
	it.key = it.key[:0]
	for it.next() {
		if bytes.Compare(it.key, target) >= 0 {
			return true
		}
	}
	return false
}

// next moves to the following entry.
func (it *tableIter) next() bool {
	t := it.t
	for it.bi < len(t.blocks) {
		ents := t.blocks[it.bi].entries()
		if it.p < len(ents) {
			k, v, p, ok := decodeEntry(ents, it.p, it.key, it.key)
			if !ok {
				// The block was checked when the table was opened.
				panic("btreeidx: a checked base block does not decode")
			}
			it.key, it.value, it.p = k, v, p
			it.valid = true
			return true
		}
		it.bi++
		it.p = 0
		it.key = it.key[:0]
	}
	it.valid = false
	return false
}
