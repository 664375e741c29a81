package wal

import (
	"encoding/binary"
	"fmt"
	"os"
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

// preallocator prepares the next segment file off the hot path: it creates
// a temporary file, fills it to the segment size (with zeros, unless
// disabled) and fdatasyncs it, so that appends into it overwrite allocated,
// written blocks and fdatasync has no metadata to flush. At most one file
// is prepared ahead.
type preallocator struct {
	fs       vfs.FS
	dir      string
	size     int64
	zeroFill bool

	ready chan preparedFile // capacity 1; the prepared file
	stop  chan struct{}
	done  chan struct{}
	n     int // files prepared so far; owned by run
}

type preparedFile struct {
	f   vfs.File
	err error
}

// tmpSuffix ends the names of prepared segment files. Each prepared file
// gets a fresh name, so the preallocator never touches a file the writer
// has taken but not yet renamed. Open removes any left behind by a crash.
const tmpSuffix = ".wal.tmp"

func startPreallocator(fs vfs.FS, dir string, size int64, zeroFill bool) *preallocator {
	p := &preallocator{
		fs: fs, dir: dir, size: size, zeroFill: zeroFill,
		ready: make(chan preparedFile, 1),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	go p.run()
	return p
}

func (p *preallocator) run() {
	defer close(p.done)
	for {
		f, err := p.prepare()
		select {
		case p.ready <- preparedFile{f, err}:
		case <-p.stop:
			if f != nil {
				f.Close()
			}
			return
		}
		if err != nil {
			return // the taker sees the error; no retry loop on a failing disk
		}
	}
}

// prepare builds one temporary segment file.
func (p *preallocator) prepare() (vfs.File, error) {
	p.n++
	path := filepath.Join(p.dir, fmt.Sprintf("prealloc-%d%s", p.n, tmpSuffix))
	f, err := p.fs.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	if err := fillFile(f, p.size, p.zeroFill, p.stop); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// fillFile reserves size bytes for f. With zeroFill it writes zeros and
// fdatasyncs, so later appends are plain overwrites.
func fillFile(f vfs.File, size int64, zeroFill bool, stop <-chan struct{}) error {
	if err := f.Preallocate(0, size); err != nil {
		return err
	}
	if !zeroFill {
		return nil
	}
	const chunk = 1 << 20
	zero := make([]byte, chunk)
	for off := int64(0); off < size; off += chunk {
		select {
		case <-stop:
			return fmt.Errorf("wal: preallocation stopped")
		default:
		}
		n := int64(chunk)
		if size-off < n {
			n = size - off
		}
		if _, err := f.WriteAt(zero[:n], off); err != nil {
			return err
		}
	}
	return f.Sync()
}

// take returns the prepared file, waiting for it if needed.
func (p *preallocator) take() (vfs.File, error) {
	pf, ok := <-p.ready
	if !ok {
		return nil, fmt.Errorf("wal: preallocator closed")
	}
	return pf.f, pf.err
}

func (p *preallocator) close() {
	close(p.stop)
	<-p.done
	select {
	case pf := <-p.ready:
		if pf.f != nil {
			pf.f.Close()
			_ = p.fs.Remove(pf.f.Name())
		}
	default:
	}
}

// removeTempFiles deletes prepared segment files left by a crash.
func removeTempFiles(fs vfs.FS, dir string) error {
	ents, err := fs.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), tmpSuffix) {
			if err := fs.Remove(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}
