package pagestore

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// Packed leaves (format version 3).
//
// A leaf that fits in one page is written packed: the keys' common prefix
// and common suffix are stored once, and each element costs a 2-byte
// offset and a 1-2 byte header instead of a 16-byte element. Revision keys
// (8-byte main revision, '_', 8-byte sub revision) of one leaf share their
// high main-revision bytes and, almost always, the whole "_" + sub part,
// so a 17-byte key is stored as 2-3 bytes; with etcd's 256-byte values
// that is 14 records per 4 KiB leaf instead of 13.
//
//	32  pl       u8   prefix length
//	33  sl       u8   suffix length
//	34  ml       u8   the length of every key middle (fixed layout), or
//	                  0xff (variable layout)
//	35  reserved u8   0
//	36  offsets  (count+1) × u16, ascending; off[count] ends the data
//	    prefix   pl bytes
//	    suffix   sl bytes
//	fixed layout, when every key middle has the same length ml < 255:
//	    keys     count × (flags u8, key middle ml bytes)
//	    values   value i is bytes [off[i], off[i+1]); off[0] follows the keys
//	variable layout:
//	    records  record i is bytes [off[i], off[i+1]): uvarint(midLen<<3 |
//	             flags), key middle, value; off[0] follows the suffix
//
// Element i's key is prefix + middle + suffix; its flags are the leaf
// element flags (bucket, S2, zstd). The fixed layout, which revision keys
// get unless a leaf mixes puts and tombstones, keeps the keys together in
// a few cache lines, so a search or a scan never touches the values; it
// is never bigger than the variable one. A leaf that needs an overflow
// run (a value larger than the page) keeps the 16-byte element format of
// versions 1 and 2; readers take both.
const (
	flagLeafPacked     uint16 = 0x08
	packedOffMid              = pageHeaderSize + 2
	packedOffsets             = pageHeaderSize + 4
	packedVariable            = 0xff
	maxPackedAffix            = 255       // pl and sl are u8
	maxPackedEnd              = 1<<16 - 1 // offsets are u16
	packedFlagBits            = 3
	packedFlagMask            = 1<<packedFlagBits - 1
	maxPackedMidLen           = 1 << 20 // a sanity bound for the validator; keys are far smaller
	packedPageOverhead        = packedOffsets + 2
)

// packLeaves is false only in tests that write files as a version 2
// writer did, to test that they are still read.
var packLeaves = true

// packedLimit is the most bytes a packed leaf may take with page size ps.
func packedLimit(ps int) int { return min(ps, maxPackedEnd) }

func isLeafFlags(f uint16) bool { return f == flagLeaf || f == flagLeafPacked }

func isLeafPage(p []byte) bool { return isLeafFlags(pgFlags(p)) }

func packedAffixes(p []byte) (prefix, suffix []byte) {
	pl, sl := int(p[pageHeaderSize]), int(p[pageHeaderSize+1])
	at := packedOffsets + 2*(pgCount(p)+1)
	return p[at : at+pl : at+pl], p[at+pl : at+pl+sl : at+pl+sl]
}

// packedKeys returns the key area of a fixed-layout packed leaf and its
// middle length, or ml -1 for the variable layout.
func packedKeys(p []byte) (keys []byte, ml int) {
	if p[packedOffMid] == packedVariable {
		return nil, -1
	}
	ml = int(p[packedOffMid])
	n := pgCount(p)
	at := packedOffsets + 2*(n+1) + int(p[pageHeaderSize]) + int(p[pageHeaderSize+1])
	return p[at : at+n*(1+ml)], ml
}

// packedRecord returns element i of packed leaf p: flags, key middle,
// value, and the page offset of the value.
func packedRecord(p []byte, i int) (flags uint32, mid, v []byte, vpos int) {
	o := p[packedOffsets+2*i:]
	start, end := int(le.Uint16(o)), int(le.Uint16(o[2:]))
	if keys, ml := packedKeys(p); ml >= 0 {
		e := keys[i*(1+ml):]
		return uint32(e[0]), e[1 : 1+ml : 1+ml], p[start:end:end], start
	}
	h, w := uint64(p[start]), 1
	if h >= 0x80 {
		h, w = binary.Uvarint(p[start:end])
	}
	ml := int(h >> packedFlagBits)
	ms := start + w
	return uint32(h & packedFlagMask), p[ms : ms+ml : ms+ml], p[ms+ml : end : end], ms + ml
}

// leafValue returns the flags and the value of element i of leaf page p,
// in either format.
func leafValue(p []byte, i int) (uint32, []byte) {
	if pgFlags(p) == flagLeafPacked {
		f, _, v, _ := packedRecord(p, i)
		return f, v
	}
	f, _, v := leafElem(p, i)
	return f, v
}

// leafValuePos returns the page offset of element i's value.
func leafValuePos(p []byte, i int) int {
	if pgFlags(p) == flagLeafPacked {
		_, _, _, pos := packedRecord(p, i)
		return pos
	}
	e := p[pageHeaderSize+i*elemSize:]
	return int(le.Uint32(e[4:]) + le.Uint32(e[8:]))
}

// appendLeafKey appends element i's key to dst. For the classic format
// with an empty dst it returns the page's own bytes, without copying.
func appendLeafKey(dst, p []byte, i int) []byte {
	if pgFlags(p) != flagLeafPacked {
		if len(dst) == 0 {
			return leafKey(p, i)
		}
		return append(dst, leafKey(p, i)...)
	}
	pre, suf := packedAffixes(p)
	_, mid, _, _ := packedRecord(p, i)
	dst = append(dst, pre...)
	dst = append(dst, mid...)
	return append(dst, suf...)
}

// keySlab hands out key copies from shared chunks, so a cursor reading a
// packed leaf costs one allocation per few hundred keys. A slice it
// returns stays valid as long as anyone holds it.
type keySlab []byte

// take returns n bytes of the slab for the caller to fill.
func (s *keySlab) take(n int) []byte {
	if cap(*s)-len(*s) < n {
		*s = make([]byte, 0, max(4096, n))
	}
	start := len(*s)
	*s = (*s)[:start+n]
	return (*s)[start : start+n : start+n]
}

func (s *keySlab) leafKey(p []byte, i int) []byte {
	if pgFlags(p) != flagLeafPacked {
		return leafKey(p, i)
	}
	pre, suf := packedAffixes(p)
	n := len(pre) + len(packedMid(p, i)) + len(suf)
	return appendLeafKey(s.take(n)[:0], p, i)
}

// compareTail compares mid+suf with rest.
func compareTail(mid, suf, rest []byte) int {
	if len(rest) <= len(mid) {
		if c := bytes.Compare(mid[:len(rest)], rest); c != 0 {
			return c
		}
		if len(mid)+len(suf) > len(rest) {
			return 1
		}
		return 0
	}
	if c := bytes.Compare(mid, rest[:len(mid)]); c != 0 {
		return c
	}
	return bytes.Compare(suf, rest[len(mid):])
}

// searchLeaf returns the first element of leaf page p whose key is >= key,
// and whether that element's key is key.
func searchLeaf(p []byte, key []byte) (int, bool) {
	cnt := pgCount(p)
	if pgFlags(p) != flagLeafPacked {
		i := searchPage(p, cnt, key, 8, 0)
		return i, i < cnt && bytes.Equal(leafKey(p, i), key)
	}
	pre, suf := packedAffixes(p)
	if len(key) < len(pre) {
		if bytes.Compare(pre[:len(key)], key) >= 0 {
			return 0, false // key is below every element (a shorter prefix sorts first)
		}
		return cnt, false
	}
	switch compareShort(pre, key[:len(pre)]) {
	case 1:
		return 0, false
	case -1:
		return cnt, false
	}
	rest := key[len(pre):]
	// When key ends with the page's suffix, an element whose middle is as
	// long as key's compares as its middle alone: a revision key's 2-3
	// bytes instead of middle and suffix.
	keyMid := -1
	if len(rest) >= len(suf) && bytes.Equal(rest[len(rest)-len(suf):], suf) {
		keyMid = len(rest) - len(suf)
	}
	keys, ml := packedKeys(p)
	lo, hi, found := 0, cnt, false
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		var mid []byte
		if ml >= 0 {
			mid = keys[m*(1+ml)+1 : m*(1+ml)+1+ml]
		} else {
			mid = packedMid(p, m)
		}
		var c int
		if len(mid) == keyMid {
			c = compareShort(mid, rest[:keyMid])
		} else {
			c = compareTail(mid, suf, rest)
		}
		if c < 0 {
			lo = m + 1
		} else {
			hi, found = m, c == 0
		}
	}
	return lo, found && lo < cnt
}

// packedMid returns element i's key middle in packed leaf p.
func packedMid(p []byte, i int) []byte {
	if keys, ml := packedKeys(p); ml >= 0 {
		return keys[i*(1+ml)+1 : i*(1+ml)+1+ml]
	}
	start := int(le.Uint16(p[packedOffsets+2*i:]))
	h, w := uint64(p[start]), 1
	if h >= 0x80 {
		h, w = binary.Uvarint(p[start:])
	}
	ms := start + w
	return p[ms : ms+int(h>>packedFlagBits)]
}

// compareShort is bytes.Compare for slices of equal length, inlined for
// the few bytes of a revision key's middle.
func compareShort(a, b []byte) int {
	if len(a) > 8 {
		return bytes.Compare(a, b)
	}
	b = b[:len(a)]
	for i := range a {
		if a[i] != b[i] {
			if a[i] < b[i] {
				return -1
			}
			return 1
		}
	}
	return 0
}

// readPacked fills n's inodes from packed leaf p. The keys are rebuilt
// into one buffer; the values point into the page.
func (n *node) readPacked(p []byte) {
	cnt := pgCount(p)
	pre, suf := packedAffixes(p)
	total := cnt * (len(pre) + len(suf))
	for i := 0; i < cnt; i++ {
		_, mid, _, _ := packedRecord(p, i)
		total += len(mid)
	}
	buf := make([]byte, 0, total)
	for i := 0; i < cnt; i++ {
		f, mid, v, _ := packedRecord(p, i)
		start := len(buf)
		buf = append(append(append(buf, pre...), mid...), suf...)
		in := &n.inodes[i]
		in.flags, in.key, in.value = f, buf[start:len(buf):len(buf)], v
	}
}

// packedShape is what a packed leaf of some inodes needs.
type packedShape struct {
	pl, sl int
	ml     int // every key middle's length (fixed layout), or -1 (variable)
	size   int // bytes, header included
}

// packedLayout computes the packed shape of inodes (non-empty). The
// prefix is measured against every key, not just the first and the last:
// a leaf read from a damaged page may hold keys out of order, and the
// writer must still never cut a key shorter than prefix plus suffix.
func packedLayout(inodes []inode) packedShape {
	first := inodes[0].key
	pl, sl, minK := min(len(first), maxPackedAffix), maxPackedAffix, len(first)
	for i := range inodes {
		k := inodes[i].key
		minK = min(minK, len(k))
		pl = min(pl, commonPrefix(first, k))
		sl = min(sl, commonSuffix(first, k))
	}
	sl = min(sl, minK-pl)
	s := packedShape{pl: pl, sl: sl, ml: len(first) - pl - sl, size: packedPageOverhead + pl + sl}
	if s.ml >= packedVariable {
		s.ml = -1
	}
	for i := range inodes {
		in := &inodes[i]
		ml := len(in.key) - pl - sl
		if ml != s.ml {
			s.ml = -1
		}
		s.size += 2 + uvarintLen(uint64(ml)<<packedFlagBits|uint64(in.flags)) + ml + len(in.value)
	}
	if s.ml >= 0 {
		// The fixed layout: a flags byte per element instead of a header.
		s.size = packedPageOverhead + pl + sl
		for i := range inodes {
			s.size += 3 + s.ml + len(inodes[i].value)
		}
	}
	return s
}

// packedFit scans inodes in order and returns how many fit in a packed
// page of limit bytes (at least one), and whether all of them fit in
// maxSize bytes. It stops at the first element past max(limit, maxSize),
// so its cost is bounded by a page's worth of elements. pl+sl only
// shrinks as elements are added; when it does, the headers seen so far
// are re-measured (at most 2*maxPackedAffix times).
func packedFit(inodes []inode, limit, maxSize int) (fit int, all bool) {
	first := inodes[0].key
	pl, sl, minK := min(len(first), maxPackedAffix), maxPackedAffix, len(first)
	cut := -1
	sameLen := true
	var sumK, sumV, hdrs int
	for i := range inodes {
		in := &inodes[i]
		k := in.key
		pl = min(pl, commonPrefix(first, k))
		sl = min(sl, commonSuffix(first, k))
		minK = min(minK, len(k))
		c := pl + min(sl, minK-pl)
		if c != cut {
			cut, hdrs = c, 0
			for j := 0; j < i; j++ {
				hdrs += uvarintLen(uint64(len(inodes[j].key)-cut)<<packedFlagBits | uint64(inodes[j].flags))
			}
		}
		hdrs += uvarintLen(uint64(len(k)-cut)<<packedFlagBits | uint64(in.flags))
		sumK += len(k)
		sumV += len(in.value)
		sameLen = sameLen && len(k) == len(first)
		n := i + 1
		h := hdrs
		if sameLen && len(first)-cut < packedVariable {
			h = n // the fixed layout: one flags byte each
		}
		size := packedPageOverhead + cut + 2*n + h + sumK - n*cut + sumV
		if size <= limit || i == 0 {
			fit = n
		}
		if size > limit && size > maxSize {
			return fit, false
		}
	}
	return fit, true
}

func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

func commonSuffix(a, b []byte) int {
	n := min(len(a), len(b))
	for i := 1; i <= n; i++ {
		if a[len(a)-i] != b[len(b)-i] {
			return i - 1
		}
	}
	return n
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

// writePacked encodes leaf n, whose shape is s, into the page buf.
func (n *node) writePacked(buf []byte, id pgid, s packedShape) {
	cnt := len(n.inodes)
	putHeader(buf, id, flagLeafPacked, cnt, 0, n.b.id)
	buf[pageHeaderSize], buf[pageHeaderSize+1] = byte(s.pl), byte(s.sl)
	buf[packedOffMid], buf[packedOffMid+1] = packedVariable, 0
	first := n.inodes[0].key
	off := packedOffsets + 2*(cnt+1)
	off += copy(buf[off:], first[:s.pl])
	off += copy(buf[off:], first[len(first)-s.sl:])
	if s.ml >= 0 {
		buf[packedOffMid] = byte(s.ml)
		for i := range n.inodes {
			in := &n.inodes[i]
			buf[off] = byte(in.flags)
			off += 1 + copy(buf[off+1:], in.key[s.pl:len(in.key)-s.sl])
		}
		for i := range n.inodes {
			le.PutUint16(buf[packedOffsets+2*i:], uint16(off))
			off += copy(buf[off:], n.inodes[i].value)
		}
	} else {
		for i := range n.inodes {
			in := &n.inodes[i]
			le.PutUint16(buf[packedOffsets+2*i:], uint16(off))
			mid := in.key[s.pl : len(in.key)-s.sl]
			off += binary.PutUvarint(buf[off:], uint64(len(mid))<<packedFlagBits|uint64(in.flags))
			off += copy(buf[off:], mid)
			off += copy(buf[off:], in.value)
		}
	}
	le.PutUint16(buf[packedOffsets+2*cnt:], uint16(off))
	clear(buf[off:])
	sealPage(buf)
}

// validatePacked checks that every accessor of packed leaf p stays inside
// it: the offsets ascend within the page, the fixed layout's key area
// fits before the values, each variable record's header parses and its
// key middle fits in the record, and every element's flags are known.
func validatePacked(p []byte) error {
	n := pgCount(p)
	if pgOverflow(p) != 0 || len(p) > maxPackedEnd+1 {
		return fmt.Errorf("packed leaf with %d overflow pages", pgOverflow(p))
	}
	if n < 0 || packedOffsets+2*(n+1) > len(p) {
		return fmt.Errorf("packed leaf: element count %d does not fit", n)
	}
	pl, sl, mode := int(p[pageHeaderSize]), int(p[pageHeaderSize+1]), int(p[packedOffMid])
	data := packedOffsets + 2*(n+1) + pl + sl
	if mode != packedVariable {
		data += n * (1 + mode)
	}
	if int(le.Uint16(p[packedOffsets:])) != data || data > len(p) {
		return fmt.Errorf("packed leaf: data starts at byte %d, want %d", le.Uint16(p[packedOffsets:]), data)
	}
	badFlags := func(f uint32) bool {
		return f&^elemFlagsKnown != 0 || f&elemFlagsCompressed == elemFlagsCompressed || f&elemFlagBucket != 0 && f&elemFlagsCompressed != 0
	}
	for i := 0; i < n; i++ {
		start, end := int(le.Uint16(p[packedOffsets+2*i:])), int(le.Uint16(p[packedOffsets+2*i+2:]))
		if mode != packedVariable {
			if end < start || end > len(p) {
				return fmt.Errorf("packed leaf: value %d spans bytes [%d,%d) of a %d-byte page", i, start, end, len(p))
			}
			if f := uint32(p[data-n*(1+mode)+i*(1+mode)]); badFlags(f) {
				return fmt.Errorf("packed leaf: element %d has flags %#x", i, f)
			}
			continue
		}
		if end <= start || end > len(p) {
			return fmt.Errorf("packed leaf: element %d spans bytes [%d,%d) of a %d-byte page", i, start, end, len(p))
		}
		h, w := binary.Uvarint(p[start:end])
		if w <= 0 || h>>packedFlagBits > maxPackedMidLen {
			return fmt.Errorf("packed leaf: element %d header at byte %d does not parse", i, start)
		}
		if f := uint32(h & packedFlagMask); badFlags(f) {
			return fmt.Errorf("packed leaf: element %d has flags %#x", i, f)
		}
		if ml := int(h >> packedFlagBits); start+w+ml > end {
			return fmt.Errorf("packed leaf: element %d key of %d bytes overruns its record [%d,%d)", i, ml, start, end)
		}
	}
	return nil
}
