package schema

import (
	"os"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/strata-db/strata/pagestore"
)

// TestDetectRealFiles detects real files of both formats, and neither.
func TestDetectRealFiles(t *testing.T) {
	dir := t.TempDir()
	ps := filepath.Join(dir, "strata.db")
	db, err := pagestore.Open(ps, &pagestore.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	bp := filepath.Join(dir, "etcd.db")
	bdb, err := bolt.Open(bp, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	bdb.Close()
	other := filepath.Join(dir, "other")
	os.WriteFile(other, make([]byte, 4096), 0o600)
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte("x"), 0o600)
	for path, want := range map[string]Format{ps: FormatStrata, bp: FormatEtcd, other: FormatUnknown, short: FormatUnknown} {
		got, err := DetectFile(path)
		if err != nil || got != want {
			t.Errorf("%s: %q %v, want %q", filepath.Base(path), got, err, want)
		}
		head := make([]byte, HeaderSize)
		f, _ := os.Open(path)
		n, _ := f.Read(head)
		f.Close()
		if want != FormatUnknown {
			if psz := PageSize(want, head[:n]); psz != os.Getpagesize() {
				t.Errorf("%s: page size %d, want %d", filepath.Base(path), psz, os.Getpagesize())
			}
		}
	}
	if _, err := DetectFile(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing file is not an error")
	}
}
