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

// decodeLeaf returns the elements of leaf page p, in either format, as
// a node that can be written back with writeClassic or writePacked (over
// p itself: the node holds copies).
func decodeLeaf(p []byte) *node {
	n := &node{b: &Bucket{id: pgOwner(p)}, leaf: true, inodes: make([]inode, pgCount(p))}
	for i := range n.inodes {
		in := &n.inodes[i]
		var v []byte
		in.flags, v = leafValue(p, i)
		in.key, in.value = appendLeafKey(nil, p, i), bytes.Clone(v)
	}
	return n
}

// TestCheckFileLayout: a leaf whose checksum is right but whose elements
// are not laid out as the writer lays them out (a writer bug, or a
// crafted file) is reported at its offset, in both leaf formats.
func TestCheckFileLayout(t *testing.T) {
	for _, format := range []string{"classic", "packed"} {
		t.Run(format, func(t *testing.T) {
			path := tmpDB(t)
			want := flagLeafPacked
			if format == "classic" {
				want = flagLeaf
				raw := writeVersion2(t, path, func() { fillDB(t, path, 500) })
				if err := os.WriteFile(path, raw, 0o600); err != nil {
					t.Fatal(err)
				}
			} else {
				fillDB(t, path, 500)
			}
			db := openT(t, path, nil)
			var leaf pgid
			db.View(func(tx *Tx) error {
				b, _ := tx.Bucket([]byte("b"))
				for id := b.root; ; {
					p, _ := db.page(id, tx.meta.hwm)
					if isLeafPage(p) {
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
			if pgFlags(p) != want {
				t.Fatalf("the writer left leaf %d in format %#x, want %#x", leaf, pgFlags(p), want)
			}
			n := decodeLeaf(p)
			var problem string
			if format == "classic" {
				// A gap before the last element's data.
				e := p[pageHeaderSize+(len(n.inodes)-1)*elemSize:]
				le.PutUint32(e[4:], le.Uint32(e[4:])+1)
				sealPage(p)
				problem = fmt.Sprintf("page %d (offset %d): bucket \"b\": element %d data at byte", leaf, int(leaf)*ps, len(n.inodes)-1)
			} else {
				// A prefix one byte shorter than the keys share: every
				// accessor still works, but the writer would not do it.
				s := packedLayout(n.inodes)
				if s.pl == 0 {
					t.Fatalf("keys k%%05d share no prefix: %+v", s)
				}
				s.pl--
				if s.ml >= 0 {
					s.ml++
				}
				s.size += len(n.inodes) - 1
				n.writePacked(p, leaf, s)
				problem = fmt.Sprintf("page %d (offset %d): bucket \"b\": packed leaf with prefix %d", leaf, int(leaf)*ps, s.pl)
			}
			if err := os.WriteFile(path, raw, 0o600); err != nil {
				t.Fatal(err)
			}
			if got := decodeLeaf(p); len(got.inodes) != len(n.inodes) || !bytes.Equal(got.inodes[3].value, n.inodes[3].value) {
				t.Fatal("the rewritten leaf does not hold the elements it had")
			}
			rep, err := CheckFile(path, nil)
			if err != nil {
				t.Fatal(err)
			}
			if rep.OK() || !strings.Contains(rep.Err().Error(), problem) {
				t.Fatalf("want %q in %v", problem, rep.Err())
			}
		})
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
