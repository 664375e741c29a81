package wal

import (
	"fmt"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/vfs"
)

// Position locates a record on disk.
type Position struct {
	File   string // segment path
	Offset int64  // byte offset of the record's header
}

// TornTail describes bytes at the end of the last segment that Open would
// discard as a write torn by a crash.
type TornTail struct {
	Position
	Reason string
}

// Iterate reads every segment in dir, oldest first, without locking or
// changing anything, and calls fn for each record of every complete unit
// (segment headers excluded). It validates exactly as Open does: it fails
// with an error matching ErrCorrupt, naming the file and offset, where Open
// would refuse. A torn tail, which Open would truncate, is returned as
// TornTail rather than as an error. fs may be nil for the OS file system.
func Iterate(fs vfs.FS, dir string, fn func(pos Position, rec Record) error) (*TornTail, error) {
	if fs == nil {
		fs = vfs.Default
	}
	segs, err := listSegments(fs, dir)
	if err != nil {
		return nil, fmt.Errorf("wal: %s: %w", dir, err)
	}
	if len(segs) == 0 {
		return nil, fmt.Errorf("%w in %s", ErrNotFound, dir)
	}
	var buf []byte
	var torn *TornTail
	for i, seg := range segs {
		src, closeSeg, err := openSegment(fs, seg.path, buf)
		if err != nil {
			return nil, err
		}
		res, err := scanSegment(src, seg, i == len(segs)-1, func(off int64, rec Record) error {
			return fn(Position{File: seg.path, Offset: off}, rec)
		})
		buf = src.buf
		closeSeg()
		if err != nil {
			return nil, err
		}
		if res.torn != nil {
			torn = &TornTail{Position: Position{File: seg.path, Offset: res.torn.offset}, Reason: res.torn.reason}
		}
	}
	return torn, nil
}

// DecodeEntry decodes a TypeEntry record's payload.
func DecodeEntry(rec Record) (*raftpb.Entry, error) {
	if rec.Type != TypeEntry {
		return nil, fmt.Errorf("wal: record is %s, not entry", rec.Type)
	}
	e := &raftpb.Entry{}
	if err := proto.Unmarshal(rec.Data, e); err != nil {
		return nil, fmt.Errorf("wal: decode entry: %w", err)
	}
	return e, nil
}

// DecodeState decodes a TypeState record's payload.
func DecodeState(rec Record) (*raftpb.HardState, error) {
	if rec.Type != TypeState {
		return nil, fmt.Errorf("wal: record is %s, not state", rec.Type)
	}
	st := &raftpb.HardState{}
	if err := proto.Unmarshal(rec.Data, st); err != nil {
		return nil, fmt.Errorf("wal: decode hard state: %w", err)
	}
	return st, nil
}

// DecodeSnapshot decodes a TypeSnapshot record's payload.
func DecodeSnapshot(rec Record) (Snapshot, error) {
	if rec.Type != TypeSnapshot {
		return Snapshot{}, fmt.Errorf("wal: record is %s, not snapshot", rec.Type)
	}
	return decodeSnapshot(rec.Data)
}

// LastSnapshot returns the newest snapshot marker in dir, or the zero
// Snapshot if there is none: the position Open should start reading from.
// It reads the segments newest first and stops at the first that holds a
// marker: usually the last segment alone, a few when entries are large and
// a segment holds less than a snapshot interval. Older segments are not
// read, as Open does not read them either: what they hold precedes the
// snapshot. What it reads it validates as Open does. It reads without
// locking; fs may be nil for the OS file system.
func LastSnapshot(fs vfs.FS, dir string) (Snapshot, error) {
	if fs == nil {
		fs = vfs.Default
	}
	segs, err := listSegments(fs, dir)
	if err != nil {
		return Snapshot{}, fmt.Errorf("wal: %s: %w", dir, err)
	}
	if len(segs) == 0 {
		return Snapshot{}, fmt.Errorf("%w in %s", ErrNotFound, dir)
	}
	var buf []byte
	for i := len(segs) - 1; i >= 0; i-- {
		seg := segs[i]
		src, closeSeg, err := openSegment(fs, seg.path, buf)
		if err != nil {
			return Snapshot{}, err
		}
		var last Snapshot
		found := false
		_, err = scanSegment(src, seg, i == len(segs)-1, func(off int64, rec Record) error {
			if rec.Type != TypeSnapshot {
				return nil
			}
			s, err := decodeSnapshot(rec.Data)
			if err != nil {
				return &CorruptError{File: seg.path, Offset: off, Reason: err.Error()}
			}
			last, found = s, true
			return nil
		})
		buf = src.buf
		closeSeg()
		if err != nil {
			return Snapshot{}, err
		}
		if found {
			return last, nil
		}
	}
	return Snapshot{}, nil
}

// ReadMetadata returns the metadata stored in the header of the oldest
// segment in dir (every segment carries the same metadata).
func ReadMetadata(fs vfs.FS, dir string) ([]byte, error) {
	if fs == nil {
		fs = vfs.Default
	}
	segs, err := listSegments(fs, dir)
	if err != nil {
		return nil, fmt.Errorf("wal: %s: %w", dir, err)
	}
	if len(segs) == 0 {
		return nil, fmt.Errorf("%w in %s", ErrNotFound, dir)
	}
	rec, err := readSegmentHeader(fs, segs[0].path)
	if err != nil {
		return nil, err
	}
	h, err := parseSegmentHeader(rec.Data)
	if err != nil {
		return nil, &CorruptError{File: segs[0].path, Offset: 0, Reason: err.Error()}
	}
	return h.metadata, nil
}
