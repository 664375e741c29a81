package vfs

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// ZeroFill writes zeros over [off, off+n) of f. Like WriteAt it does not
// make them durable; Sync does.
//
// A file of Default writes the aligned part of the range with direct I/O
// (O_DIRECT, through a second open file description of the same file)
// where the file system takes it. The zeros then skip the page cache:
// the kernel copies nothing into cached pages, writes nothing back later,
// and evicts no cached data for pages nobody reads. Preparing a 64 MiB
// WAL segment took 100 ms of the member's CPU through the page cache,
// besides the kernel's writeback of it. The unaligned ends, file systems
// without direct I/O (tmpfs) and every other File (the fault-injecting
// wrappers) get ordinary writes, so a wrapper sees each of them.
func ZeroFill(f File, off, n int64) error {
	if off < 0 || n < 0 {
		return fmt.Errorf("vfs: zero-fill of %s at %d, %d bytes: negative range", f.Name(), off, n)
	}
	if of, ok := f.(osFile); ok {
		return of.zeroFill(off, n)
	}
	return writeZeros(f, make([]byte, min(n, 64<<10)), off, n)
}

// directAlign is the alignment direct I/O needs of offsets, lengths and
// memory: 4 KiB covers every logical block size Linux supports up to the
// page size.
const directAlign = 4096

// zeroPieceSize is the most one write of zeros covers.
const zeroPieceSize = 1 << 20

// zeroPiece is zeroPieceSize bytes of zeros, page-aligned: an anonymous
// read-only mapping that is never written, so its pages are the kernel's
// shared zero page and cost no resident memory. Nil if the mapping
// failed.
var zeroPiece = sync.OnceValue(func() []byte {
	b, err := unix.Mmap(-1, 0, zeroPieceSize, unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil
	}
	return b
})

func (f osFile) zeroFill(off, n int64) error {
	zeros := zeroPiece()
	if zeros == nil {
		return writeZeros(f, make([]byte, min(n, 64<<10)), off, n)
	}
	end := off + n
	from := (off + directAlign - 1) &^ (directAlign - 1)
	to := end &^ (directAlign - 1)
	if to > from {
		direct, err := f.directZeros(zeros, from, to)
		if err != nil {
			return err
		}
		if direct {
			if err := writeZeros(f, zeros, off, from-off); err != nil {
				return err
			}
			return writeZeros(f, zeros, to, end-to)
		}
	}
	return writeZeros(f, zeros, off, n)
}

// directZeros writes zeros over [from, to), both aligned, through a
// descriptor opened with O_DIRECT. It reports false, with nothing to
// undo, when the file system does not take direct I/O (the open or a
// write fails with EINVAL, or /proc is not mounted): the caller then
// writes the range the ordinary way.
func (f osFile) directZeros(zeros []byte, from, to int64) (bool, error) {
	fd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", f.File.Fd()), unix.O_WRONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, nil
	}
	defer unix.Close(fd)
	for off := from; off < to; {
		m := min(to-off, int64(len(zeros)))
		w, err := unix.Pwrite(fd, zeros[:m], off)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EINVAL) && off == from:
			return false, nil
		case err != nil:
			return true, &os.PathError{Op: "write", Path: f.File.Name(), Err: err}
		case w <= 0:
			return true, &os.PathError{Op: "write", Path: f.File.Name(), Err: unix.EIO}
		}
		off += int64(w)
	}
	return true, nil
}

// writeZeros writes zeros over [off, off+n) with WriteAt, from zeros (all
// zero bytes, not empty unless n is 0). A write is taken as done unless
// it fails: a silent short write (which WriteAt's contract rules out, and
// which FaultFS injects) is not retried, as it would not be noticed.
func writeZeros(f File, zeros []byte, off, n int64) error {
	for end := off + n; off < end; {
		m := min(end-off, int64(len(zeros)))
		if _, err := f.WriteAt(zeros[:m], off); err != nil {
			return err
		}
		off += m
	}
	return nil
}
