package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/strata-db/strata/vfs"
)

// CorruptError reports a record that failed validation. It matches
// ErrCorrupt with errors.Is and names the file and the byte offset.
type CorruptError struct {
	File   string
	Offset int64
	Reason string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("wal: corrupt record in %s at offset %d: %s", e.File, e.Offset, e.Reason)
}

func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// scanResult describes one scanned segment.
type scanResult struct {
	header segmentHeader
	// tail is the offset just past the last record of the last complete
	// unit: where the next append goes.
	tail int64
	// lastBatch is the batch number of the last complete record.
	lastBatch uint64
	// torn is set when bytes after tail were discarded as a torn write.
	torn *tornTail
}

type tornTail struct {
	offset int64  // where the discarded bytes start (== tail)
	reason string // what was found there
}

// segmentSource reads one segment through a window that slides forward
// over the file a chunk at a time. A segment is 64 MiB, often mostly the
// zeros after the log's end: read whole into a fresh buffer, it cost more
// in page faults on the buffer than the scan of its records did.
type segmentSource struct {
	r    io.ReaderAt
	path string
	size int64
	buf  []byte // the file's bytes [base, base+len(buf))
	base int64
	err  error // the first read error: the scan stops and returns it
	// chunk is how much one read fetches at least: scanChunk, except in
	// the tests that compare scans through windows of every size.
	chunk int
}

// scanChunk is how much of a segment one read fetches.
const scanChunk = 1 << 20

// newSegmentSource returns a source reading the size bytes of r, which
// holds the segment at path, a chunk at a time into buf.
func newSegmentSource(r io.ReaderAt, path string, size int64, chunk int, buf []byte) *segmentSource {
	return &segmentSource{r: r, path: path, size: size, buf: buf[:0], chunk: max(chunk, 1)}
}

// openSegment opens the segment at path for a scan; close releases it.
func openSegment(fs vfs.FS, path string, buf []byte) (src *segmentSource, close func(), err error) {
	f, err := fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, nil, err
	}
	size, err := f.Size()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return newSegmentSource(f, path, size, scanChunk, buf), func() { f.Close() }, nil
}

// bytesAt returns the file's bytes [off, off+n), fewer where the file
// ends. The slice stays valid until a later call moves the window; moved,
// if not nil, runs just before it does. A read error is kept in s.err and
// returned.
func (s *segmentSource) bytesAt(off int64, n int, moved func()) ([]byte, error) {
	end := min(off+int64(n), s.size)
	if off >= end {
		return nil, s.err
	}
	if off >= s.base && end <= s.base+int64(len(s.buf)) {
		return s.buf[off-s.base : end-s.base], nil
	}
	if s.err != nil {
		return nil, s.err
	}
	if moved != nil {
		moved()
	}
	// Keep what the window already holds from off on, then read a chunk
	// past what was asked (or to the end of the file).
	want := int(min(max(end-off, int64(s.chunk)), s.size-off))
	kept := 0
	if off >= s.base && off < s.base+int64(len(s.buf)) {
		kept = copy(s.buf[:cap(s.buf)], s.buf[off-s.base:])
	}
	if cap(s.buf) < want {
		nb := make([]byte, want)
		copy(nb, s.buf[:kept])
		s.buf = nb
	}
	s.buf, s.base = s.buf[:want], off
	if _, err := s.r.ReadAt(s.buf[kept:], off+int64(kept)); err != nil && !errors.Is(err, io.EOF) {
		s.buf, s.err = s.buf[:0], fmt.Errorf("wal: read %s: %w", s.path, err)
		return nil, s.err
	}
	return s.buf[off-s.base : end-s.base], nil
}

// record decodes the record at off (see decodeRecord), reading as much of
// the file as its length word asks for. A read error is returned as is,
// with s.err set; every other error is about the bytes.
func (s *segmentSource) record(off int64, moved func()) (Record, error) {
	h, err := s.bytesAt(off, headerSize, moved)
	if err != nil {
		return Record{}, err
	}
	n := len(h)
	if len(h) >= 8 {
		if l := int(binary.LittleEndian.Uint32(h[0:4])); l <= MaxRecordSize {
			n = headerSize + padded(l)
		}
	}
	b, err := s.bytesAt(off, n, moved)
	if err != nil {
		return Record{}, err
	}
	return decodeRecord(b)
}

// firstNonZero returns the offset of the first nonzero byte at or after
// off, or -1.
func (s *segmentSource) firstNonZero(off int64) (int64, error) {
	for off < s.size {
		b, err := s.bytesAt(off, s.chunk, nil)
		if err != nil {
			return 0, err
		}
		if i := firstNonZero(b); i >= 0 {
			return off + int64(i), nil
		}
		off += int64(len(b))
	}
	return -1, nil
}

// readSegmentHeader reads and decodes the header record at the start of
// the segment at path, reading only as much of the file as the record
// takes (a segment is 64 MiB; its header a few dozen bytes): a source
// whose reads are a page, grown by record to what the length word says.
func readSegmentHeader(fs vfs.FS, path string) (Record, error) {
	f, err := fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return Record{}, err
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return Record{}, err
	}
	src := newSegmentSource(f, path, size, 4096, nil)
	rec, err := src.record(0, nil)
	if src.err != nil {
		return Record{}, src.err
	}
	if err != nil || rec.Type != typeSegment {
		return Record{}, &CorruptError{File: path, Offset: 0, Reason: "missing segment header"}
	}
	return rec, nil
}

// scanSegment decodes the records of the segment src reads and calls fn
// for each record of every complete unit, in order, with its offset. The
// segment header record is checked against the file name but not passed
// to fn.
//
// Where the records stop before the end of the data, what follows decides
// between a torn tail and corruption:
//   - In a segment that is not the last, everything was fdatasync'd before
//     the next segment was created, so the rest must be zeros. Anything
//     else is corruption.
//   - In the last segment, bytes after the last complete unit may be a
//     write torn by a crash, which recovery discards. But the WAL writes
//     batch b+1 only after batch b is durable, so a valid record from a
//     batch two or more past the last good one proves the bad bytes were
//     durable once: that is corruption, not a tear, and scanning refuses.
//
// Records that are valid but belong to a unit whose closing record is
// missing are discarded with the torn tail: such a unit was never
// acknowledged.
func scanSegment(src *segmentSource, info segmentInfo, last bool, fn func(off int64, rec Record) error) (scanResult, error) {
	var res scanResult
	path := src.path
	name := filepath.Base(path)
	corrupt := func(off int64, format string, a ...any) error {
		return &CorruptError{File: path, Offset: off, Reason: fmt.Sprintf(format, a...)}
	}

	// The header record is written and synced before the segment is
	// renamed into place, so it is never torn.
	rec, err := src.record(0, nil)
	if src.err != nil {
		return res, src.err
	}
	if err != nil {
		return res, corrupt(0, "segment header: %v", err)
	}
	if rec.Type != typeSegment {
		return res, corrupt(0, "first record is %s, want segment header", rec.Type)
	}
	h, err := parseSegmentHeader(rec.Data)
	if err != nil {
		return res, corrupt(0, "%v", err)
	}
	if h.seq != info.seq || h.firstIndex != info.firstIndex {
		return res, corrupt(0, "header says segment %d first index %d, but the file is named %s", h.seq, h.firstIndex, name)
	}
	res.header = h
	off := int64(rec.StoredSize)
	res.tail, res.lastBatch = off, rec.Batch

	// Records of the unit in progress, delivered when its last record
	// arrives. Their payloads point into the window until it moves, when
	// they are copied out.
	type pending struct {
		off int64
		rec Record
	}
	var unit []pending
	keep := func() {
		for i := range unit {
			if !unit[i].rec.Compressed {
				unit[i].rec.Data = bytes.Clone(unit[i].rec.Data)
			}
		}
	}
	var stopErr error
	for off < src.size {
		rec, err := src.record(off, keep)
		if src.err != nil {
			return res, src.err
		}
		if err != nil {
			stopErr = err
			break
		}
		if rec.Type == typeSegment {
			return res, corrupt(off, "segment header in the middle of a segment")
		}
		unit = append(unit, pending{off, rec})
		off += int64(rec.StoredSize)
		if rec.unitEnd {
			for _, p := range unit {
				if err := fn(p.off, p.rec); err != nil {
					return res, err
				}
			}
			unit = unit[:0]
			res.tail, res.lastBatch = off, rec.Batch
		}
	}
	if stopErr == nil && len(unit) == 0 {
		return res, nil // clean end of data at a unit boundary
	}

	// Records stopped at res.tail (a bad record, zeros, or an unfinished
	// unit). Decide what the rest of the file is. badOff is where decoding
	// failed, or the start of the unfinished unit.
	at := res.tail
	badOff, reason := at, "unit without its closing record"
	if stopErr != nil {
		badOff, reason = off, stopErr.Error()
	}
	zeroStop := errors.Is(stopErr, errZeroHeader) && len(unit) == 0
	if zeroStop {
		nz, err := src.firstNonZero(off)
		if err != nil {
			return res, err
		}
		if nz < 0 {
			return res, nil // the unwritten, zero-filled rest of the segment
		}
		if !last {
			return res, corrupt(nz, "data after the end of the log in a completed segment")
		}
	}
	if !last {
		return res, corrupt(badOff, "%s", reason)
	}
	laterOff, b, ok, err := src.findLaterBatch(at+recordAlign, res.lastBatch+2)
	if err != nil {
		return res, err
	}
	if ok {
		return res, corrupt(badOff, "%s, but a durable record of batch %d follows at offset %d", reason, b, laterOff)
	}
	res.torn = &tornTail{offset: at, reason: fmt.Sprintf("%s at offset %d", reason, badOff)}
	return res, nil
}

// findLaterBatch looks for a valid record at any aligned offset from start
// whose batch number is at least minBatch. Cheap field checks run before
// the checksum, so scanning junk costs little.
func (s *segmentSource) findLaterBatch(start int64, minBatch uint64) (int64, uint64, bool, error) {
	for p := start; p+headerSize <= s.size; p += recordAlign {
		h, err := s.bytesAt(p, headerSize, nil)
		if err != nil {
			return 0, 0, false, err
		}
		typ := RecordType(h[4])
		if typ < TypeEntry || typ > TypeSnapshot || h[5]&^flagsKnown != 0 || h[6] != 0 || h[7] != 0 {
			continue
		}
		if binary.LittleEndian.Uint64(h[8:16]) < minBatch {
			continue
		}
		rec, err := s.record(p, nil)
		if s.err != nil {
			return 0, 0, false, s.err
		}
		if err == nil {
			return p, rec.Batch, true, nil
		}
	}
	return 0, 0, false, nil
}

// zeroBlock is compared against a segment's zero-filled rest a block at
// a time: a bytes.Equal runs at memory speed, where a loop over bytes
// took longer than reading the segment from the page cache.
var zeroBlock [4096]byte

// firstNonZero returns the index of the first nonzero byte of b, or -1.
func firstNonZero(b []byte) int {
	off := 0
	for len(b)-off >= len(zeroBlock) && bytes.Equal(b[off:off+len(zeroBlock)], zeroBlock[:]) {
		off += len(zeroBlock)
	}
	for i, c := range b[off:] {
		if c != 0 {
			return off + i
		}
	}
	return -1
}
