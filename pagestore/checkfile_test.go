package pagestore

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
)

// fillDB writes n keys of 200-byte values into bucket "b" and closes it,
// returning the file's bytes.
func fillDB(t *testing.T, path string, n int) []byte {
	t.Helper()
	db := openT(t, path, nil)
	if err := db.Update(func(tx *Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("b"))
		if err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			if err := b.Put([]byte(fmt.Sprintf("k%05d", i)), bytes.Repeat([]byte{'v'}, 200)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// A second commit rewrites some pages, so the free list has work.
	if err := db.Update(func(tx *Tx) error {
		b, _ := tx.Bucket([]byte("b"))
		return b.Delete([]byte("k00000"))
	}); err != nil {
		t.Fatal(err)
	}
	st := db.Stats()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.InUseBytes <= 0 {
		t.Fatal("no bytes in use")
	}
	return raw
}

func TestCheckFileCleanReportAndProgress(t *testing.T) {
	path := tmpDB(t)
	raw := fillDB(t, path, 2000)
	var calls, last, total int64
	rep, err := CheckFile(path, &CheckOptions{Progress: func(done, tot int64) { calls++; last, total = done, tot }})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.Err() != nil {
		t.Fatalf("clean file: %v", rep.Err())
	}
	if rep.Buckets != 1 || rep.BucketKeys["b"] != 1999 || rep.Keys != 1999 || rep.BranchPages == 0 || rep.LeafPages == 0 {
		t.Fatalf("report %+v", rep)
	}
	if got := uint64(rep.InUseBytes)/uint64(rep.PageSize) + rep.FreePages; got != rep.Pages {
		t.Fatalf("in use %d pages + free %d != %d pages", rep.InUseBytes/int64(rep.PageSize), rep.FreePages, rep.Pages)
	}
	// The in-use figure is what the DB itself reports for the quota.
	db := openT(t, path, nil)
	if st := db.Stats(); st.InUseBytes != rep.InUseBytes || uint64(st.FreePages) != rep.FreePages {
		t.Fatalf("check says %d bytes in use and %d free pages, the DB %d and %d", rep.InUseBytes, rep.FreePages, st.InUseBytes, st.FreePages)
	}
	db.Close()
	if calls == 0 || last != total || total != int64(rep.Pages) {
		t.Fatalf("progress: %d calls, last %d of %d (pages %d)", calls, last, total, rep.Pages)
	}
	if now, _ := os.ReadFile(path); !bytes.Equal(now, raw) {
		t.Fatal("CheckFile changed the file")
	}
}

// TestCheckFileLayout: a leaf whose checksum is right but whose elements
// are not packed as the writer packs them (a writer bug, or a crafted
// file) is reported at its offset.
func TestCheckFileLayout(t *testing.T) {
	path := tmpDB(t)
	fillDB(t, path, 500)
	db := openT(t, path, nil)
	var leaf pgid
	db.View(func(tx *Tx) error {
		b, _ := tx.Bucket([]byte("b"))
		for id := b.root; ; {
			p, _ := db.page(id, tx.meta.hwm)
			if pgFlags(p) == flagLeaf {
				leaf = id
				break
			}
			_, id = branchElem(p, 0)
		}
		return nil
	})
	ps := db.pageSize
	db.Close()
	raw, _ := os.ReadFile(path)
	p := raw[int(leaf)*ps : (int(leaf)+1)*ps]
	n := pgCount(p)
	e := p[pageHeaderSize+(n-1)*elemSize:]
	le.PutUint32(e[4:], le.Uint32(e[4:])+1) // last element's data one byte later: a gap
	sealPage(p)
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err := CheckFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("page %d (offset %d): bucket \"b\": element %d data at byte", leaf, int(leaf)*ps, n-1)
	if rep.OK() || !strings.Contains(rep.Err().Error(), want) {
		t.Fatalf("want %q in %v", want, rep.Err())
	}
}

func TestCheckFileUnopenable(t *testing.T) {
	path := tmpDB(t)
	raw := fillDB(t, path, 300)
	ps := osPageSize

	// Both meta pages damaged: one problem per slot, at its offset.
	bad := append([]byte(nil), raw...)
	bad[40] ^= 1
	bad[ps+40] ^= 1
	os.WriteFile(path, bad, 0o600)
	rep, err := CheckFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || len(rep.Problems) < 2 || rep.Problems[0].Offset != 0 || rep.Problems[1].Offset != int64(ps) ||
		!strings.Contains(rep.Problems[0].What, "meta page invalid") {
		t.Fatalf("both metas damaged: %+v", rep.Problems)
	}

	// Shorter than the meta says: named, not mapped past the end.
	os.WriteFile(path, raw[:6*ps], 0o600)
	rep, err = CheckFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || !strings.Contains(rep.Err().Error(), "file is") || !strings.Contains(rep.Err().Error(), path) {
		t.Fatalf("short file: %v", rep.Err())
	}
	if now, _ := os.ReadFile(path); !bytes.Equal(now, raw[:6*ps]) {
		t.Fatal("CheckFile changed the short file")
	}
}
