// Package vfs is the small file-system interface through which Strata's
// storage packages (wal/, pagestore/) do all of their file I/O.
//
// Production code uses Default, a thin layer over the os package and
// golang.org/x/sys/unix. Tests wrap it with a FaultFS (see fault.go) to
// inject short writes, torn writes, fsync failures and ENOSPC at chosen
// points, without mocking anything else: the bytes still land in real files.
//
// The interface is deliberately narrow. Every method that can reach the disk
// is here, so a fault injector sees every I/O boundary; helpers that only
// compute (path joins, name parsing) stay in the calling package.
package vfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// File is an open file. Sync is fdatasync(2): it makes the file's data and
// the metadata needed to read it back (its size) durable, which is what both
// the WAL and the page store need; it does not flush timestamps.
type File interface {
	io.Reader
	io.ReaderAt
	io.Writer
	io.WriterAt
	io.Seeker
	io.Closer

	// Name is the path the file was opened with.
	Name() string
	// Sync is fdatasync.
	Sync() error
	// Truncate changes the file's size.
	Truncate(size int64) error
	// Size returns the current file size.
	Size() (int64, error)
	// Preallocate reserves [off, off+n) on disk without changing the
	// apparent size where the file system supports it (fallocate with
	// FALLOC_FL_KEEP_SIZE), falling back to extending the file with zeros.
	Preallocate(off, n int64) error
	// Fd returns the OS file descriptor, for mmap and advisory calls. Fault
	// injection does not apply to I/O done through the descriptor directly.
	Fd() uintptr
}

// FS is a file system.
type FS interface {
	// OpenFile opens a file with os.OpenFile semantics.
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	// Remove removes a file or an empty directory.
	Remove(name string) error
	// Rename renames a file. Callers fsync the parent directory afterwards.
	Rename(oldname, newname string) error
	// MkdirAll creates a directory and its parents.
	MkdirAll(dir string, perm os.FileMode) error
	// ReadDir lists a directory, sorted by name.
	ReadDir(dir string) ([]os.DirEntry, error)
	// Stat describes a path.
	Stat(name string) (os.FileInfo, error)
	// SyncDir fsyncs a directory, making creates, renames and removes in it
	// durable.
	SyncDir(dir string) error
	// Lock takes an exclusive advisory lock (flock) on name, creating it if
	// needed. It fails at once with ErrLocked if another process holds it.
	Lock(name string) (io.Closer, error)
}

// ErrLocked is returned by Lock when another process holds the lock.
var ErrLocked = errors.New("vfs: file is locked by another process")

// Default is the operating system's file system.
var Default FS = osFS{}

type osFS struct{}

type osFile struct{ *os.File }

func (osFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) Remove(name string) error                    { return os.Remove(name) }
func (osFS) Rename(o, n string) error                    { return os.Rename(o, n) }
func (osFS) MkdirAll(dir string, perm os.FileMode) error { return os.MkdirAll(dir, perm) }
func (osFS) ReadDir(dir string) ([]os.DirEntry, error)   { return os.ReadDir(dir) }
func (osFS) Stat(name string) (os.FileInfo, error)       { return os.Stat(name) }

func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("vfs: fsync directory %s: %w", dir, err)
	}
	return nil
}

type flockCloser struct{ f *os.File }

func (c flockCloser) Close() error {
	_ = unix.Flock(int(c.f.Fd()), unix.LOCK_UN)
	return c.f.Close()
}

func (osFS) Lock(name string) (io.Closer, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, name)
		}
		return nil, fmt.Errorf("vfs: flock %s: %w", name, err)
	}
	return flockCloser{f}, nil
}

func (f osFile) Sync() error {
	for {
		err := unix.Fdatasync(int(f.File.Fd()))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "fdatasync", Path: f.File.Name(), Err: err}
		}
		return nil
	}
}

func (f osFile) Size() (int64, error) {
	fi, err := f.File.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

func (f osFile) Preallocate(off, n int64) error {
	err := unix.Fallocate(int(f.File.Fd()), unix.FALLOC_FL_KEEP_SIZE, off, n)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.ENOSYS) {
		return &os.PathError{Op: "fallocate", Path: f.File.Name(), Err: err}
	}
	// File system without fallocate (tmpfs on old kernels, some FUSE): the
	// reservation is only an optimisation, so do nothing rather than change
	// the file's apparent size behind the caller's back.
	return nil
}

// Join is filepath.Join, re-exported so callers need not import both.
func Join(elem ...string) string { return filepath.Join(elem...) }
