package pagestore

import (
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/strata-db/strata/vfs"
)

// Options configures Open. The zero value (or nil) is a durable database
// with no quota, mapped with DefaultMaxMapSize.
type Options struct {
	// FS is the file system all I/O goes through. Default vfs.Default.
	// Tests pass a vfs.FaultFS to inject errors and crashes.
	FS vfs.FS

	// MaxInUseBytes is the quota on bytes in use: pages reachable from the
	// latest commit (data, branch, freelist log and meta pages), not the
	// file size. A commit that adds data and would end above it fails with
	// ErrNoSpace; reads and delete-only transactions always work, and
	// deleting data makes room again without a defrag. 0 (default) means
	// no quota. Set it from etcd's --quota-backend-bytes.
	MaxInUseBytes int64

	// NoSync skips every fdatasync. Default false. Only for tests, bulk
	// loads followed by DB.Sync, and benchmarks of everything but the
	// disk: a crash can then lose or corrupt recent commits.
	NoSync bool

	// InitialMmapSize is the size in bytes the file is grown to when it
	// is created, so the first gigabytes of growth need no ftruncate.
	// Default 0 (grow on demand). The mapping itself is always
	// MaxMapSize; the name is kept from bbolt for familiarity.
	InitialMmapSize int64

	// MaxMapSize is the virtual address range mapped at Open, in bytes;
	// the file can never grow past it (commits fail with ErrMapFull).
	// It costs address space only, not memory. Default
	// DefaultMaxMapSize (64 GiB). Raise it for larger databases; lower it
	// only where address space is scarce.
	MaxMapSize int64

	// Preallocate starts a background goroutine that keeps a zero-filled,
	// synced region (1/16 of the database, 1 MiB to 64 MiB) beyond the
	// data, so commits overwrite initialized blocks and their fdatasync
	// need not also commit file-system metadata (about 2x cheaper on an
	// idle ext4 disk here, see prealloc.go). Default false: it costs a
	// second write of every new page, and on a busy disk its own
	// fdatasyncs delayed commits more than they saved. Try it on
	// dedicated disks with append-heavy load.
	Preallocate bool

	// StrictMode runs the full invariant checker (Tx.Check) after every
	// commit, under the write lock; a failure is returned from Commit
	// wrapping ErrCorrupt. It costs O(database size) per commit: use it in
	// tests and when chasing corruption, never in production.
	StrictMode bool

	// ReadOnly opens an existing file for reading only, for offline tools
	// (stratautl db check, wal verify, snapshot status). The file is
	// opened O_RDONLY and never written, created, initialised, grown or
	// truncated; write transactions fail with ErrReadOnly. It takes a
	// shared lock, so it fails with ErrDatabaseLocked while a writer (a
	// running server) has the file open, and a writer cannot open the
	// file while it is held: reading pages a live writer may be reusing
	// would report corruption that is not there. A file too short to hold
	// a database, or with no valid meta page, is an error here rather than
	// an interrupted create. Default false.
	ReadOnly bool

	// Logger receives rare events (recovery choices, failed syncs,
	// truncation). Default: discard.
	Logger *slog.Logger

	// NoCompression stores every value as given. By default a value of
	// 512 bytes or more is stored compressed (S2; zstd from 32 KiB) when
	// that saves at least an eighth of it; readers always get the value
	// as it was put. Files written either way read the same.
	NoCompression bool

	// OnCommit, if set, is called after each commit that published a new
	// state, with how long its phases took, on the committing goroutine
	// with the write lock held: it must be quick and must not use the DB.
	// The server exports the phases under etcd's bbolt commit metrics.
	OnCommit func(CommitTimes)
}

// CommitTimes are the phases of one commit, named after bbolt's
// transaction statistics so that they map onto etcd's metrics.
type CommitTimes struct {
	// Rebalance is the time spent merging underfull nodes of the changed
	// B+trees (bbolt's RebalanceTime).
	Rebalance time.Duration
	// Spill is the time spent splitting the changed nodes and encoding
	// them into new pages, bucket headers included (bbolt's SpillTime).
	Spill time.Duration
	// Write is the time spent writing the dirty pages, the fdatasync, and
	// writing and syncing the meta page (bbolt's WriteTime covers the same
	// steps). The free-list record is encoded before it, untimed, as
	// bbolt's free-list commit is.
	Write time.Duration
	// Total is the whole commit.
	Total time.Duration
}

// DefaultMaxMapSize is the default Options.MaxMapSize.
const DefaultMaxMapSize int64 = 64 << 30

func (o *Options) withDefaults() Options {
	var r Options
	if o != nil {
		r = *o
	}
	if r.FS == nil {
		r.FS = vfs.Default
	}
	if r.MaxMapSize <= 0 {
		r.MaxMapSize = DefaultMaxMapSize
	}
	if r.Logger == nil {
		r.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return r
}

var osPageSize = os.Getpagesize()
