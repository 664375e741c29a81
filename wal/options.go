package wal

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/strata-db/strata/vfs"
)

// Defaults for Options.
const (
	// DefaultSegmentSize is etcd's segment size.
	DefaultSegmentSize = 64 << 20
	// DefaultMaxWALs is etcd's --max-wals default.
	DefaultMaxWALs = 5
	// DefaultCompressThreshold is the payload size from which entries are
	// compressed. Below it S2 rarely saves a sector and costs latency.
	DefaultCompressThreshold = 4096
)

// Errors returned by the WAL. Match them with errors.Is.
var (
	// ErrCorrupt marks a record that failed validation anywhere except a
	// torn tail. The error text names the file and offset.
	ErrCorrupt = errors.New("wal: corrupt")
	// ErrFailed is returned by every append after a write or fdatasync
	// failed. The WAL must be closed and reopened; reopening recovers
	// everything that was acknowledged.
	ErrFailed = errors.New("wal: an earlier write or sync failed; reopen the WAL")
	// ErrClosed is returned by appends after Close.
	ErrClosed = errors.New("wal: closed")
	// ErrExist is returned by Create when the directory already holds
	// segments.
	ErrExist = errors.New("wal: directory already holds a WAL")
	// ErrNotFound is returned by Open when the directory holds no WAL.
	ErrNotFound = errors.New("wal: no WAL segments found")
	// ErrSnapshotNotFound is returned by Open when the snapshot it was
	// given has no marker in the WAL.
	ErrSnapshotNotFound = errors.New("wal: snapshot not found in the WAL")
	// ErrSnapshotMismatch is returned by Open when the WAL holds a marker at
	// the snapshot's index but with another term.
	ErrSnapshotMismatch = errors.New("wal: snapshot term does not match the WAL")
	// ErrTooLarge is returned for an entry larger than MaxRecordSize.
	ErrTooLarge = errors.New("wal: record larger than MaxRecordSize")
)

// IOError is a failed write or fdatasync of a WAL file. After one the WAL
// is failed: appends return ErrFailed wrapping the IOError, whose Err is
// the operating system's error (match syscall.ENOSPC or syscall.EIO with
// errors.Is).
type IOError struct {
	Op     string // "write" or "fdatasync"
	File   string
	Offset int64 // of the write; -1 for fdatasync
	Err    error
}

func (e *IOError) Error() string {
	if e.Offset < 0 {
		return fmt.Sprintf("wal: %s %s: %v", e.Op, e.File, e.Err)
	}
	return fmt.Sprintf("wal: %s %s at offset %d: %v", e.Op, e.File, e.Offset, e.Err)
}

func (e *IOError) Unwrap() error { return e.Err }

// Options configure a WAL. The zero value is usable.
type Options struct {
	// FS does all file I/O. Default: vfs.Default. Tests pass a FaultFS.
	FS vfs.FS
	// SegmentSize is the size in bytes at which the log moves to a new
	// segment. Default: 64 MiB. A new log's first segment takes its disk
	// an eighth of this at a time, ahead of the writer; later segments
	// are allocated whole before the log moves to them. A single unit larger than it
	// gets a segment of its own that grows past this size. On a disk
	// without room for a full segment, smaller ones are used (down to
	// 1 MiB, at most half the free space) and, while not even those fit,
	// the current segment grows past this size; full-size segments resume
	// once space returns.
	SegmentSize int64
	// MaxWALs is how many segments Purge keeps. Default (0): 5. Negative
	// keeps every segment (etcd's --max-wals=0).
	MaxWALs int
	// CompressThreshold is the entry payload size in bytes from which
	// entries are S2-compressed. Default (0): 4096. Negative disables.
	CompressThreshold int
	// NoZeroFill skips writing zeros over preallocated segments. Zero-filled
	// segments make every append an overwrite of written blocks, so
	// fdatasync flushes data only (about 1.5x more syncs/s on ext4), at the
	// cost of writing each segment twice. Set it on file systems that
	// copy on write (btrfs, zfs), where overwrites gain nothing.
	NoZeroFill bool
	// GroupCommitWindow caps how long the syncer waits, under load, for
	// the writers its last batch released to append again before it
	// starts the next write (see gather): that wait is a quarter of the
	// last write-and-sync time, and at most this long. Default (0): no cap.
	// The server sets it from the disk probe so that one slow sync does not
	// stretch the next batch's wait.
	GroupCommitWindow time.Duration
	// Logger receives recovery and lifecycle messages. Default: discard.
	Logger *slog.Logger
	// Metrics, if set, observes write and fsync durations and bytes.
	Metrics *Metrics

	// Tests only. wholeSegments: a new log's first segment is allocated
	// whole too, so that every write and fdatasync of an installed
	// segment is the writer's. growAll: every segment grows, not only a
	// new log's first. onWriterWait: see preallocator.onWriterWait.
	wholeSegments, growAll bool
	onWriterWait           func(onPiece bool)
}

func (o *Options) withDefaults() Options {
	var r Options
	if o != nil {
		r = *o
	}
	if r.FS == nil {
		r.FS = vfs.Default
	}
	if r.SegmentSize <= 0 {
		r.SegmentSize = DefaultSegmentSize
	}
	if r.MaxWALs == 0 {
		r.MaxWALs = DefaultMaxWALs
	}
	if r.CompressThreshold == 0 {
		r.CompressThreshold = DefaultCompressThreshold
	}
	if r.Logger == nil {
		r.Logger = slog.New(slog.DiscardHandler)
	}
	return r
}
