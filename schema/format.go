package schema

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"

	"github.com/strata-db/strata/pagestore"
)

// Format is the format of a database file.
type Format string

const (
	// FormatUnknown is neither format.
	FormatUnknown Format = ""
	// FormatStrata is Strata's page store (member/snap/db, or a snapshot
	// in Strata's format).
	FormatStrata Format = "strata"
	// FormatEtcd is etcd's bbolt file (member/snap/db of etcd, or an etcd
	// snapshot.db).
	FormatEtcd Format = "etcd"
)

// Where a bbolt file identifies itself: page 0 is a meta page, whose
// 16-byte page header is followed by the magic, the format version and the
// page size, each u32 little-endian (bbolt's on-disk format, see package
// etcdsnap).
const (
	BoltMagic          uint32 = 0xED0CDAED
	BoltMagicOffset           = 16
	BoltPageSizeOffset        = 24
)

// HeaderSize is how many leading bytes of a file Detect and PageSize
// look at.
const HeaderSize = 64

// Detect names the format of a database file from its first bytes (at
// least HeaderSize of them for a sure answer).
func Detect(head []byte) Format {
	if len(head) >= BoltMagicOffset+4 && binary.LittleEndian.Uint32(head[BoltMagicOffset:]) == BoltMagic {
		return FormatEtcd
	}
	if len(head) >= pagestore.MagicOffset+4 && binary.LittleEndian.Uint32(head[pagestore.MagicOffset:]) == pagestore.Magic {
		return FormatStrata
	}
	return FormatUnknown
}

// DetectFile reads the first bytes of the file at path and names its
// format. A file too short to tell is FormatUnknown, not an error.
func DetectFile(path string) (Format, error) {
	f, err := os.Open(path)
	if err != nil {
		return FormatUnknown, err
	}
	defer f.Close()
	head := make([]byte, HeaderSize)
	n, err := io.ReadFull(f, head)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return FormatUnknown, fmt.Errorf("schema: read the header of %s: %w", path, err)
	}
	return Detect(head[:n]), nil
}

// PageSize returns the page size a file of format f names in its header
// (0 if head is too short or the format unknown); the caller validates it.
func PageSize(f Format, head []byte) int {
	off := -1
	switch f {
	case FormatEtcd:
		off = BoltPageSizeOffset
	case FormatStrata:
		off = pagestore.PageSizeOffset
	}
	if off < 0 || len(head) < off+4 {
		return 0
	}
	return int(binary.LittleEndian.Uint32(head[off:]))
}

// MagicOffset is where format f keeps its magic number, for messages.
func MagicOffset(f Format) int {
	if f == FormatEtcd {
		return BoltMagicOffset
	}
	return pagestore.MagicOffset
}
