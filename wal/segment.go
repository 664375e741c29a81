package wal

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/strata-db/strata/vfs"
)

// segmentName returns the file name of segment seq whose first raft index
// is firstIndex: both as 16 hex digits, so names sort in log order.
func segmentName(seq, firstIndex uint64) string {
	return fmt.Sprintf("%016x-%016x.wal", seq, firstIndex)
}

func parseSegmentName(name string) (seq, firstIndex uint64, ok bool) {
	if len(name) != 16+1+16+4 || !strings.HasSuffix(name, ".wal") || name[16] != '-' {
		return 0, 0, false
	}
	if _, err := fmt.Sscanf(name, "%016x-%016x.wal", &seq, &firstIndex); err != nil {
		return 0, 0, false
	}
	return seq, firstIndex, true
}

// segmentInfo is one segment file of the log.
type segmentInfo struct {
	seq        uint64
	firstIndex uint64
	path       string
}

// listSegments returns the segments in dir sorted by sequence number and
// checks that the sequence has no gaps and that first indexes never go
// down: either would mean a lost or foreign file, which must not be
// papered over.
func listSegments(fs vfs.FS, dir string) ([]segmentInfo, error) {
	ents, err := fs.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var segs []segmentInfo
	for _, e := range ents {
		seq, first, ok := parseSegmentName(e.Name())
		if !ok {
			continue
		}
		segs = append(segs, segmentInfo{seq: seq, firstIndex: first, path: filepath.Join(dir, e.Name())})
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].seq < segs[j].seq })
	for i := 1; i < len(segs); i++ {
		if segs[i].seq != segs[i-1].seq+1 {
			return nil, fmt.Errorf("%w: segment sequence gap between %s and %s", ErrCorrupt,
				filepath.Base(segs[i-1].path), filepath.Base(segs[i].path))
		}
	}
	return segs, nil
}

// segmentHeader is the payload of a segment's first record.
type segmentHeader struct {
	seq        uint64
	firstIndex uint64
	metadata   []byte
}

// Segment header payload layout (wire format, never change):
//
//	magic [8]byte "STRATAWL" | version u32 | reserved u32 | seq u64 |
//	firstIndex u64 | metadata (rest of the payload)
const segmentHeaderFixed = 8 + 4 + 4 + 8 + 8

func (h segmentHeader) marshal() []byte {
	b := make([]byte, segmentHeaderFixed+len(h.metadata))
	copy(b, segmentMagic)
	binary.LittleEndian.PutUint32(b[8:], formatVersion)
	binary.LittleEndian.PutUint64(b[16:], h.seq)
	binary.LittleEndian.PutUint64(b[24:], h.firstIndex)
	copy(b[segmentHeaderFixed:], h.metadata)
	return b
}

func parseSegmentHeader(b []byte) (segmentHeader, error) {
	if len(b) < segmentHeaderFixed || string(b[:8]) != segmentMagic {
		return segmentHeader{}, fmt.Errorf("not a Strata WAL segment header")
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != formatVersion {
		return segmentHeader{}, fmt.Errorf("unsupported WAL format version %d (this build reads %d)", v, formatVersion)
	}
	return segmentHeader{
		seq:        binary.LittleEndian.Uint64(b[16:]),
		firstIndex: binary.LittleEndian.Uint64(b[24:]),
		metadata:   append([]byte(nil), b[segmentHeaderFixed:]...),
	}, nil
}
