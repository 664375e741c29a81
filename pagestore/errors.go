package pagestore

import (
	"errors"
	"fmt"
)

// Sentinel errors. Match them with errors.Is; the returned errors usually
// wrap them with the file name, page id or bucket name.
var (
	// ErrNoSpace means a commit would push the bytes in use past
	// Options.MaxInUseBytes. The transaction is rolled back; reads and
	// delete-only transactions keep working.
	ErrNoSpace = errors.New("pagestore: database space exceeded (quota)")
	// ErrMapFull means the file would grow past Options.MaxMapSize.
	ErrMapFull = errors.New("pagestore: file would exceed the mapped range (MaxMapSize)")
	// ErrCorrupt means a page or meta page failed its checksum or a
	// structural check. The wrapping error names the file and page id.
	ErrCorrupt = errors.New("pagestore: corrupt database")
	// ErrTxClosed means the transaction was already committed or rolled back.
	ErrTxClosed = errors.New("pagestore: transaction closed")
	// ErrTxNotWritable means a write was attempted in a read-only transaction.
	ErrTxNotWritable = errors.New("pagestore: transaction not writable")
	// ErrBucketNotFound means the named bucket does not exist.
	ErrBucketNotFound = errors.New("pagestore: bucket not found")
	// ErrBucketExists means CreateBucket found the bucket already there.
	ErrBucketExists = errors.New("pagestore: bucket already exists")
	// ErrBucketNameRequired means an empty bucket name was given.
	ErrBucketNameRequired = errors.New("pagestore: bucket name required")
	// ErrKeyRequired means an empty key was given to Put or Delete.
	ErrKeyRequired = errors.New("pagestore: key required")
	// ErrKeyTooLarge means the key is longer than MaxKeySize.
	ErrKeyTooLarge = errors.New("pagestore: key too large")
	// ErrValueTooLarge means the value is longer than MaxValueSize.
	ErrValueTooLarge = errors.New("pagestore: value too large")
	// ErrDatabaseLocked means another process (or another DB in this
	// process) has the file open.
	ErrDatabaseLocked = errors.New("pagestore: database locked by another process")
	// ErrReadOnly means a write transaction was asked of a DB opened with
	// Options.ReadOnly.
	ErrReadOnly = errors.New("pagestore: database opened read-only")
	// ErrDatabaseClosed means the DB was closed.
	ErrDatabaseClosed = errors.New("pagestore: database closed")
	// ErrFailed means an earlier commit failed in a way that left the
	// on-disk state unknown (the meta page could not be synced or
	// restored); the DB refuses further writes until reopened.
	ErrFailed = errors.New("pagestore: database failed, reopen required")
)

// corruptf returns an error wrapping ErrCorrupt that names the file.
func corruptf(path string, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrCorrupt, path, fmt.Sprintf(format, args...))
}

// PageError is corruption found in one page run. It matches ErrCorrupt
// with errors.Is; errors.As gives the file, the page and its byte offset.
type PageError struct {
	Path   string
	Page   uint64
	Offset int64 // Page * page size
	Reason string
}

func (e *PageError) Error() string {
	return fmt.Sprintf("%v: %s: page %d (offset %d): %s", ErrCorrupt, e.Path, e.Page, e.Offset, e.Reason)
}

func (e *PageError) Unwrap() error { return ErrCorrupt }

// corruptPage returns a *PageError for page id of a file with pages of ps
// bytes.
func corruptPage(path string, id pgid, ps int, format string, args ...any) error {
	return &PageError{Path: path, Page: uint64(id), Offset: int64(id) * int64(ps), Reason: fmt.Sprintf(format, args...)}
}
