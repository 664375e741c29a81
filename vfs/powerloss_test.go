package vfs

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func readFile(t *testing.T, path string) (string, bool) {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b), true
}

func TestPowerLossKeepsOnlyWhatWasSynced(t *testing.T) {
	dir := t.TempDir()
	fs := NewPowerLossFS(Default)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	write := func(name, data string) File {
		t.Helper()
		f, err := fs.OpenFile(filepath.Join(dir, name), os.O_RDWR|os.O_CREATE, 0o600)
		must(err)
		_, err = f.WriteAt([]byte(data), 0)
		must(err)
		must(f.Sync())
		return f
	}
	// The durable state: a, c, d, d.tmp and e written, synced, and the
	// directory synced.
	a := write("a", "hello")
	c := write("c", "0123456789")
	d := write("d", "old d")
	tmp := write("d.tmp", "new d")
	e := write("e", "keep me")
	must(fs.SyncDir(dir))

	// Then, with no directory sync after:
	_, err := a.WriteAt([]byte("HELLO, world"), 0) // overwritten and extended, not synced
	must(err)
	b, err := fs.OpenFile(filepath.Join(dir, "b"), os.O_RDWR|os.O_CREATE, 0o600) // a new name
	must(err)
	_, err = b.Write([]byte("data"))
	must(err)
	must(b.Sync()) // its bytes are synced, its name is not
	must(c.Truncate(3))
	must(fs.Rename(filepath.Join(dir, "d.tmp"), filepath.Join(dir, "d")))
	must(fs.Remove(filepath.Join(dir, "e")))
	must(fs.MkdirAll(filepath.Join(dir, "sub", "deeper"), 0o700))

	fs.Crash()
	if _, err := a.WriteAt([]byte("x"), 0); !errors.Is(err, ErrCrashed) {
		t.Fatalf("a write after the crash: %v", err)
	}
	for _, f := range []File{a, b, c, d, tmp, e} {
		f.Close()
	}
	files, entries, err := fs.Recover()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("recovered %d files and %d directory entries", files, entries)

	for _, c := range []struct {
		name, want string
		exists     bool
	}{
		{"a", "hello", true},
		{"b", "", false},
		{"c", "0123456789", true},
		{"d", "old d", true},
		{"d.tmp", "new d", true},
		{"e", "keep me", true},
	} {
		got, ok := readFile(t, filepath.Join(dir, c.name))
		if ok != c.exists || got != c.want {
			t.Errorf("%s after the power loss: %q (exists %v), want %q (exists %v)", c.name, got, ok, c.want, c.exists)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "sub")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an unsynced directory survived the power loss: %v", err)
	}
}
