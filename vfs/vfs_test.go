package vfs

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestFaultFSShortWriteAndCrash(t *testing.T) {
	dir := t.TempDir()
	calls := 0
	fs := NewFaultFS(Default, func(ev Event) *Fault {
		if ev.Op == OpWrite {
			calls++
			if calls == 2 {
				return &Fault{Err: ENOSPC, Written: 3, Crash: true}
			}
		}
		return nil
	})
	f, err := fs.OpenFile(filepath.Join(dir, "a"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	n, err := f.Write([]byte("world"))
	if n != 3 || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("torn write: n=%d err=%v", n, err)
	}
	if err := f.Sync(); !errors.Is(err, ErrCrashed) {
		t.Fatalf("sync after crash: %v", err)
	}
	got, _ := os.ReadFile(filepath.Join(dir, "a"))
	if string(got) != "hellowor" {
		t.Fatalf("file holds %q, want %q", got, "hellowor")
	}
	if !fs.Crashed() {
		t.Fatal("Crashed() = false")
	}
}

func TestLockIsExclusive(t *testing.T) {
	p := filepath.Join(t.TempDir(), "LOCK")
	l, err := Default.Lock(p)
	if err != nil {
		t.Fatal(err)
	}
	// flock locks belong to the open file description, so a second open in
	// the same process conflicts just as another process would.
	if _, err := Default.Lock(p); !errors.Is(err, ErrLocked) {
		t.Fatalf("second lock: %v, want ErrLocked", err)
	}
	l.Close()
	l2, err := Default.Lock(p)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	l2.Close()
}

func TestSyncAndPreallocate(t *testing.T) {
	dir := t.TempDir()
	f, err := Default.OpenFile(filepath.Join(dir, "p"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Preallocate(0, 1<<20); err != nil {
		t.Fatal(err)
	}
	if sz, _ := f.Size(); sz != 0 {
		t.Fatalf("preallocate changed size to %d", sz)
	}
	if _, err := f.WriteAt([]byte("x"), 4096); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := Default.SyncDir(dir); err != nil {
		t.Fatal(err)
	}
}
