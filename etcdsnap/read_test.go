package etcdsnap

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/strata-db/strata/pagestore"

	"github.com/strata-db/strata/internal/testseed"
)

// writeBoltFixture writes, with the real bbolt, a database shaped like
// etcd's: a large key bucket (branch pages, overflow values), small
// buckets bbolt keeps inline, an empty one, and several transactions so
// that the live meta is not the first and pages were freed. It returns
// the contents per bucket.
func writeBoltFixture(t *testing.T, path string, seed uint64) map[string]map[string][]byte {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	want := map[string]map[string][]byte{}
	put := func(tx *bolt.Tx, bucket string, k, v []byte) {
		b, err := tx.CreateBucketIfNotExists([]byte(bucket))
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Put(k, v); err != nil {
			t.Fatal(err)
		}
		if want[bucket] == nil {
			want[bucket] = map[string][]byte{}
		}
		want[bucket][string(k)] = append([]byte(nil), v...)
	}
	for round := 0; round < 4; round++ {
		err := db.Update(func(tx *bolt.Tx) error {
			for i := 0; i < 800; i++ {
				k := fmt.Appendf(nil, "%016x_%08x", rng.IntN(5000), round)
				n := rng.IntN(300)
				if rng.IntN(50) == 0 {
					n = 4096 + rng.IntN(20000) // overflow pages
				}
				v := make([]byte, n)
				for j := range v {
					v[j] = byte(rng.Uint32())
				}
				put(tx, "key", k, v)
			}
			put(tx, "meta", []byte("consistent_index"), []byte{0, 0, 0, 0, 0, 0, 0, byte(round + 1)})
			put(tx, "alarm", []byte("a"), []byte("1"))
			// etcd's member keys: hex without leading zeros.
			put(tx, "members", []byte("628170c800dbcee"), []byte(`{"id":443703413426322670,"peerURLs":["http://127.0.0.1:2380"],"name":"e1"}`))
			put(tx, "members_removed", []byte("1f"), []byte("removed"))
			if _, err := tx.CreateBucketIfNotExists([]byte("lease")); err != nil {
				return err
			}
			if want["lease"] == nil {
				want["lease"] = map[string][]byte{}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return want
}

func readAll(t *testing.T, path string) map[string]map[string][]byte {
	t.Helper()
	bf, err := OpenBolt(path)
	if err != nil {
		t.Fatal(err)
	}
	defer bf.Close()
	bks, err := bf.Buckets()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string][]byte{}
	for _, bk := range bks {
		m := map[string][]byte{}
		var last []byte
		err := bf.ForEach(bk, func(k, v []byte, _ int64) error {
			if last != nil && bytes.Compare(last, k) >= 0 {
				return fmt.Errorf("keys out of order: %x after %x", k, last)
			}
			last = append(last[:0], k...)
			m[string(k)] = append([]byte(nil), v...)
			return nil
		})
		if err != nil {
			t.Fatalf("bucket %q: %v", bk.Name, err)
		}
		got[string(bk.Name)] = m
	}
	return got
}

func sameContents(t *testing.T, what string, got, want map[string]map[string][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d buckets, want %d", what, len(got), len(want))
	}
	for name, wm := range want {
		gm, ok := got[name]
		if !ok || len(gm) != len(wm) {
			t.Fatalf("%s: bucket %q: %d records, want %d", what, name, len(gm), len(wm))
		}
		for k, v := range wm {
			if !bytes.Equal(gm[k], v) {
				t.Fatalf("%s: bucket %q key %x: %d bytes, want %d", what, name, k, len(gm[k]), len(v))
			}
		}
	}
}

func TestReadBoltMatchesBbolt(t *testing.T) {
	seed := testseed.Seed(t)
	path := filepath.Join(t.TempDir(), "etcd.db")
	want := writeBoltFixture(t, path, seed)
	sameContents(t, "read", readAll(t, path), want)

	// Converted to a page store, the same records.
	dst := filepath.Join(t.TempDir(), "strata.db")
	var progressed int64
	if err := ToPageStore(path, dst, nil, func(n int64) { progressed = n }); err != nil {
		t.Fatal(err)
	}
	if progressed == 0 {
		t.Fatal("no progress reported")
	}
	db, err := pagestore.Open(dst, &pagestore.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	got := map[string]map[string][]byte{}
	err = db.View(func(tx *pagestore.Tx) error {
		return tx.ForEach(func(name []byte, b *pagestore.Bucket) error {
			m := map[string][]byte{}
			c := b.Cursor()
			for k, v := c.First(); k != nil; k, v = c.Next() {
				m[string(k)] = append([]byte(nil), v...)
			}
			got[string(name)] = m
			return c.Err()
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	// Member records are keyed as Strata keys them.
	for _, b := range []string{"members", "members_removed"} {
		for k, v := range want[b] {
			delete(want[b], k)
			id, _ := strconv.ParseUint(k, 16, 64)
			want[b][fmt.Sprintf("%016x", id)] = v
		}
	}
	sameContents(t, "converted", got, want)
}

// TestReadBoltCorruption damages an etcd database at random (bit flips,
// zeroed sectors, truncation) and reads it all: each read either works
// or fails with ErrCorrupt naming the file and an offset; none panics.
func TestReadBoltCorruption(t *testing.T) {
	seed := testseed.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 2))
	dir := t.TempDir()
	clean := filepath.Join(dir, "clean.db")
	writeBoltFixture(t, clean, seed)
	orig, err := os.ReadFile(clean)
	if err != nil {
		t.Fatal(err)
	}
	cases := 300
	if testing.Short() {
		cases = 60
	}
	refused := 0
	for c := 0; c < cases; c++ {
		img := append([]byte(nil), orig...)
		switch c % 3 {
		case 0:
			for i := 0; i < 1+rng.IntN(8); i++ {
				img[rng.IntN(len(img))] ^= 1 << rng.IntN(8)
			}
		case 1:
			off := rng.IntN(len(img)/512) * 512
			clear(img[off : off+512])
		case 2:
			img = img[:rng.IntN(len(img))]
		}
		path := filepath.Join(dir, fmt.Sprintf("case-%d.db", c))
		if err := os.WriteFile(path, img, 0o600); err != nil {
			t.Fatal(err)
		}
		err := func() (err error) {
			defer func() {
				if r := recover(); r != nil {
					err = fmt.Errorf("panic: %v", r)
				}
			}()
			return ToPageStore(path, path+".strata", nil, nil)
		}()
		if err != nil {
			if strings.HasPrefix(err.Error(), "panic") {
				t.Fatalf("case %d (seed %d): %v", c, seed, err)
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "offset") {
				t.Fatalf("case %d (seed %d): the error does not name the file and an offset as corrupt: %v", c, seed, err)
			}
			refused++
		}
		os.Remove(path)
		os.Remove(path + ".strata")
	}
	t.Logf("%d damaged etcd databases: %d refused naming the file and offset, %d read without error (the damage hit values, free pages or the unused tail), 0 panics", cases, refused, cases-refused)
}
