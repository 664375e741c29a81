package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// rawDB edits a page-store image through its documented wire format
// (pagestore/doc.go), independently of the pagestore package, to make the
// corruptions the checker must find.
type rawDB struct {
	b  []byte
	ps int64
}

var le = binary.LittleEndian

func (r rawDB) u32(off int64) uint32 { return le.Uint32(r.b[off:]) }
func (r rawDB) u64(off int64) uint64 { return le.Uint64(r.b[off:]) }

// newestMeta returns the slot of the valid meta page with the larger txid.
func newestMeta(t *testing.T, b []byte) (r rawDB, slot int64) {
	t.Helper()
	r = rawDB{b: b, ps: int64(le.Uint32(b[40:]))}
	best := int64(-1)
	for s := int64(0); s < 2; s++ {
		p := b[s*r.ps : (s+1)*r.ps]
		if le.Uint32(p[32:]) != 0x53545241 || xxhash.Sum64(p[8:]) != le.Uint64(p) {
			continue
		}
		if best < 0 || le.Uint64(p[72:]) > r.u64(best*r.ps+72) {
			best = s
		}
	}
	if best < 0 {
		t.Fatal("no valid meta page")
	}
	return r, best
}

func (r rawDB) run(id uint64) []byte {
	off := int64(id) * r.ps
	return r.b[off : off+(1+int64(r.u32(off+24)))*r.ps]
}

func (r rawDB) reseal(id uint64) {
	p := r.run(id)
	le.PutUint64(p, xxhash.Sum64(p[8:]))
}

func (r rawDB) isBranch(id uint64) bool { return le.Uint16(r.b[int64(id)*r.ps+16:]) == 0x01 }

// leafElem returns leaf element i's stored key bytes and its value: the
// whole key in a leaf of 16-byte elements (flags 0x02), the key's middle
// in a packed leaf (flags 0x08: u8 prefix length, u8 suffix length, u8
// middle length ml or 0xff, u8 0, count+1 u16 offsets, prefix, suffix;
// then, if every middle has ml bytes, count (flags u8, middle) entries
// and the values at the offsets; else records of uvarint(middle
// length<<3 | flags), middle, value at the offsets).
func (r rawDB) leafElem(id uint64, i int) (k, v []byte) {
	p := r.run(id)
	if le.Uint16(p[16:]) == 0x08 {
		n, ml := int(le.Uint32(p[20:])), int(p[34])
		start, end := le.Uint16(p[36+2*i:]), le.Uint16(p[38+2*i:])
		if ml != 0xff {
			keys := 36 + 2*(n+1) + int(p[32]) + int(p[33])
			at := keys + i*(1+ml) + 1
			return p[at : at+ml], p[start:end]
		}
		h, w := binary.Uvarint(p[start:end])
		ks := uint64(start) + uint64(w) + h>>3
		return p[uint64(start)+uint64(w) : ks], p[ks:end]
	}
	e := p[32+i*16:]
	pos, ks, vs := le.Uint32(e[4:]), le.Uint32(e[8:]), le.Uint32(e[12:])
	return p[pos : pos+ks], p[pos+ks : pos+ks+vs]
}

// leafKey returns leaf element i's whole key.
func (r rawDB) leafKey(id uint64, i int) []byte {
	k, _ := r.leafElem(id, i)
	p := r.run(id)
	if le.Uint16(p[16:]) != 0x08 {
		return k
	}
	n, pl, sl := int(le.Uint32(p[20:])), int(p[32]), int(p[33])
	at := 36 + 2*(n+1)
	return append(append(append([]byte(nil), p[at:at+pl]...), k...), p[at+pl:at+pl+sl]...)
}

// bucketRoot finds a bucket's root page by walking the directory tree.
func (r rawDB) bucketRoot(t *testing.T, dirRoot uint64, name string) uint64 {
	t.Helper()
	id := dirRoot
	for r.isBranch(id) {
		p := r.run(id)
		n := int(le.Uint32(p[20:]))
		child := le.Uint64(p[32+8:])
		for i := 0; i < n; i++ {
			e := p[32+i*16:]
			pos, ks := le.Uint32(e), le.Uint32(e[4:])
			if string(p[pos:pos+ks]) <= name {
				child = le.Uint64(e[8:])
			}
		}
		id = child
	}
	for i := 0; i < int(r.u32(int64(id)*r.ps+20)); i++ {
		if _, v := r.leafElem(id, i); string(r.leafKey(id, i)) == name {
			return le.Uint64(v)
		}
	}
	t.Fatalf("bucket %q not found", name)
	return 0
}

// firstChild returns a branch page's first child.
func (r rawDB) firstChild(id uint64) uint64 { return r.u64(int64(id)*r.ps + 32 + 8) }

// TestDBCheck runs a real member, writes enough to give the key bucket a
// branch page, stops it, and checks the page store clean and then with
// each kind of corruption made in a copy: the command must exit 1 and
// name the real file and the byte offset of the damage.
func TestDBCheck(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m1.strata")
	m := startMember(t, dir)
	val := bytes.Repeat([]byte("v"), 300)
	for i := 0; i < 150; i++ {
		k := fmt.Sprintf("/check/%04d", i)
		if _, err := m.kv.Put(context.Background(), &pb.PutRequest{Key: []byte(k), Value: val}); err != nil {
			t.Fatal(err)
		}
	}
	dbPath := m.dbPath()

	// A running member holds the file: refused, and the file untouched.
	_, stderr, code := runCLI(t, "db", "check", "--data-dir", dir)
	if code != 1 || !strings.Contains(stderr, "database locked") || !strings.Contains(stderr, "stop it first") {
		t.Fatalf("db check on a running member: exit %d, stderr %q", code, stderr)
	}
	m.stop(t)
	pristine, err := os.ReadFile(dbPath)
	if err != nil {
		t.Fatal(err)
	}

	// Clean: exit 0 and a summary.
	out, stderr, code := runCLI(t, "db", "check", "--data-dir", dir)
	if code != 0 {
		t.Fatalf("clean db: exit %d\n%s%s", code, out, stderr)
	}
	for _, want := range []string{dbPath + ": OK", "pages:", "free ", "in use:", "buckets:", "key 150", "keys:"} {
		if !strings.Contains(out, want) {
			t.Fatalf("clean summary lacks %q:\n%s", want, out)
		}
	}
	jout, _, code := runCLI(t, "db", "check", dbPath, "-w", "json")
	var rep struct {
		Keys       uint64            `json:"keys"`
		BucketKeys map[string]uint64 `json:"bucketKeys"`
		InUse      int64             `json:"inUseBytes"`
		Problems   []json.RawMessage `json:"problems"`
	}
	if err := json.Unmarshal([]byte(jout), &rep); err != nil || code != 0 || rep.BucketKeys["key"] != 150 || rep.InUse <= 0 || len(rep.Problems) != 0 {
		t.Fatalf("json report (exit %d, %v): %s", code, err, jout)
	}
	if now, _ := os.ReadFile(dbPath); !bytes.Equal(now, pristine) {
		t.Fatal("db check changed the file")
	}

	r, slot := newestMeta(t, pristine)
	metaOff := slot * r.ps
	dirRoot, flHead := r.u64(metaOff+48), r.u64(metaOff+56)
	keyRoot := r.bucketRoot(t, dirRoot, "key")
	if !r.isBranch(keyRoot) {
		t.Fatalf("key bucket root %d is a leaf; write more", keyRoot)
	}
	leaf := r.firstChild(keyRoot)
	fl := int64(flHead) * r.ps
	nAlloc, nFreed := int64(r.u32(fl+36)), int64(r.u32(fl+40))
	if nFreed == 0 {
		t.Fatalf("newest freelist record frees nothing")
	}

	type corruption struct {
		name string
		// edit damages b (a copy of the pristine file) and returns the
		// page that must be named and text its problem must contain.
		edit func(b []byte) (page uint64, want string)
	}
	flip := func(page uint64, at int64) func(b []byte) (uint64, string) {
		return func(b []byte) (uint64, string) {
			b[int64(page)*r.ps+at] ^= 0x5a
			return page, "checksum mismatch"
		}
	}
	cases := []corruption{
		{"leaf-byte", flip(leaf, r.ps-200)},
		{"branch-byte", flip(keyRoot, 40)},
		{"newest-meta-byte", func(b []byte) (uint64, string) {
			b[metaOff+50] ^= 0x5a
			return uint64(slot), "meta page invalid"
		}},
		{"older-meta-byte", func(b []byte) (uint64, string) {
			b[(1-slot)*r.ps+70] ^= 0x5a
			return uint64(1 - slot), "meta page invalid"
		}},
		{"freelist-byte", flip(flHead, 90)},
		{"free-and-reachable", func(b []byte) (uint64, string) {
			w := rawDB{b: b, ps: r.ps}
			n := nAlloc + nFreed
			if 80+(n+1)*16 > int64(len(w.run(flHead))) {
				t.Fatal("no room for another extent in the freelist record")
			}
			le.PutUint64(b[fl+80+n*16:], leaf)
			le.PutUint64(b[fl+80+n*16+8:], 1)
			le.PutUint32(b[fl+40:], uint32(nFreed+1))
			le.PutUint32(b[fl+20:], uint32(n+1))
			w.reseal(flHead)
			return leaf, "both reachable and free"
		}},
		{"leaked", func(b []byte) (uint64, string) {
			w := rawDB{b: b, ps: r.ps}
			n := nAlloc + nFreed
			last := fl + 80 + (n-1)*16
			start := le.Uint64(b[last:])
			clear(b[last : last+16])
			le.PutUint32(b[fl+40:], uint32(nFreed-1))
			le.PutUint32(b[fl+20:], uint32(n-1))
			w.reseal(flHead)
			return start, "leaked"
		}},
		{"page-reachable-twice", func(b []byte) (uint64, string) {
			// The key bucket's branch points at its first leaf twice.
			w := rawDB{b: b, ps: r.ps}
			br := int64(keyRoot) * r.ps
			le.PutUint64(b[br+32+16+8:], leaf) // element 1's child
			w.reseal(keyRoot)
			return leaf, "reachable more than once"
		}},
		{"keys-out-of-order", func(b []byte) (uint64, string) {
			w := rawDB{b: b, ps: r.ps}
			k0, _ := w.leafElem(leaf, 0)
			k1, _ := w.leafElem(leaf, 1)
			if len(k0) != len(k1) || bytes.Equal(k0, k1) {
				t.Fatalf("stored revision keys %x and %x cannot be swapped", k0, k1)
			}
			tmp := append([]byte(nil), k0...)
			copy(k0, k1)
			copy(k1, tmp)
			w.reseal(leaf)
			return leaf, "not after the previous key"
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := append([]byte(nil), pristine...)
			page, want := c.edit(b)
			if err := os.WriteFile(dbPath, b, 0o600); err != nil {
				t.Fatal(err)
			}
			out, stderr, code := runCLI(t, "db", "check", "--data-dir", dir)
			if code != 1 {
				t.Fatalf("exit %d, want 1\n%s%s", code, out, stderr)
			}
			line := fmt.Sprintf("%s offset %d (page %d): ", dbPath, int64(page)*r.ps, page)
			found := false
			for _, l := range strings.Split(out, "\n") {
				if strings.Contains(l, line) && strings.Contains(l, want) {
					found = true
				}
			}
			if !found || !strings.Contains(out, dbPath+": CORRUPT") || !strings.Contains(stderr, "corrupt database: "+dbPath) {
				t.Fatalf("no problem %q naming %q:\n%s%s", want, line, out, stderr)
			}
			if now, _ := os.ReadFile(dbPath); !bytes.Equal(now, b) {
				t.Fatal("db check changed the file")
			}
		})
	}
	if err := os.WriteFile(dbPath, pristine, 0o600); err != nil {
		t.Fatal(err)
	}

	// Flags.
	for _, args := range [][]string{{}, {"--data-dir", dir, dbPath}, {"a", "b"}, {dbPath, "-w", "yaml"}} {
		if _, _, code := runCLI(t, append([]string{"db", "check"}, args...)...); code != 2 {
			t.Fatalf("db check %v: exit %d, want 2", args, code)
		}
	}
	// Help asked for goes to stdout, with exit 0.
	if stdout, _, code := runCLI(t, "db", "check", "-h"); code != 0 || !strings.Contains(stdout, "Examples:") || !strings.Contains(stdout, "-data-dir") {
		t.Fatalf("db check -h: exit %d\n%s", code, stdout)
	}
	if _, stderr, code := runCLI(t, "db", "check", filepath.Join(dir, "nope")); code != 1 || !strings.Contains(stderr, "no such file") {
		t.Fatalf("db check of a missing file: exit %d %s", code, stderr)
	}
}
