package wal

import (
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

// readSegment reads a whole segment file into buf (reused across calls).
func readSegment(fs vfs.FS, path string, buf []byte) ([]byte, error) {
	f, err := fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return nil, err
	}
	if int64(cap(buf)) < size {
		buf = make([]byte, size)
	}
	buf = buf[:size]
	if _, err := f.ReadAt(buf, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("wal: read %s: %w", path, err)
	}
	return buf, nil
}

// scanSegment decodes the records of one segment held in data and calls fn
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
func scanSegment(path string, data []byte, info segmentInfo, last bool, fn func(off int64, rec Record) error) (scanResult, error) {
	var res scanResult
	name := filepath.Base(path)
	corrupt := func(off int64, format string, a ...any) error {
		return &CorruptError{File: path, Offset: off, Reason: fmt.Sprintf(format, a...)}
	}

	// The header record is written and synced before the segment is
	// renamed into place, so it is never torn.
	rec, err := decodeRecord(data)
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
	off := rec.StoredSize
	res.tail, res.lastBatch = int64(off), rec.Batch

	// Records of the unit in progress, delivered when its last record
	// arrives.
	type pending struct {
		off int64
		rec Record
	}
	var unit []pending
	var stopErr error
	for off < len(data) {
		rec, err := decodeRecord(data[off:])
		if err != nil {
			stopErr = err
			break
		}
		if rec.Type == typeSegment {
			return res, corrupt(int64(off), "segment header in the middle of a segment")
		}
		unit = append(unit, pending{int64(off), rec})
		off += rec.StoredSize
		if rec.unitEnd {
			for _, p := range unit {
				if err := fn(p.off, p.rec); err != nil {
					return res, err
				}
			}
			unit = unit[:0]
			res.tail, res.lastBatch = int64(off), rec.Batch
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
		badOff, reason = int64(off), stopErr.Error()
	}
	cleanEnd := errors.Is(stopErr, errZeroHeader) && len(unit) == 0 && firstNonZero(data[off:]) < 0
	if cleanEnd {
		return res, nil // the unwritten, zero-filled rest of the segment
	}
	if !last {
		if errors.Is(stopErr, errZeroHeader) && len(unit) == 0 {
			return res, corrupt(int64(off+firstNonZero(data[off:])), "data after the end of the log in a completed segment")
		}
		return res, corrupt(badOff, "%s", reason)
	}
	if laterOff, b, ok := findLaterBatch(data, int(at)+recordAlign, res.lastBatch+2); ok {
		return res, corrupt(badOff, "%s, but a durable record of batch %d follows at offset %d", reason, b, laterOff)
	}
	res.torn = &tornTail{offset: at, reason: fmt.Sprintf("%s at offset %d", reason, badOff)}
	return res, nil
}

// findLaterBatch looks for a valid record at any aligned offset from start
// whose batch number is at least minBatch. Cheap field checks run before
// the checksum, so scanning junk costs little.
func findLaterBatch(data []byte, start int, minBatch uint64) (int, uint64, bool) {
	for p := start; p+headerSize <= len(data); p += recordAlign {
		h := data[p:]
		typ := RecordType(h[4])
		if typ < TypeEntry || typ > TypeSnapshot || h[5]&^flagsKnown != 0 || h[6] != 0 || h[7] != 0 {
			continue
		}
		if binary.LittleEndian.Uint64(h[8:16]) < minBatch {
			continue
		}
		if rec, err := decodeRecord(h); err == nil {
			return p, rec.Batch, true
		}
	}
	return 0, 0, false
}

func firstNonZero(b []byte) int {
	for i, c := range b {
		if c != 0 {
			return i
		}
	}
	return -1
}
