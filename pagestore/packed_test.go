package pagestore

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"testing"

	"github.com/strata-db/strata/internal/testseed"
)

// packedKeySet draws a sorted set of distinct keys built to stress the
// packed format: long shared prefixes and suffixes, keys that are
// prefixes of others, single bytes, and revision keys.
func packedKeySet(rng *rand.Rand) [][]byte {
	alpha := []byte("ab_\x00\xff")
	pre := make([]byte, rng.IntN(4)*rng.IntN(80))
	for i := range pre {
		pre[i] = alpha[rng.IntN(len(alpha))]
	}
	suf := make([]byte, rng.IntN(3)*rng.IntN(300))
	for i := range suf {
		suf[i] = alpha[rng.IntN(len(alpha))]
	}
	seen := map[string]bool{}
	var keys [][]byte
	onlyRevisions := rng.IntN(3) == 0 // keys of one length: the fixed layout
	for n := 1 + rng.IntN(60); len(keys) < n; {
		var k []byte
		kind := rng.IntN(4)
		if onlyRevisions {
			kind = 0
		}
		switch kind {
		case 0: // a revision key
			k = make([]byte, 17)
			binary.BigEndian.PutUint64(k, uint64(rng.IntN(1<<20)))
			k[8] = '_'
			if rng.IntN(4) == 0 {
				binary.BigEndian.PutUint64(k[9:], uint64(rng.IntN(3)))
			}
		case 1: // a short key, maybe a prefix of another
			k = make([]byte, rng.IntN(3))
			for i := range k {
				k[i] = alpha[rng.IntN(len(alpha))]
			}
			k = append(slices.Clone(pre[:rng.IntN(len(pre)+1)]), k...)
		default: // the shared prefix and suffix around a short middle
			mid := make([]byte, rng.IntN(4))
			for i := range mid {
				mid[i] = alpha[rng.IntN(len(alpha))]
			}
			k = append(append(slices.Clone(pre), mid...), suf...)
		}
		if len(k) == 0 || seen[string(k)] {
			continue
		}
		seen[string(k)] = true
		keys = append(keys, k)
	}
	slices.SortFunc(keys, bytes.Compare)
	return keys
}

// TestPackedLeafRoundTrip writes random key sets as packed leaves and
// checks every accessor against the sorted keys: validation, key
// rebuilding, values and flags, search and exact match (for the keys
// themselves and for probes between them), the node read-back, and that
// packedFit measures what packedLayout lays out.
func TestPackedLeafRoundTrip(t *testing.T) {
	seed := testseed.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 2))
	const ps = 4096
	packed, fixed := 0, 0
	for iter := 0; iter < 3000; iter++ {
		keys := packedKeySet(rng)
		n := &node{b: &Bucket{id: 7}, leaf: true}
		for i, k := range keys {
			v := make([]byte, rng.IntN(3)*rng.IntN(40))
			for j := range v {
				v[j] = byte(rng.IntN(256))
			}
			f := uint32(0)
			switch rng.IntN(6) {
			case 0:
				f = elemFlagS2
			case 1:
				f = elemFlagZstd
			case 2:
				f = elemFlagBucket
			}
			n.inodes = append(n.inodes, inode{flags: f, key: k, value: append(v, byte(i))})
		}
		s := packedLayout(n.inodes)
		if fit, all := packedFit(n.inodes, packedLimit(ps), packedLimit(ps)); all != (s.size <= ps) || all && fit != len(keys) {
			t.Fatalf("iter %d: packedFit says %d fit (all %v), layout needs %d bytes for %d", iter, fit, all, s.size, len(keys))
		}
		if s.size > ps {
			continue
		}
		packed++
		if s.ml >= 0 {
			fixed++
		}
		p := make([]byte, ps)
		n.write(p, 9, ps)
		if pgFlags(p) != flagLeafPacked || pgOwner(p) != 7 || pgCount(p) != len(keys) {
			t.Fatalf("iter %d: header flags %#x owner %d count %d", iter, pgFlags(p), pgOwner(p), pgCount(p))
		}
		if err := validatePage(p, 100); err != nil {
			t.Fatalf("iter %d: %v", iter, err)
		}
		if end := int(le.Uint16(p[packedOffsets+2*len(keys):])); end != s.size {
			t.Fatalf("iter %d: data ends at %d, layout said %d", iter, end, s.size)
		}
		var slab keySlab
		for i, k := range keys {
			if got := appendLeafKey(nil, p, i); !bytes.Equal(got, k) {
				t.Fatalf("iter %d: key %d is %q, want %q", iter, i, got, k)
			}
			if got := slab.leafKey(p, i); !bytes.Equal(got, k) {
				t.Fatalf("iter %d: slab key %d is %q, want %q", iter, i, got, k)
			}
			f, v := leafValue(p, i)
			if f != n.inodes[i].flags || !bytes.Equal(v, n.inodes[i].value) || !bytes.Equal(p[leafValuePos(p, i):][:len(v)], v) {
				t.Fatalf("iter %d: element %d flags %d value %x, want %d %x", iter, i, f, v, n.inodes[i].flags, n.inodes[i].value)
			}
		}
		probes := slices.Clone(keys)
		for _, k := range keys {
			probes = append(probes, k[:len(k)-1], append(slices.Clone(k), 0), append(slices.Clone(k[:len(k)-1]), k[len(k)-1]+1))
			if k[len(k)-1] > 0 {
				probes = append(probes, append(slices.Clone(k[:len(k)-1]), k[len(k)-1]-1, 0xff))
			}
		}
		probes = append(probes, []byte{}, []byte{0xff, 0xff})
		for _, q := range probes {
			want := sort.Search(len(keys), func(i int) bool { return bytes.Compare(keys[i], q) >= 0 })
			found := want < len(keys) && bytes.Equal(keys[want], q)
			if got, ok := searchLeaf(p, q); got != want || ok != found {
				t.Fatalf("iter %d: search %q = %d %v, want %d %v (keys %q)", iter, q, got, ok, want, found, keys)
			}
		}
		back := &node{b: n.b, leaf: true, inodes: make([]inode, len(keys))}
		back.readPacked(p)
		for i := range keys {
			if a, b := back.inodes[i], n.inodes[i]; !bytes.Equal(a.key, b.key) || !bytes.Equal(a.value, b.value) || a.flags != b.flags {
				t.Fatalf("iter %d: read back element %d as %+v, want %+v", iter, i, a, b)
			}
		}
	}
	if packed < 1000 || fixed < 100 || packed-fixed < 100 {
		t.Fatalf("%d of 3000 key sets fit a packed page, %d of them in the fixed layout; the generator no longer tests both layouts", packed, fixed)
	}
	t.Logf("seed %d: %d packed leaves checked, %d in the fixed layout", seed, packed, fixed)
}

// TestPackedRevisionLeaf: etcd's workload of revision keys and 281-byte
// KeyValues puts 14 records in a 4 KiB leaf (13 in the 16-byte element
// format), the figure the db file size of bench/compare.sh rests on.
func TestPackedRevisionLeaf(t *testing.T) {
	path := tmpDB(t)
	db := openT(t, path, &Options{NoSync: true})
	const n = 14 * 200
	val := bytes.Repeat([]byte{0x5a}, 281)
	if err := db.Update(func(tx *Tx) error {
		b, err := tx.CreateBucket([]byte("key"))
		if err != nil {
			return err
		}
		for i := uint64(1000); i < 1000+n; i++ {
			if err := b.Put(revKey(i), val); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	checkDB(t, db)
	db.Close()
	rep, err := CheckFile(path, nil)
	if err != nil || !rep.OK() {
		t.Fatalf("check: %v %v", err, rep.Err())
	}
	if rep.PageSize == 4096 && rep.LeafPages > n/14+1 {
		t.Fatalf("%d leaves for %d records, want %d (14 a leaf)", rep.LeafPages, n, n/14)
	}
	t.Logf("%d records in %d leaves, fill %.3f", n, rep.LeafPages, rep.LeafFill)
}

// writeVersion2 runs fill with leaves written as a version 2 writer
// wrote them (16-byte elements), then marks both metas version 2.
func writeVersion2(t *testing.T, path string, fill func()) []byte {
	t.Helper()
	packLeaves = false
	defer func() { packLeaves = true }()
	fill()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for slot := 0; slot < numMetaPages; slot++ {
		m := raw[slot*osPageSize : (slot+1)*osPageSize]
		le.PutUint32(m[metaOffVersion:], 2)
		sealPage(m)
	}
	for id := numMetaPages; (id+1)*osPageSize <= len(raw); id++ {
		if p := raw[id*osPageSize:]; pgFlags(p) == flagLeafPacked && pgID(p) == pgid(id) {
			t.Fatalf("page %d is a packed leaf", id)
		}
	}
	return raw
}

// TestClassicLeavesStillRead: a file written before packed leaves (every
// leaf in the 16-byte element format, meta version 2) opens, reads, checks
// clean, takes writes (which pack the leaves they rewrite) and is then
// marked version 3.
func TestClassicLeavesStillRead(t *testing.T) {
	path := tmpDB(t)
	raw := writeVersion2(t, path, func() { fillDB(t, path, 2000) })
	ps := osPageSize
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	if rep, err := CheckFile(path, nil); err != nil || !rep.OK() || rep.Keys != 1999 {
		t.Fatalf("check of the classic file: %v %+v", err, rep)
	}
	db := openT(t, path, nil)
	get := func(k string) []byte {
		var v []byte
		db.View(func(tx *Tx) error {
			b, _ := tx.Bucket([]byte("b"))
			got, err := b.Get([]byte(k))
			if err != nil {
				t.Fatal(err)
			}
			v = slices.Clone(got)
			return nil
		})
		return v
	}
	if v := get("k01234"); len(v) != 200 {
		t.Fatalf("k01234 = %q", v)
	}
	if err := db.Update(func(tx *Tx) error {
		b, _ := tx.Bucket([]byte("b"))
		for i := 0; i < 2000; i += 7 {
			if err := b.Put([]byte(fmt.Sprintf("k%05d", i)), []byte("new")); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if v := get("k01232"); string(v) != "new" {
		t.Fatalf("k01232 = %q after the update", v)
	}
	keys := 0
	db.View(func(tx *Tx) error {
		b, _ := tx.Bucket([]byte("b"))
		prev := ""
		return b.ForEach(func(k, v []byte) error {
			if string(k) <= prev {
				t.Fatalf("key %q after %q", k, prev)
			}
			prev = string(k)
			keys++
			return nil
		})
	})
	if keys != 2000 {
		t.Fatalf("%d keys, want 2000", keys)
	}
	checkDB(t, db)
	db.Close()
	now, _ := os.ReadFile(path)
	packed := 0
	for id := numMetaPages; (id+1)*ps <= len(now); id++ {
		if p := now[id*ps:]; pgFlags(p) == flagLeafPacked && pgID(p) == pgid(id) {
			packed++
		}
	}
	if packed == 0 {
		t.Fatal("the update rewrote no leaf as packed")
	}
	if v := le.Uint32(now[metaOffVersion:]) | le.Uint32(now[ps+metaOffVersion:]); v&formatVersion != formatVersion {
		t.Fatalf("meta versions %d and %d after a commit, want one %d", le.Uint32(now[metaOffVersion:]), le.Uint32(now[ps+metaOffVersion:]), formatVersion)
	}
}

// TestPackedLayoutUnsortedKeys: a leaf read from a damaged page (right
// checksum, keys out of order) can reach the writer; its first and last
// keys then share more than a middle key holds. Found by
// FuzzOpenDamagedFile: the writer sliced that key past its end.
func TestPackedLayoutUnsortedKeys(t *testing.T) {
	keys := []string{"abcdef", "ab", "abcxyz", "b", "abcdef"}
	n := &node{b: &Bucket{id: 1}, leaf: true}
	for _, k := range keys {
		n.inodes = append(n.inodes, inode{key: []byte(k), value: []byte("v")})
	}
	s := packedLayout(n.inodes)
	if s.pl != 0 {
		t.Fatalf("prefix %d over keys %q", s.pl, keys)
	}
	p := make([]byte, 4096)
	n.write(p, 3, 4096)
	if err := validatePage(p, 10); err != nil {
		t.Fatal(err)
	}
	for i, k := range keys {
		if got := appendLeafKey(nil, p, i); string(got) != k {
			t.Fatalf("key %d = %q, want %q", i, got, k)
		}
	}
}
