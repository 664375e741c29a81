package vfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"
)

// Op names an I/O operation that a FaultFS can fail.
type Op int

const (
	OpOpen Op = iota
	OpWrite
	OpSync
	OpSyncDir
	OpTruncate
	OpPreallocate
	OpRename
	OpRemove
	OpMkdir
)

var opNames = [...]string{"open", "write", "sync", "syncdir", "truncate", "preallocate", "rename", "remove", "mkdir"}

func (o Op) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", int(o))
}

// Event describes one operation about to happen.
type Event struct {
	Op   Op
	Path string
	Off  int64 // writes and preallocations: the file offset of the first byte
	Len  int   // writes and preallocations: the number of bytes requested
}

// Fault is what a Hook injects into one operation.
type Fault struct {
	// Err is returned to the caller. Nil with Written set means a silent
	// short write, which callers must detect themselves.
	Err error
	// Written is, for writes, how many leading bytes of the request reach
	// the file before Err is returned: a short write, or with Crash a torn
	// one. Ignored for other operations.
	Written int
	// Crash simulates power loss right after this operation: every later
	// operation on the FS fails with ErrCrashed, so nothing more reaches
	// the disk. The bytes already written stay in the real file, which is
	// what a reopen after a crash sees (without fsync it could also lose
	// them; tests that care truncate files themselves).
	Crash bool
	// Delay stalls the operation this long before it runs (or fails with
	// Err): a hung device. The FaultFS's lock is not held meanwhile, so
	// other operations, and other users of the FS, go on.
	Delay time.Duration
}

// Hook is consulted before every operation. Returning nil lets it proceed.
// It is called with the FaultFS's lock held, so it must not call back into
// the FS.
type Hook func(Event) *Fault

// ErrCrashed is returned by every operation after a Fault with Crash set.
var ErrCrashed = errors.New("vfs: simulated crash")

// ENOSPC and EIO are convenient errors to inject; they match errors.Is
// against syscall.ENOSPC and syscall.EIO like the real ones.
var (
	ENOSPC error = &os.PathError{Op: "write", Path: "(injected)", Err: syscall.ENOSPC}
	EIO    error = &os.PathError{Op: "fdatasync", Path: "(injected)", Err: syscall.EIO}
)

// FaultFS wraps an FS and fails operations as its Hook says.
type FaultFS struct {
	inner FS

	mu      sync.Mutex
	hook    Hook // guarded by mu
	crashed bool // guarded by mu; set once, never cleared
}

// NewFaultFS wraps inner. A nil hook injects nothing until SetHook.
func NewFaultFS(inner FS, hook Hook) *FaultFS {
	return &FaultFS{inner: inner, hook: hook}
}

// SetHook replaces the hook.
func (fs *FaultFS) SetHook(h Hook) {
	fs.mu.Lock()
	fs.hook = h
	fs.mu.Unlock()
}

// Crashed reports whether a Crash fault has fired.
func (fs *FaultFS) Crashed() bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.crashed
}

// check consults the hook for ev and returns the fault to apply, or an
// ErrCrashed fault after a crash.
func (fs *FaultFS) check(ev Event) *Fault {
	f := fs.decide(ev)
	if f != nil && f.Delay > 0 {
		time.Sleep(f.Delay)
	}
	return f
}

func (fs *FaultFS) decide(ev Event) *Fault {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.crashed {
		return &Fault{Err: fmt.Errorf("%w: %s %s", ErrCrashed, ev.Op, ev.Path)}
	}
	if fs.hook == nil {
		return nil
	}
	f := fs.hook(ev)
	if f != nil && f.Crash {
		fs.crashed = true
		if f.Err == nil {
			f.Err = fmt.Errorf("%w: %s %s", ErrCrashed, ev.Op, ev.Path)
		}
	}
	return f
}

func (fs *FaultFS) simple(op Op, path string, do func() error) error {
	if f := fs.check(Event{Op: op, Path: path}); f != nil && f.Err != nil {
		return f.Err
	}
	return do()
}

func (fs *FaultFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	if f := fs.check(Event{Op: OpOpen, Path: name}); f != nil && f.Err != nil {
		return nil, f.Err
	}
	inner, err := fs.inner.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: inner, fs: fs}, nil
}

func (fs *FaultFS) Remove(name string) error {
	return fs.simple(OpRemove, name, func() error { return fs.inner.Remove(name) })
}

func (fs *FaultFS) Rename(o, n string) error {
	return fs.simple(OpRename, o, func() error { return fs.inner.Rename(o, n) })
}

func (fs *FaultFS) MkdirAll(dir string, perm os.FileMode) error {
	return fs.simple(OpMkdir, dir, func() error { return fs.inner.MkdirAll(dir, perm) })
}

func (fs *FaultFS) SyncDir(dir string) error {
	return fs.simple(OpSyncDir, dir, func() error { return fs.inner.SyncDir(dir) })
}

func (fs *FaultFS) ReadDir(dir string) ([]os.DirEntry, error) { return fs.inner.ReadDir(dir) }
func (fs *FaultFS) Stat(name string) (os.FileInfo, error)     { return fs.inner.Stat(name) }
func (fs *FaultFS) Lock(name string) (io.Closer, error)       { return fs.inner.Lock(name) }

type faultFile struct {
	File
	fs *FaultFS
}

func (f *faultFile) writeAt(p []byte, off int64, do func([]byte) (int, error)) (int, error) {
	flt := f.fs.check(Event{Op: OpWrite, Path: f.Name(), Off: off, Len: len(p)})
	if flt == nil {
		return do(p)
	}
	w := flt.Written
	if w < 0 {
		w = 0
	}
	if w > len(p) {
		w = len(p)
	}
	n := 0
	if w > 0 {
		var err error
		n, err = do(p[:w])
		if err != nil {
			return n, err
		}
	}
	if flt.Err == nil && n < len(p) {
		return n, nil // silent short write
	}
	return n, flt.Err
}

func (f *faultFile) Write(p []byte) (int, error) {
	off, err := f.File.Seek(0, io.SeekCurrent)
	if err != nil {
		return 0, err
	}
	return f.writeAt(p, off, f.File.Write)
}

func (f *faultFile) WriteAt(p []byte, off int64) (int, error) {
	return f.writeAt(p, off, func(b []byte) (int, error) { return f.File.WriteAt(b, off) })
}

func (f *faultFile) Sync() error {
	return f.fs.simple(OpSync, f.Name(), f.File.Sync)
}

func (f *faultFile) Truncate(size int64) error {
	return f.fs.simple(OpTruncate, f.Name(), func() error { return f.File.Truncate(size) })
}

func (f *faultFile) Preallocate(off, n int64) error {
	if flt := f.fs.check(Event{Op: OpPreallocate, Path: f.Name(), Off: off, Len: int(n)}); flt != nil && flt.Err != nil {
		return flt.Err
	}
	return f.File.Preallocate(off, n)
}
