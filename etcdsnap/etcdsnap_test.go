package etcdsnap

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/strata-db/strata/pagestore"
)

var seedFlag = flag.Int64("seed", 0, "seed for TestRandomShapes (0: a new one, printed)")

// openStore creates a page store and fills it with build.
func openStore(t testing.TB, build func(tx *pagestore.Tx) error) *pagestore.DB {
	t.Helper()
	db, err := pagestore.Open(filepath.Join(t.TempDir(), "db"), &pagestore.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if build != nil {
		if err := db.Update(build); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

// rawBuckets presents every bucket of tx as it is.
func rawBuckets(t testing.TB, tx *pagestore.Tx) []Bucket {
	t.Helper()
	var out []Bucket
	if err := tx.ForEach(func(name []byte, _ *pagestore.Bucket) error {
		n := append([]byte(nil), name...)
		out = append(out, Bucket{Name: n, Open: func() (Records, error) { return pageRecords(tx, n) }})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// writeFile writes a snapshot of buckets to a file and returns the path
// of the database (the file without its trailer), after checking the
// trailer and the planned size.
func writeFile(t testing.TB, buckets []Bucket) string {
	t.Helper()
	s, err := Plan(context.Background(), buckets)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "stream"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n, err := s.WriteTo(f)
	if err != nil {
		t.Fatal(err)
	}
	if n != s.StreamSize() || n%512 != sha256.Size {
		t.Fatalf("wrote %d bytes, planned %d", n, s.StreamSize())
	}
	// The file without its trailer is the database; the trailer is its
	// SHA-256.
	h := sha256.New()
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(h, f, n-sha256.Size); err != nil {
		t.Fatal(err)
	}
	trailer := make([]byte, sha256.Size)
	if _, err := io.ReadFull(f, trailer); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(h.Sum(nil), trailer) {
		t.Fatal("the trailer is not the SHA-256 of the file")
	}
	if err := f.Truncate(n - sha256.Size); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

// checkWithBolt opens the file with bbolt, runs tx.Check, and compares
// every bucket and record with what db's read view holds.
func checkWithBolt(t testing.TB, path string, db *pagestore.DB) {
	t.Helper()
	bdb, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("bbolt cannot open the file: %v", err)
	}
	defer bdb.Close()
	err = bdb.View(func(btx *bolt.Tx) error {
		var problems []string
		for err := range btx.Check() {
			problems = append(problems, err.Error())
		}
		if len(problems) > 0 {
			t.Fatalf("bbolt tx.Check: %d problems:\n%s", len(problems), strings.Join(problems[:min(20, len(problems))], "\n"))
		}
		return db.View(func(tx *pagestore.Tx) error { return compareStores(t, btx, tx) })
	})
	if err != nil {
		t.Fatal(err)
	}
}

func compareStores(t testing.TB, btx *bolt.Tx, tx *pagestore.Tx) error {
	var want []string
	if err := tx.ForEach(func(name []byte, _ *pagestore.Bucket) error {
		want = append(want, string(name))
		return nil
	}); err != nil {
		return err
	}
	var got []string
	btx.ForEach(func(name []byte, _ *bolt.Bucket) error {
		got = append(got, string(name))
		return nil
	})
	if strings.Join(got, "\x00") != strings.Join(want, "\x00") {
		t.Fatalf("buckets: bbolt has %d %.200q, the store %d %.200q", len(got), got, len(want), want)
	}
	for _, name := range want {
		b, err := tx.Bucket([]byte(name))
		if err != nil {
			return err
		}
		c := b.Cursor()
		bc := btx.Bucket([]byte(name)).Cursor()
		k, v := c.First()
		bk, bv := bc.First()
		n := 0
		for ; k != nil || bk != nil; k, v, bk, bv = nextBoth(c, bc) {
			if !bytes.Equal(k, bk) || !bytes.Equal(v, bv) {
				t.Fatalf("bucket %q record %d: bbolt has %.40x=%d bytes, the store %.40x=%d bytes", name, n, bk, len(bv), k, len(v))
			}
			n++
		}
		if err := c.Err(); err != nil {
			return err
		}
	}
	return nil
}

func nextBoth(c *pagestore.Cursor, bc *bolt.Cursor) (k, v, bk, bv []byte) {
	k, v = c.Next()
	bk, bv = bc.Next()
	return
}

// roundTrip writes db's buckets as they are and checks the file.
func roundTrip(t testing.TB, db *pagestore.DB) *Snapshot {
	t.Helper()
	tx, err := db.Begin(false)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	bs := rawBuckets(t, tx)
	path := writeFile(t, bs)
	checkWithBolt(t, path, db)
	s, _ := Plan(context.Background(), bs)
	return s
}

func put(tx *pagestore.Tx, bucket string, k, v []byte) error {
	b, err := tx.CreateBucketIfNotExists([]byte(bucket))
	if err != nil {
		return err
	}
	return b.Put(k, v)
}

func revKey(main int64) []byte {
	return fmt.Appendf(nil, "%08d_%08d", main, 0)
}

func fill(n int, b byte) []byte { return bytes.Repeat([]byte{b}, n) }

// TestShapes writes stores of named shapes and opens every file with the
// real bbolt.
func TestShapes(t *testing.T) {
	shapes := []struct {
		name  string
		build func(tx *pagestore.Tx) error
	}{
		{"empty store", nil},
		{"one empty bucket", func(tx *pagestore.Tx) error { _, err := tx.CreateBucket([]byte("key")); return err }},
		{"one key", func(tx *pagestore.Tx) error { return put(tx, "key", []byte("k"), []byte("v")) }},
		{"empty value", func(tx *pagestore.Tx) error { return put(tx, "key", []byte("k"), nil) }},
		{"bucket just inline", func(tx *pagestore.Tx) error {
			// 16 + (16+4+988) = 1024: the largest inline bucket.
			return put(tx, "b", []byte("kkkk"), fill(988, 'v'))
		}},
		{"bucket just not inline", func(tx *pagestore.Tx) error { return put(tx, "b", []byte("kkkk"), fill(989, 'v')) }},
		{"leaf exactly full", func(tx *pagestore.Tx) error {
			// 16 + 2*(16+4+2020) = 4096: two records fill a page.
			for i := 0; i < 4; i++ {
				if err := put(tx, "b", fmt.Appendf(nil, "k%03d", i), fill(2020, 'v')); err != nil {
					return err
				}
			}
			return nil
		}},
		{"100k small keys", func(tx *pagestore.Tx) error {
			for i := 0; i < 100_000; i++ {
				if err := put(tx, "key", revKey(int64(i)), fmt.Appendf(nil, "value-%d", i)); err != nil {
					return err
				}
			}
			return nil
		}},
		{"values 1 B to 1.5 MiB", func(tx *pagestore.Tx) error {
			sizes := []int{1, 100, 4000, 4063, 4064, 4065, 4080, 4096, 5000, 8192, 8193, 100_000, 1 << 20, 3 << 19, 7, 3 << 19}
			for i, sz := range sizes {
				if err := put(tx, "key", revKey(int64(i)), fill(sz, byte('a'+i))); err != nil {
					return err
				}
			}
			return nil
		}},
		{"many buckets", func(tx *pagestore.Tx) error {
			for i := 0; i < 3000; i++ {
				name := fmt.Sprintf("bucket-%05d", i)
				if _, err := tx.CreateBucket([]byte(name)); err != nil {
					return err
				}
				for j := 0; j < i%40; j++ {
					if err := put(tx, name, fmt.Appendf(nil, "k%d", j), fill(j*3, 'x')); err != nil {
						return err
					}
				}
			}
			return nil
		}},
		{"keys of max length", func(tx *pagestore.Tx) error {
			for i := 0; i < 200; i++ {
				k := fill(maxKeySize, 'k')
				copy(k[maxKeySize-4:], fmt.Sprintf("%04d", i))
				if err := put(tx, "key", k, fill(i%3, 'v')); err != nil {
					return err
				}
			}
			return put(tx, "key", []byte("a"), []byte("short key first"))
		}},
		{"bucket names of max length", func(tx *pagestore.Tx) error {
			for i := 0; i < 50; i++ {
				n := fill(maxKeySize, 'n')
				copy(n[maxKeySize-2:], fmt.Sprintf("%02d", i))
				if err := put(tx, string(n), []byte("k"), []byte("v")); err != nil {
					return err
				}
			}
			return nil
		}},
	}
	for _, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			db := openStore(t, sh.build)
			s := roundTrip(t, db)
			t.Logf("%d pages, bucket tree %d pages", s.hwm, s.root.pages)
		})
	}
}

// TestRandomShapes writes random stores; a failure replays with -seed.
func TestRandomShapes(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	t.Logf("seed %d (replay: go test ./etcdsnap -run TestRandomShapes -seed %d)", seed, seed)
	rng := rand.New(rand.NewSource(seed))
	for round := 0; round < 8; round++ {
		db := openStore(t, func(tx *pagestore.Tx) error {
			buckets := 1 + rng.Intn(30)
			if rng.Intn(4) == 0 {
				buckets = rng.Intn(400)
			}
			for b := 0; b < buckets; b++ {
				name := randBytes(rng, 1+rng.Intn(40))
				if _, err := tx.CreateBucketIfNotExists(name); err != nil {
					return err
				}
				n := rng.Intn(50)
				switch rng.Intn(5) {
				case 0:
					n = rng.Intn(3000)
				case 1:
					n = 0
				}
				for i := 0; i < n; i++ {
					k := randBytes(rng, randLen(rng, 1, 60, maxKeySize))
					v := randBytes(rng, randLen(rng, 0, 300, 100_000))
					if err := put(tx, string(name), k, v); err != nil {
						return err
					}
				}
			}
			return nil
		})
		roundTrip(t, db)
	}
}

// randLen is mostly up to typical, rarely up to most.
func randLen(rng *rand.Rand, least, typical, most int) int {
	if rng.Intn(100) == 0 {
		return least + rng.Intn(most-least+1)
	}
	return least + rng.Intn(typical-least+1)
}

func randBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	rng.Read(b)
	return b
}

// memBucket is a bucket of records in memory, for the error cases.
func memBucket(name string, recs ...kv) Bucket {
	return Bucket{Name: []byte(name), Open: fixed(recs)}
}

func TestInvalidInput(t *testing.T) {
	cases := map[string][]Bucket{
		"unsorted keys":     {memBucket("b", kv{[]byte("b"), nil}, kv{[]byte("a"), nil})},
		"duplicate key":     {memBucket("b", kv{[]byte("a"), nil}, kv{[]byte("a"), nil})},
		"empty key":         {memBucket("b", kv{nil, []byte("v")})},
		"key too long":      {memBucket("b", kv{fill(maxKeySize+1, 'k'), nil})},
		"unsorted buckets":  {memBucket("b"), memBucket("a")},
		"duplicate buckets": {memBucket("a"), memBucket("a")},
		"empty bucket name": {memBucket("")},
	}
	for name, bs := range cases {
		if _, err := Plan(context.Background(), bs); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

// TestChangedSourceIsRefused gives the writer a source whose second pass
// differs from the first: it must fail, not write a broken file.
func TestChangedSourceIsRefused(t *testing.T) {
	for _, second := range [][]kv{
		{{[]byte("a"), fill(3000, 'v')}, {[]byte("b"), fill(3000, 'v')}}, // a record fewer
		{{[]byte("a"), fill(3000, 'v')}, {[]byte("b"), fill(3000, 'v')}, {[]byte("c"), fill(3000, 'v')},
			{[]byte("d"), fill(10, 'v')}}, // a record more
		{{[]byte("a"), fill(3000, 'v')}, {[]byte("b"), fill(2999, 'v')}, {[]byte("c"), fill(3000, 'v')}}, // a value shorter
	} {
		first := []kv{{[]byte("a"), fill(3000, 'v')}, {[]byte("b"), fill(3000, 'v')}, {[]byte("c"), fill(3000, 'v')}}
		calls := 0
		b := Bucket{Name: []byte("b"), Open: func() (Records, error) {
			calls++
			if calls == 1 {
				return &sliceRecords{recs: first}, nil
			}
			return &sliceRecords{recs: second}, nil
		}}
		s, err := Plan(context.Background(), []Bucket{b})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.WriteTo(&bytes.Buffer{}); !errors.Is(err, ErrChanged) {
			t.Errorf("second pass of %d records: %v, want ErrChanged", len(second), err)
		}
	}
}

// TestBucketsSorted checks the bucket tree is in byte order, not string
// collation (bbolt compares bytes).
func TestBucketsSorted(t *testing.T) {
	names := []string{"a", "B", "\xff", "\x00x", "ab", "a\x00"}
	sort.Strings(names)
	db := openStore(t, func(tx *pagestore.Tx) error {
		for _, n := range names {
			if err := put(tx, n, []byte("k"), []byte(n)); err != nil {
				return err
			}
		}
		return nil
	})
	roundTrip(t, db)
}

// TestBoltWritesOnTop opens a written file read-write with bbolt, as
// etcdutl snapshot restore and then etcd do, and changes every kind of
// node: inline buckets grow out of line, leaves split and merge, branch
// nodes rebalance, the freelist fills. bbolt must commit and its check
// must pass after each step.
func TestBoltWritesOnTop(t *testing.T) {
	db := openStore(t, func(tx *pagestore.Tx) error {
		for i := 0; i < 30_000; i++ {
			if err := put(tx, "key", revKey(int64(i)), fmt.Appendf(nil, "v%d", i)); err != nil {
				return err
			}
		}
		if err := put(tx, "big", []byte("b"), fill(100_000, 'b')); err != nil {
			return err
		}
		_, err := tx.CreateBucket([]byte("empty"))
		if err == nil {
			err = put(tx, "small", []byte("s"), []byte("v"))
		}
		return err
	})
	tx, err := db.Begin(false)
	if err != nil {
		t.Fatal(err)
	}
	path := writeFile(t, rawBuckets(t, tx))
	tx.Rollback()
	bdb, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer bdb.Close()
	check := func(step string) {
		t.Helper()
		bdb.View(func(btx *bolt.Tx) error {
			for err := range btx.Check() {
				t.Fatalf("after %s: tx.Check: %v", step, err)
			}
			return nil
		})
	}
	steps := []struct {
		name string
		fn   func(btx *bolt.Tx) error
	}{
		{"appending keys", func(btx *bolt.Tx) error {
			b := btx.Bucket([]byte("key"))
			for i := 30_000; i < 40_000; i++ {
				if err := b.Put(revKey(int64(i)), []byte("appended")); err != nil {
					return err
				}
			}
			return nil
		}},
		{"deleting most keys", func(btx *bolt.Tx) error {
			b := btx.Bucket([]byte("key"))
			for i := 0; i < 39_000; i++ {
				if i%50 != 0 {
					if err := b.Delete(revKey(int64(i))); err != nil {
						return err
					}
				}
			}
			return nil
		}},
		{"filling inline buckets", func(btx *bolt.Tx) error {
			for _, name := range []string{"empty", "small"} {
				b := btx.Bucket([]byte(name))
				for i := 0; i < 2000; i++ {
					if err := b.Put(fmt.Appendf(nil, "k%d", i), fill(50, 'x')); err != nil {
						return err
					}
				}
			}
			return nil
		}},
		{"replacing the large value", func(btx *bolt.Tx) error {
			return btx.Bucket([]byte("big")).Put([]byte("b"), []byte("small now"))
		}},
		{"a new bucket", func(btx *bolt.Tx) error {
			b, err := btx.CreateBucket([]byte("members"))
			if err == nil {
				err = b.Put([]byte("1"), []byte("{}"))
			}
			return err
		}},
	}
	for _, s := range steps {
		if err := bdb.Update(s.fn); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		check(s.name)
	}
	if st := bdb.Stats(); st.FreePageN == 0 {
		t.Errorf("no free pages after deletes: %+v", st)
	}
}
