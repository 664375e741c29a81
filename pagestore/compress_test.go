package pagestore

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
)

// squeezable returns n bytes of a repeated phrase (compresses well).
func squeezable(n int, tag string) []byte {
	v := bytes.Repeat([]byte(`{"kind":"Pod","metadata":{"name":"`+tag+`","labels":{"app":"web"}}}`), n/40+1)
	return v[:n]
}

// letters returns n bytes drawn from 64 letters: not random enough for
// looksRandom to skip it, and no repeats for S2 to use.
func letters(n int) []byte {
	r := rand.New(rand.NewPCG(3, 4))
	v := make([]byte, n)
	for i := range v {
		v[i] = byte('0' + r.IntN(64))
	}
	return v
}

// TestLooksRandom: random bytes are skipped; text, JSON and a
// protobuf-like record are not.
func TestLooksRandom(t *testing.T) {
	for _, c := range []struct {
		name string
		v    []byte
		want bool
	}{
		{"random 128", defragValue(1, 128), true},
		{"random 300", defragValue(2, 300), true},
		{"random 1 MiB", defragValue(3, 1<<20), true},
		{"json", squeezable(300, "x"), false},
		{"letters", letters(300), false},
		{"protobuf-like", append(bytes.Repeat([]byte("\x0a\x08/registry/pods/default/web-7d9f\x10\xb4\x9c\x01"), 8), defragValue(4, 64)...), false},
	} {
		if got := looksRandom(c.v); got != c.want {
			t.Errorf("%s: looksRandom %v, want %v", c.name, got, c.want)
		}
	}
}

// compressCases are values of every path through compressValue: too
// short to try, S2 kept, S2 not worth it (random), zstd kept, zstd not
// worth it, and a large value that overflow pages would hold.
func compressCases() []struct {
	key        string
	value      []byte
	compressed bool
} {
	return []struct {
		key        string
		value      []byte
		compressed bool
	}{
		{"a-empty", []byte{}, false},
		{"b-short", squeezable(compressMin-1, "b"), false},
		{"c-s2", squeezable(compressMin, "c"), true},
		{"d-s2", squeezable(3000, "d"), true},
		{"e-random", defragValue(5, 300), false},
		{"e2-letters", letters(300), false},
		{"f-zstd", squeezable(zstdMin, "f"), true},
		{"g-random", defragValue(7, zstdMin+100), false},
		{"h-zstd", squeezable(1<<20, "h"), true},
	}
}

// TestCompressedValuesReadBack puts values of every kind, reads them in
// the same transaction (the writer's nodes), after commit (the pages) and
// after reopen, through Get and every cursor move; the checker counts
// the compressed ones, and the file is smaller than the same data stored
// as given.
func TestCompressedValuesReadBack(t *testing.T) {
	cases := compressCases()
	sizes := map[bool]int64{}
	for _, off := range []bool{false, true} {
		path := tmpDB(t)
		db := openT(t, path, &Options{NoSync: true, StrictMode: true, NoCompression: off})
		verify := func(tx *Tx, when string) {
			t.Helper()
			b, err := tx.Bucket([]byte("key"))
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range cases {
				got, err := b.Get([]byte(c.key))
				if err != nil || !bytes.Equal(got, c.value) || got == nil {
					t.Fatalf("%s, no compression %v: Get %s: %d bytes, %v; want %d bytes", when, off, c.key, len(got), err, len(c.value))
				}
			}
			// GetBuf with one buffer for all: a value stored as it is
			// leaves the buffer alone (it must never hand out the
			// mapping as a buffer to write into).
			var buf []byte
			for _, c := range cases {
				got, next, err := b.GetBuf([]byte(c.key), buf)
				if err != nil || !bytes.Equal(got, c.value) || got == nil {
					t.Fatalf("%s: GetBuf %s: %d bytes, %v", when, c.key, len(got), err)
				}
				if (off || !c.compressed) && (cap(next) != cap(buf) || cap(buf) > 0 && &next[:1][0] != &buf[:1][0]) {
					t.Fatalf("%s: GetBuf %s, stored as it is, replaced the buffer", when, c.key)
				}
				buf = next
			}
			// GetStored then AppendValue into one buffer of the summed
			// lengths: every value lands in place, none is moved.
			stored := make([]StoredValue, len(cases))
			total := 0
			for j, c := range cases {
				sv, found, err := b.GetStored([]byte(c.key))
				if err != nil || !found || sv.Len() != len(c.value) {
					t.Fatalf("%s: GetStored %s: found %v, length %d, %v; want %d bytes", when, c.key, found, sv.Len(), err, len(c.value))
				}
				stored[j] = sv
				total += sv.Len()
			}
			all := make([]byte, 0, total)
			for j, c := range cases {
				at := len(all)
				out, err := b.AppendValue(all, []byte(c.key), stored[j])
				if err != nil || !bytes.Equal(out[at:], c.value) || cap(out) != total || len(out) > 0 && &out[:1][0] != &all[:1][0] {
					t.Fatalf("%s: AppendValue %s: %d bytes (buffer moved: %v), %v", when, c.key, len(out)-at, cap(out) != total, err)
				}
				all = out
			}
			if _, found, err := b.GetStored([]byte("no such key")); found || err != nil {
				t.Fatalf("%s: GetStored of a missing key: found %v, %v", when, found, err)
			}
			cur := b.Cursor()
			i := 0
			for k, v := cur.First(); k != nil; k, v = cur.Next() {
				if string(k) != cases[i].key || !bytes.Equal(v, cases[i].value) {
					t.Fatalf("%s: Next at %d: key %q, %d bytes", when, i, k, len(v))
				}
				i++
			}
			for k, v := cur.Last(); k != nil; k, v = cur.Prev() {
				i--
				if string(k) != cases[i].key || !bytes.Equal(v, cases[i].value) {
					t.Fatalf("%s: Prev at %d: key %q, %d bytes", when, i, k, len(v))
				}
			}
			if i != 0 || cur.Err() != nil {
				t.Fatalf("%s: cursor stopped at %d: %v", when, i, cur.Err())
			}
			for _, c := range cases {
				if k, v := cur.Seek([]byte(c.key)); string(k) != c.key || !bytes.Equal(v, c.value) {
					t.Fatalf("%s: Seek %s: key %q, %d bytes", when, c.key, k, len(v))
				}
			}
		}
		if err := db.Update(func(tx *Tx) error {
			b, err := tx.CreateBucket([]byte("key"))
			if err != nil {
				return err
			}
			for _, c := range cases {
				if err := b.Put([]byte(c.key), c.value); err != nil {
					return err
				}
			}
			verify(tx, "before commit")
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if err := db.View(func(tx *Tx) error { verify(tx, "after commit"); return nil }); err != nil {
			t.Fatal(err)
		}
		db.Close()
		db = openT(t, path, &Options{NoCompression: !off})
		if err := db.View(func(tx *Tx) error { verify(tx, "after reopen"); return nil }); err != nil {
			t.Fatal(err)
		}
		db.Close()
		rep, err := CheckFile(path, nil)
		if err != nil || !rep.OK() {
			t.Fatalf("check: %v %v", err, rep.Problems)
		}
		want := 0
		for _, c := range cases {
			if c.compressed && !off {
				want++
			}
		}
		if rep.CompressedValues != uint64(want) {
			t.Fatalf("no compression %v: %d values stored compressed, want %d", off, rep.CompressedValues, want)
		}
		sizes[off] = int64(rep.InUseBytes)
	}
	t.Logf("bytes in use: %d compressed, %d as given", sizes[false], sizes[true])
	if sizes[false]*2 > sizes[true] {
		t.Fatalf("compression saved too little: %d bytes in use against %d", sizes[false], sizes[true])
	}
}

// findValue returns the page run holding key's element in the file image
// buf, the element's index and its flags.
func findValue(t *testing.T, buf []byte, ps int, key string) (id pgid, run []byte, i int, flags uint32) {
	t.Helper()
	for id := pgid(numMetaPages); int(id+1)*ps <= len(buf); id++ {
		p := buf[int(id)*ps:]
		if !isLeafPage(p) || pgID(p) != id {
			continue
		}
		run := p[:(1+int(pgOverflow(p)))*ps]
		for i := 0; i < pgCount(run); i++ {
			if f, _ := leafValue(run, i); string(appendLeafKey(nil, run, i)) == key {
				return id, run, i, f
			}
		}
	}
	t.Fatalf("no element %q in the file", key)
	return
}

// TestCorruptCompressedValue damages one compressed value on disk. Without
// a new checksum the page is refused as a whole; with one (what a bad
// writer would leave) the read of that value fails with an error naming
// the file, the page and the value's byte offset, the cursor stops with
// it, the checker reports it, and every other value still reads.
func TestCorruptCompressedValue(t *testing.T) {
	for _, key := range []string{"c-s2", "d-s2", "f-zstd"} {
		for _, reseal := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/reseal=%v", key, reseal), func(t *testing.T) {
				path := tmpDB(t)
				db := openT(t, path, &Options{NoSync: true})
				if err := db.Update(func(tx *Tx) error {
					b, err := tx.CreateBucket([]byte("key"))
					if err != nil {
						return err
					}
					for _, c := range compressCases() {
						if err := b.Put([]byte(c.key), c.value); err != nil {
							return err
						}
					}
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				ps := db.PageSize()
				db.Close()
				buf, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				id, run, i, f := findValue(t, buf, ps, key)
				if f&elemFlagsCompressed == 0 {
					t.Fatalf("%s is not stored compressed (flags %#x)", key, f)
				}
				pos := leafValuePos(run, i)
				_, v := leafValue(run, i)
				vs := len(v)
				// The S2 header's length claims one byte more than the
				// block holds; a zstd frame gets a byte flipped in its
				// middle (its content checksum catches it).
				at := pos
				if f&elemFlagZstd != 0 {
					at = pos + vs/2
				}
				run[at] ^= 0x01
				if reseal {
					sealPage(run)
				}
				if err := os.WriteFile(path, buf, 0o600); err != nil {
					t.Fatal(err)
				}
				offset := fmt.Sprintf("page %d (offset %d)", id, int64(id)*int64(ps))
				valueAt := fmt.Sprintf("value at file offset %d", int64(id)*int64(ps)+int64(pos))
				db = openT(t, path, nil)
				defer db.Close()
				err = db.View(func(tx *Tx) error {
					b, err := tx.Bucket([]byte("key"))
					if err != nil {
						return err
					}
					_, gerr := b.Get([]byte(key))
					var pe *PageError
					if !errors.As(gerr, &pe) || pe.Path != path || pe.Page != uint64(id) ||
						!strings.Contains(gerr.Error(), offset) || reseal && !strings.Contains(gerr.Error(), valueAt) {
						t.Fatalf("Get %s: %v; want a PageError naming %s, %s and (resealed) the %s", key, gerr, path, offset, valueAt)
					}
					if _, _, berr := b.GetBuf([]byte(key), make([]byte, 0, 64)); berr == nil || berr.Error() != gerr.Error() {
						t.Fatalf("GetBuf %s: %v; want Get's %v", key, berr, gerr)
					}
					if sv, _, serr := b.GetStored([]byte(key)); serr != nil {
						if serr.Error() != gerr.Error() {
							t.Fatalf("GetStored %s: %v; want Get's %v", key, serr, gerr)
						}
					} else if _, aerr := b.AppendValue(nil, []byte(key), sv); aerr == nil || aerr.Error() != gerr.Error() {
						t.Fatalf("AppendValue %s: %v; want Get's %v", key, aerr, gerr)
					}
					cur := b.Cursor()
					for k, _ := cur.First(); k != nil; k, _ = cur.Next() {
						if string(k) >= key {
							t.Fatalf("the cursor went past the damaged value to %q", k)
						}
					}
					if cerr := cur.Err(); cerr == nil || cerr.Error() != gerr.Error() {
						t.Fatalf("cursor: %v; want %v", cerr, gerr)
					}
					if !reseal {
						return nil
					}
					for _, c := range compressCases() {
						if c.key == key {
							continue
						}
						if v, err := b.Get([]byte(c.key)); err != nil || !bytes.Equal(v, c.value) {
							t.Fatalf("Get %s beside the damaged value: %d bytes, %v", c.key, len(v), err)
						}
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				db.Close()
				rep, err := CheckFile(path, nil)
				if err != nil {
					t.Fatal(err)
				}
				found := false
				for _, p := range rep.Problems {
					found = found || p.Page == int64(id) && (!reseal || strings.Contains(p.What, valueAt))
				}
				if rep.OK() || !found {
					t.Fatalf("CheckFile did not report page %d (%s): %v", id, valueAt, rep.Problems)
				}
			})
		}
	}
}
