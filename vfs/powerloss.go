package vfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// PowerLossFS is a file system whose durable state is only what was
// fsync'd, as after a power cut. It wraps a real FS (the bytes land in
// real files) and remembers what a power loss could still take back:
//
//   - for each file written, truncated or extended since its last Sync,
//     the size it had then and the bytes each write overwrote;
//   - each create, rename, remove and mkdir whose parent directory has not
//     been fsync'd (SyncDir) since, with what it replaced or removed.
//
// Crash stops every later operation (ErrCrashed), as a dead machine does;
// Recover then puts the files back to their durable state: directory
// operations are undone newest first, and every file gets back the bytes
// and size of its last Sync. Reopening the directory afterwards sees what
// a machine rebooted after a power loss may see (the worst case: every
// unsynced byte and entry lost).
//
// I/O done through a file's descriptor directly (Fd: mmap reads) is not
// tracked; callers only read through it.
type PowerLossFS struct {
	inner FS

	mu      sync.Mutex
	crashed bool
	// files: path -> what its last Sync left.
	files map[string]*durable
	// dirOps: undurable directory operations, oldest first.
	dirOps []dirOp
}

// durable is a file's state at its last Sync: its size and, for each range
// written since, the bytes that were there (nil: beyond the old size).
type durable struct {
	size int64
	undo []undoRec
}

type undoRec struct {
	off  int64
	data []byte
}

type dirOpKind int

const (
	opCreate dirOpKind = iota
	opRename
	opRemove
	opMkdir
)

type dirOp struct {
	kind     dirOpKind
	path     string // created, removed, made, or the rename's target
	from     string // the rename's source
	saved    []byte // what a remove or a rename's target held, if anything
	hadSaved bool
	savedDur *durable // the target's tracking, restored with it
}

// NewPowerLossFS wraps inner.
func NewPowerLossFS(inner FS) *PowerLossFS {
	return &PowerLossFS{inner: inner, files: map[string]*durable{}}
}

func (fs *PowerLossFS) check() error {
	if fs.crashed {
		return ErrCrashed
	}
	return nil
}

// Crash makes every later operation fail with ErrCrashed.
func (fs *PowerLossFS) Crash() {
	fs.mu.Lock()
	fs.crashed = true
	fs.mu.Unlock()
}

// Recover undoes what the crash lost and reports how many files and
// directory entries it put back. Call it after Crash, once nothing uses
// the files any more.
func (fs *PowerLossFS) Recover() (files, entries int, err error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.crashed = true
	for i := len(fs.dirOps) - 1; i >= 0; i-- {
		op := fs.dirOps[i]
		entries++
		switch op.kind {
		case opCreate:
			err = errors.Join(err, ignoreMissing(os.Remove(op.path)))
			delete(fs.files, op.path)
		case opMkdir:
			// The directory's own entry is lost, and with it everything
			// in it, however durable inside.
			err = errors.Join(err, os.RemoveAll(op.path))
			for p := range fs.files {
				if strings.HasPrefix(p, op.path+string(filepath.Separator)) {
					delete(fs.files, p)
				}
			}
		case opRename:
			if e := os.Rename(op.path, op.from); e != nil {
				err = errors.Join(err, e)
			}
			fs.files[op.from], fs.files[op.path] = fs.files[op.path], nil
			delete(fs.files, op.path)
			if op.hadSaved {
				err = errors.Join(err, os.WriteFile(op.path, op.saved, 0o600))
				if op.savedDur != nil {
					fs.files[op.path] = op.savedDur
				}
			}
		case opRemove:
			err = errors.Join(err, os.WriteFile(op.path, op.saved, 0o600))
			if op.savedDur != nil {
				fs.files[op.path] = op.savedDur
			}
		}
	}
	fs.dirOps = nil
	paths := make([]string, 0, len(fs.files))
	for p := range fs.files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		d := fs.files[p]
		if d == nil {
			continue
		}
		files++
		f, e := os.OpenFile(p, os.O_RDWR, 0)
		if e != nil {
			err = errors.Join(err, fmt.Errorf("recover %s: %w", p, e))
			continue
		}
		for i := len(d.undo) - 1; i >= 0; i-- {
			u := d.undo[i]
			if len(u.data) > 0 {
				if _, e := f.WriteAt(u.data, u.off); e != nil {
					err = errors.Join(err, e)
				}
			}
		}
		err = errors.Join(err, f.Truncate(d.size), f.Close())
	}
	fs.files = map[string]*durable{}
	return files, entries, err
}

func ignoreMissing(err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// track returns path's durable record, starting one at its current size.
// Called with mu held.
func (fs *PowerLossFS) track(path string) *durable {
	if d, ok := fs.files[path]; ok && d != nil {
		return d
	}
	st, err := os.Stat(path)
	size := int64(0)
	if err == nil {
		size = st.Size()
	}
	d := &durable{size: size}
	fs.files[path] = d
	return d
}

// saveRange records the bytes [off, off+n) of path hold before a change
// (the part below the durable size; beyond it the truncate restores).
// Called with mu held.
func (fs *PowerLossFS) saveRange(path string, off, n int64) {
	d := fs.track(path)
	end := min(off+n, d.size)
	if end <= off {
		return
	}
	buf := make([]byte, end-off)
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	k, _ := f.ReadAt(buf, off)
	d.undo = append(d.undo, undoRec{off: off, data: buf[:k]})
}

func (fs *PowerLossFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err := fs.check(); err != nil {
		return nil, err
	}
	_, statErr := os.Stat(name)
	existed := statErr == nil
	if existed && flag&os.O_TRUNC != 0 {
		st, _ := os.Stat(name)
		fs.saveRange(name, 0, st.Size())
	}
	f, err := fs.inner.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	if !existed && flag&os.O_CREATE != 0 {
		fs.dirOps = append(fs.dirOps, dirOp{kind: opCreate, path: name})
		fs.files[name] = &durable{size: 0}
	}
	return &plFile{File: f, fs: fs, path: name}, nil
}

func (fs *PowerLossFS) Remove(name string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err := fs.check(); err != nil {
		return err
	}
	st, err := os.Stat(name)
	op := dirOp{kind: opRemove, path: name}
	if err == nil && !st.IsDir() {
		op.saved, _ = os.ReadFile(name)
		op.hadSaved = true
		op.savedDur = fs.files[name]
	}
	if err := fs.inner.Remove(name); err != nil {
		return err
	}
	if op.hadSaved {
		fs.dirOps = append(fs.dirOps, op)
		delete(fs.files, name)
	}
	return nil
}

func (fs *PowerLossFS) Rename(oldname, newname string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err := fs.check(); err != nil {
		return err
	}
	op := dirOp{kind: opRename, path: newname, from: oldname}
	if b, err := os.ReadFile(newname); err == nil {
		op.saved, op.hadSaved, op.savedDur = b, true, fs.files[newname]
	}
	if err := fs.inner.Rename(oldname, newname); err != nil {
		return err
	}
	fs.dirOps = append(fs.dirOps, op)
	fs.files[newname] = fs.files[oldname]
	delete(fs.files, oldname)
	return nil
}

func (fs *PowerLossFS) MkdirAll(dir string, perm os.FileMode) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err := fs.check(); err != nil {
		return err
	}
	// Record each directory this creates, outermost first.
	var made []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil || d == filepath.Dir(d) {
			break
		}
		made = append([]string{d}, made...)
	}
	if err := fs.inner.MkdirAll(dir, perm); err != nil {
		return err
	}
	for _, d := range made {
		fs.dirOps = append(fs.dirOps, dirOp{kind: opMkdir, path: d})
	}
	return nil
}

func (fs *PowerLossFS) ReadDir(dir string) ([]os.DirEntry, error) {
	fs.mu.Lock()
	err := fs.check()
	fs.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return fs.inner.ReadDir(dir)
}

func (fs *PowerLossFS) Stat(name string) (os.FileInfo, error) {
	fs.mu.Lock()
	err := fs.check()
	fs.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return fs.inner.Stat(name)
}

// SyncDir makes the entries of dir durable: the operations on names in it.
func (fs *PowerLossFS) SyncDir(dir string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err := fs.check(); err != nil {
		return err
	}
	if err := fs.inner.SyncDir(dir); err != nil {
		return err
	}
	dir = filepath.Clean(dir)
	kept := fs.dirOps[:0]
	for _, op := range fs.dirOps {
		if filepath.Dir(op.path) == dir && (op.kind != opRename || filepath.Dir(op.from) == dir) {
			continue
		}
		kept = append(kept, op)
	}
	fs.dirOps = kept
	return nil
}

func (fs *PowerLossFS) Lock(name string) (io.Closer, error) {
	fs.mu.Lock()
	err := fs.check()
	fs.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return fs.inner.Lock(name)
}

// plFile tracks one open file's writes.
type plFile struct {
	File
	fs   *PowerLossFS
	path string
}

func (f *plFile) before(off, n int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.fs.check(); err != nil {
		return err
	}
	f.fs.saveRange(f.path, off, n)
	return nil
}

func (f *plFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.before(off, int64(len(p))); err != nil {
		return 0, err
	}
	return f.File.WriteAt(p, off)
}

func (f *plFile) Write(p []byte) (int, error) {
	off, err := f.File.Seek(0, io.SeekCurrent)
	if err != nil {
		return 0, err
	}
	if err := f.before(off, int64(len(p))); err != nil {
		return 0, err
	}
	return f.File.Write(p)
}

func (f *plFile) Truncate(size int64) error {
	cur, err := f.File.Size()
	if err != nil {
		return err
	}
	if err := f.before(size, max(cur-size, 0)); err != nil {
		return err
	}
	return f.File.Truncate(size)
}

func (f *plFile) Preallocate(off, n int64) error {
	if err := f.before(off, n); err != nil {
		return err
	}
	return f.File.Preallocate(off, n)
}

// Sync makes the file's bytes and size durable.
func (f *plFile) Sync() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.fs.check(); err != nil {
		return err
	}
	if err := f.File.Sync(); err != nil {
		return err
	}
	if d, ok := f.fs.files[f.path]; ok && d != nil {
		st, err := os.Stat(f.path)
		if err == nil {
			d.size, d.undo = st.Size(), nil
		}
	}
	return nil
}
