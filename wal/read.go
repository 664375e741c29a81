package wal

import (
	"fmt"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/vfs"
)

// logRead is the result of reading a WAL directory from a snapshot on.
type logRead struct {
	allSegs   []segmentInfo // every segment in the directory
	segs      []segmentInfo // the segments read, from the snapshot's on
	metadata  []byte
	state     *raftpb.HardState
	ents      []*raftpb.Entry
	tail      int64 // end of the last complete unit in the last segment
	lastBatch uint64
	torn      *tornTail
	// entFile is the segment the last entry came from, prevSeg the
	// segment read before the one being read.
	entFile, prevSeg string
}

// readLog reads every segment from the one holding snap to the last,
// validating each record, and collects the entries after snap.Index, the
// latest hard state, and the metadata. It changes nothing on disk.
func readLog(fs vfs.FS, dir string, snap Snapshot) (*logRead, error) {
	all, err := listSegments(fs, dir)
	if err != nil {
		return nil, fmt.Errorf("wal: %s: %w", dir, err)
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("%w in %s", ErrNotFound, dir)
	}
	// Read from the last segment whose first index is at or below the
	// snapshot index: it holds the snapshot's entry or the marker after it.
	start := -1
	for i := len(all) - 1; i >= 0; i-- {
		if all[i].firstIndex <= snap.Index {
			start = i
			break
		}
	}
	if start < 0 {
		return nil, fmt.Errorf("%w: index %d precedes the oldest segment %s", ErrSnapshotNotFound, snap.Index, all[0].path)
	}
	r := &logRead{allSegs: all, segs: all[start:], state: &raftpb.HardState{}}
	snapFound := snap.Index == 0
	var buf []byte
	for i, seg := range r.segs {
		if i > 0 {
			r.prevSeg = r.segs[i-1].path
		}
		src, closeSeg, err := openSegment(fs, seg.path, buf)
		if err != nil {
			return nil, err
		}
		last := i == len(r.segs)-1
		res, err := scanSegment(src, seg, last, func(off int64, rec Record) error {
			return r.apply(seg.path, off, rec, snap, &snapFound)
		})
		buf = src.buf
		closeSeg()
		if err != nil {
			return nil, err
		}
		if i == 0 {
			r.metadata = res.header.metadata
		}
		if last {
			r.tail, r.lastBatch, r.torn = res.tail, res.lastBatch, res.torn
		}
	}
	if !snapFound {
		return nil, fmt.Errorf("%w: index %d term %d in %s", ErrSnapshotNotFound, snap.Index, snap.Term, dir)
	}
	return r, nil
}

// apply folds one record into the read state.
func (r *logRead) apply(path string, off int64, rec Record, snap Snapshot, snapFound *bool) error {
	corrupt := func(format string, a ...any) error {
		return &CorruptError{File: path, Offset: off, Reason: fmt.Sprintf(format, a...)}
	}
	switch rec.Type {
	case TypeEntry:
		// The segment that holds the snapshot holds up to a segment of
		// entries before it, which are read past, not decoded.
		if idx, ok := entryIndex(rec.Data); ok && idx <= snap.Index {
			return nil
		}
		e := &raftpb.Entry{}
		if err := proto.Unmarshal(rec.Data, e); err != nil {
			return corrupt("entry: %v", err)
		}
		idx := e.GetIndex()
		if idx <= snap.Index {
			return nil
		}
		// A later entry at an index already seen replaces it and every
		// entry after it (a new leader overwrote the uncommitted tail). An
		// entry beyond the next index means a lost record.
		pos := idx - snap.Index - 1
		if pos > uint64(len(r.ents)) {
			prev := snap.Index
			if n := len(r.ents); n > 0 {
				prev = r.ents[n-1].GetIndex()
			}
			if r.entFile != path && r.prevSeg != "" {
				// The gap is at a segment boundary: the segment before
				// lost its last records (cut short, or damaged where it
				// looked like its end).
				return corrupt("entry index %d does not follow index %d: the previous segment %s lost the entries after "+
					"index %d (cut short, or damaged where it looked like its end); restore the member from a snapshot or a peer",
					idx, prev, r.prevSeg, prev)
			}
			return corrupt("entry index %d does not follow index %d", idx, prev)
		}
		r.ents = append(r.ents[:pos], e)
		r.entFile = path
	case TypeState:
		st := &raftpb.HardState{}
		if err := proto.Unmarshal(rec.Data, st); err != nil {
			return corrupt("hard state: %v", err)
		}
		r.state = st
	case TypeSnapshot:
		s, err := decodeSnapshot(rec.Data)
		if err != nil {
			return corrupt("%v", err)
		}
		if s.Index == snap.Index {
			if s.Term != snap.Term {
				return fmt.Errorf("%w: WAL has term %d at index %d, caller has term %d (%s offset %d)",
					ErrSnapshotMismatch, s.Term, s.Index, snap.Term, path, off)
			}
			*snapFound = true
		}
	}
	return nil
}

// entryIndex returns the Index field (number 3) of a marshaled
// raftpb.Entry without decoding the rest; ok is false if the bytes do not
// parse as far as the field.
func entryIndex(b []byte) (idx uint64, ok bool) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, false
		}
		b = b[n:]
		if num == 3 && typ == protowire.VarintType {
			v, n := protowire.ConsumeVarint(b)
			return v, n >= 0
		}
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return 0, false
		}
		b = b[n:]
	}
	return 0, true // absent: the default, 0
}
