package vfs

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestZeroFill: the range reads back as zeros and nothing outside it
// changes, for aligned and unaligned ranges, ranges past the end of the
// file, and through a fault-injecting wrapper (which sees the writes).
func TestZeroFill(t *testing.T) {
	const size = 3 << 20
	cases := []struct{ off, n int64 }{
		{0, size},              // the whole file, aligned
		{4096, 1 << 20},        // one aligned piece
		{100, 8192},            // unaligned both ends, one aligned block inside
		{5000, 3000},           // unaligned, no aligned block inside
		{4095, 2},              // across one alignment boundary
		{size - 4096, 3 << 20}, // past the end of the file
		{12345, 2<<20 + 777},   // more than one piece, unaligned
		{size + 4096, 4096},    // wholly past the end: a hole, then zeros
		{8192, 0},              // nothing
	}
	for _, wrap := range []bool{false, true} {
		for _, c := range cases {
			path := filepath.Join(t.TempDir(), "f")
			if err := os.WriteFile(path, bytes.Repeat([]byte{0xa5}, size), 0o644); err != nil {
				t.Fatal(err)
			}
			var fs FS = Default
			var writes int
			if wrap {
				fs = NewFaultFS(Default, func(ev Event) *Fault {
					if ev.Op == OpWrite {
						writes++
					}
					return nil
				})
			}
			f, err := fs.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := ZeroFill(f, c.off, c.n); err != nil {
				t.Fatalf("ZeroFill(%d, %d), wrapped %v: %v", c.off, c.n, wrap, err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			want := int64(size)
			if c.n > 0 {
				want = max(want, c.off+c.n)
			}
			if int64(len(got)) != want {
				t.Fatalf("ZeroFill(%d, %d), wrapped %v: file is %d bytes, want %d", c.off, c.n, wrap, len(got), want)
			}
			for i, b := range got {
				in := int64(i) >= c.off && int64(i) < c.off+c.n
				switch {
				case in && b != 0:
					t.Fatalf("ZeroFill(%d, %d), wrapped %v: byte %d is %#x, want 0", c.off, c.n, wrap, i, b)
				case !in && int64(i) < size && b != 0xa5:
					t.Fatalf("ZeroFill(%d, %d), wrapped %v: byte %d outside the range changed to %#x", c.off, c.n, wrap, i, b)
				}
			}
			if wrap && c.n > 0 && writes == 0 {
				t.Fatalf("ZeroFill(%d, %d) through a FaultFS: the wrapper saw no write", c.off, c.n)
			}
		}
	}
}

// TestZeroFillFault: a write error injected by a wrapper is returned.
func TestZeroFillFault(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	fs := NewFaultFS(Default, func(ev Event) *Fault {
		if ev.Op == OpWrite && ev.Off >= 1<<20 {
			return &Fault{Err: EIO}
		}
		return nil
	})
	f, err := fs.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := ZeroFill(f, 0, 2<<20); !errors.Is(err, EIO) {
		t.Fatalf("ZeroFill with an injected EIO returned %v, want EIO", err)
	}
}

// TestZeroFillSkipsPageCache: on a file system that takes direct I/O,
// the aligned part of a zero fill leaves no page of the file in the page
// cache, where ordinary writes would leave every one. Where direct I/O
// is not taken (tmpfs), TestZeroFill covers the ordinary path the fill
// falls back to, and this test checks that the fallback happened.
func TestZeroFillSkipsPageCache(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	const size = 8 << 20
	f, err := Default.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	if err := f.Preallocate(0, size); err != nil {
		t.Fatal(err)
	}
	direct := true
	if fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECT, 0); err != nil {
		direct = false
		t.Logf("the file system of %s takes no O_DIRECT (%v): checking the fallback", dir, err)
	} else {
		unix.Close(fd)
	}
	if err := ZeroFill(f, 0, size); err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	vec := make([]byte, size/os.Getpagesize())
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatalf("mincore: %v", errno)
	}
	cached := 0
	for _, v := range vec {
		cached += int(v & 1)
	}
	switch {
	case direct && cached > 0:
		t.Fatalf("%d of %d pages of a zero-filled file are in the page cache, want none (direct I/O)", cached, len(vec))
	case !direct && cached == 0:
		t.Fatalf("no page of a zero-filled file is in the page cache on a file system without direct I/O: was it written?")
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	t.Logf("direct I/O %v: %d of %d pages cached after the fill", direct, cached, len(vec))
}
