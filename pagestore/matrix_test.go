package pagestore

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/strata-db/strata/internal/testseed"
)

// TestCorruptionMatrix damages the page store: every kind
// of page a file holds (both meta pages, branch, leaf, the extra pages of
// overflow runs, the freelist log, free pages) is damaged in turn by bit
// flips, a zeroed 512-byte sector and a truncation of the file at the
// page. Each damaged copy must end in one of:
//
//   - refused: Open fails with ErrCorrupt naming the file;
//   - detected: a full read of every bucket, or CheckFile, reports the
//     damage (ErrCorrupt naming the file, or a problem with its page and
//     offset);
//   - unharmed: every bucket reads exactly as before (the damage hit free
//     space, or one meta page while the other is intact).
//
// A copy that opens, reads without an error, passes CheckFile and returns
// different data is a silent corruption: the test fails on any.
func TestCorruptionMatrix(t *testing.T) {
	seed := testseed.Seed(t)
	src := tmpDB(t)
	db := openT(t, src, nil)
	// Three buckets: many small keys (branch and leaf pages), values
	// larger than a page (overflow runs), and churn that frees pages (the
	// freelist log).
	// The big values do not compress (overflow runs); the churn values
	// do (compressed values in leaves).
	big := defragValue(uint64(seed), 900*15)
	if err := db.Update(func(tx *Tx) error {
		small, err := tx.CreateBucket([]byte("small"))
		if err != nil {
			return err
		}
		for i := 0; i < 3000; i++ {
			if err := small.Put([]byte(fmt.Sprintf("key-%06d", i)), []byte(fmt.Sprintf("value-%d", i))); err != nil {
				return err
			}
		}
		large, err := tx.CreateBucket([]byte("large"))
		if err != nil {
			return err
		}
		for i := 0; i < 20; i++ {
			if err := large.Put([]byte(fmt.Sprintf("big-%02d", i)), append([]byte(fmt.Sprint(i)), big...)); err != nil {
				return err
			}
		}
		_, err = tx.CreateBucket([]byte("churn"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 5; round++ {
		if err := db.Update(func(tx *Tx) error {
			b, err := tx.Bucket([]byte("churn"))
			if err != nil {
				return err
			}
			for i := 0; i < 400; i++ {
				k := []byte(fmt.Sprintf("c-%04d", i))
				if round%2 == 0 {
					err = b.Put(k, bytes.Repeat([]byte{byte(round)}, 600))
				} else {
					err = b.Delete(k)
				}
				if err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	want := dump(t, db)
	ps := db.PageSize()
	db.Close()
	orig, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	kinds := classifyPages(orig, ps)
	if rep, err := CheckFile(src, nil); err != nil || rep.CompressedValues == 0 {
		t.Fatalf("the file holds no compressed value (%v): the matrix would not cover them", err)
	}

	type outcome struct{ refused, detected, unharmed int }
	results := map[string]*outcome{}
	var silent []string
	cases := 0
	dir := t.TempDir()
	try := func(kind, what string, mutate func([]byte) []byte) {
		cases++
		buf := mutate(append([]byte(nil), orig...))
		path := filepath.Join(dir, fmt.Sprintf("case-%d", cases))
		if err := os.WriteFile(path, buf, 0o600); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(path)
		o := results[kind]
		if o == nil {
			o = &outcome{}
			results[kind] = o
		}
		db, err := Open(path, &Options{StrictMode: true})
		if err != nil {
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) {
				t.Errorf("%s %s: open failed without naming the corruption and the file: %v", kind, what, err)
			}
			o.refused++
			return
		}
		got, rerr := readAll(db)
		db.Close()
		if rerr != nil {
			if !errors.Is(rerr, ErrCorrupt) || !strings.Contains(rerr.Error(), path) {
				t.Errorf("%s %s: read failed without naming the corruption and the file: %v", kind, what, rerr)
			}
			o.detected++
			return
		}
		rep, cerr := CheckFile(path, nil)
		if cerr != nil {
			t.Fatalf("%s %s: CheckFile: %v", kind, what, cerr)
		}
		if !rep.OK() {
			if p := rep.Problems[0]; p.Page < 0 && !strings.Contains(p.What, "meta") {
				t.Errorf("%s %s: the first problem names no page: %v", kind, what, p)
			}
			o.detected++
			return
		}
		if !sameDump(got, want) {
			silent = append(silent, fmt.Sprintf("%s %s", kind, what))
			return
		}
		o.unharmed++
	}

	// Pages of each kind, in file order, up to 12 per kind (all metas).
	byKind := map[string][]int{}
	for id, k := range kinds {
		byKind[k] = append(byKind[k], id)
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x5bd1e995))
	for kind, ids := range byKind {
		if len(ids) > 12 {
			rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
			ids = ids[:12]
		}
		sort.Ints(ids)
		for _, id := range ids {
			base := id * ps
			// Bit flips in the header, the first elements, the middle
			// and the end of the page.
			for _, off := range []int{0, 9, 17, 21, 40, ps / 2, ps - 1, rng.IntN(ps)} {
				bit := byte(1 << rng.IntN(8))
				try(kind, fmt.Sprintf("page %d byte %d bit %#x", id, off, bit), func(b []byte) []byte {
					b[base+off] ^= bit
					return b
				})
			}
			// A zeroed 512-byte sector (a torn or lost sector).
			for _, sec := range []int{0, rng.IntN(ps / 512)} {
				try(kind, fmt.Sprintf("page %d sector %d zeroed", id, sec), func(b []byte) []byte {
					clear(b[base+sec*512 : base+sec*512+512])
					return b
				})
			}
			// The file cut at, and in the middle of, the page. (Not at
			// 0: an empty file is a new database by design, as in bbolt;
			// the server's start-up checks catch a page store emptied
			// under a WAL that needs it.)
			for _, cut := range []int{base, base + ps/2} {
				if cut == 0 {
					continue
				}
				try(kind, fmt.Sprintf("file truncated at %d (page %d)", cut, id), func(b []byte) []byte { return b[:cut] })
			}
		}
	}
	var names []string
	for k := range results {
		names = append(names, k)
	}
	sort.Strings(names)
	var lines []string
	for _, k := range names {
		o := results[k]
		lines = append(lines, fmt.Sprintf("%s: refused %d, detected %d, unharmed %d", k, o.refused, o.detected, o.unharmed))
	}
	t.Logf("CORRUPTION-MATRIX pagestore: %d cases over %d pages, %d silent\n  %s", cases, len(kinds), len(silent), strings.Join(lines, "\n  "))
	for _, s := range silent {
		t.Errorf("silent corruption: %s reads without an error, passes CheckFile and returns different data", s)
	}
	for _, k := range []string{"meta", "branch", "leaf", "overflow", "freelist"} {
		if results[k] == nil {
			t.Errorf("the file has no %s page: the matrix did not cover that kind", k)
		}
	}
}

// classifyPages names the kind of every page of a file: meta, branch,
// leaf, freelist, overflow (the extra pages of a multi-page run), or free
// (anything else: free or never written).
func classifyPages(file []byte, ps int) map[int]string {
	out := map[int]string{}
	n := len(file) / ps
	for id := 0; id < n; id++ {
		if _, done := out[id]; done {
			continue
		}
		p := file[id*ps : (id+1)*ps]
		if int(pgID(p)) != id {
			out[id] = "free"
			continue
		}
		kind := "free"
		switch pgFlags(p) {
		case flagMeta:
			kind = "meta"
		case flagBranch:
			kind = "branch"
		case flagLeaf:
			kind = "leaf"
		case flagFreelist:
			kind = "freelist"
		}
		out[id] = kind
		if kind != "free" && kind != "meta" {
			for j := 1; j <= int(pgOverflow(p)) && id+j < n; j++ {
				out[id+j] = "overflow"
			}
		}
	}
	return out
}

// readAll reads every bucket, returning the first error.
func readAll(db *DB) (map[string]map[string]string, error) {
	out := map[string]map[string]string{}
	err := db.View(func(tx *Tx) error {
		return tx.ForEach(func(name []byte, b *Bucket) error {
			m := map[string]string{}
			out[string(name)] = m
			return b.ForEach(func(k, v []byte) error {
				m[string(k)] = string(v)
				return nil
			})
		})
	})
	return out, err
}

func sameDump(a, b map[string]map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for name, am := range a {
		bm, ok := b[name]
		if !ok || len(am) != len(bm) {
			return false
		}
		for k, v := range am {
			if bv, ok := bm[k]; !ok || bv != v {
				return false
			}
		}
	}
	return true
}
