package etcdsnap

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/strata-db/strata/pagestore"
)

// smallBoltImage writes, with the real bbolt, a small database in etcd's
// shape: a key bucket deep enough for a branch page, a value with
// overflow pages, inline buckets, members with hex keys, and two
// transactions (so the live meta is slot 1 and a page was freed).
func smallBoltImage(tb testing.TB) []byte {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "seed.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		tb.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		kb, err := tx.CreateBucket([]byte("key"))
		if err != nil {
			return err
		}
		for i := 0; i < 120; i++ {
			if err := kb.Put(fmt.Appendf(nil, "%016x_%016x", i+2, 0), bytes.Repeat([]byte{byte(i)}, 30)); err != nil {
				return err
			}
		}
		mb, err := tx.CreateBucket([]byte("meta"))
		if err != nil {
			return err
		}
		if err := mb.Put([]byte("consistent_index"), []byte{0, 0, 0, 0, 0, 0, 0, 9}); err != nil {
			return err
		}
		return mb.Put([]byte("large"), bytes.Repeat([]byte("v"), 5000))
	})
	if err == nil {
		err = db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucket([]byte("members"))
			if err != nil {
				return err
			}
			if err := b.Put([]byte("628170c800dbcee"), []byte(`{"id":443703413426322670,"peerURLs":["http://127.0.0.1:2380"]}`)); err != nil {
				return err
			}
			return tx.Bucket([]byte("key")).Delete(fmt.Appendf(nil, "%016x_%016x", 5, 0))
		})
	}
	if err != nil {
		tb.Fatal(err)
	}
	if err := db.Close(); err != nil {
		tb.Fatal(err)
	}
	img, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	// bbolt grows the file ahead of its pages; the fuzzer needs only the
	// pages below the high-water mark.
	hwm := max(le.Uint64(img[metaOffPgid:]), le.Uint64(img[PageSize+metaOffPgid:]))
	return img[:hwm*PageSize]
}

// TestMemberKeyNotHex: a members record whose key is not a hex id is
// refused naming the file and the record's offset. Found by
// FuzzToPageStore, when the refusal named only the bucket.
func TestMemberKeyNotHex(t *testing.T) {
	img := smallBoltImage(t)
	at := bytes.Index(img, []byte("628170c800dbcee"))
	if at < 0 {
		t.Fatal("the member key is not in the image")
	}
	img[at+14] = 'x'
	dir := t.TempDir()
	src := filepath.Join(dir, "snapshot.db")
	if err := os.WriteFile(src, img, 0o600); err != nil {
		t.Fatal(err)
	}
	err := ToPageStore(src, filepath.Join(dir, "db"), nil, nil)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), src+": offset ") || !strings.Contains(err.Error(), "not a hex id") {
		t.Fatalf("got %v, want ErrCorrupt naming the file, an offset and the key", err)
	}
}

// resealMetas recomputes both meta pages' checksums, so that damage to a
// meta's fields reaches the reader's checks behind the checksum (bbolt's
// other pages carry none).
func resealMetas(img []byte) {
	ps := PageSize
	if len(img) >= metaOffChecksum+8 {
		if v := int(le.Uint32(img[metaOffPageSize:])); v >= 512 && v <= 1<<16 && v&(v-1) == 0 {
			ps = v
		}
	}
	for slot := 0; slot < 2; slot++ {
		m := img[min(len(img), slot*ps):]
		if len(m) < metaOffChecksum+8 {
			return
		}
		le.PutUint64(m[metaOffChecksum:], metaChecksum(m))
	}
}

// FuzzToPageStore converts fuzzer-made etcd databases (a valid bbolt
// image with damage, metas optionally resealed), as a member does with a
// snapshot an etcd leader sends it. Nothing may panic; a refusal must be
// ErrCorrupt naming the file and an offset; a conversion that succeeds
// must give a page store that passes its checker.
func FuzzToPageStore(f *testing.F) {
	img := smallBoltImage(f)
	f.Add(img, false)
	f.Add(img, true)
	for _, page := range []int{3, 4, 5, 6} { // a damaged tree or freelist page
		d := append([]byte(nil), img...)
		for i := 0; i < 16 && (page+1)*PageSize <= len(d); i++ {
			d[page*PageSize+i*3] ^= 0x81
		}
		f.Add(d, false)
	}
	f.Add(img[:len(img)/2], true)

	f.Fuzz(func(t *testing.T, data []byte, resealed bool) {
		if len(data) > 1<<20 {
			return
		}
		data = append([]byte(nil), data...)
		if resealed {
			resealMetas(data)
		}
		dir := t.TempDir()
		src, dst := filepath.Join(dir, "snapshot.db"), filepath.Join(dir, "db")
		if err := os.WriteFile(src, data, 0o600); err != nil {
			t.Fatal(err)
		}
		err := ToPageStore(src, dst, &pagestore.Options{NoSync: true}, nil)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), src) || !strings.Contains(err.Error(), "offset") {
				t.Fatalf("the refusal is not ErrCorrupt naming the file and an offset: %v", err)
			}
			return
		}
		rep, err := pagestore.CheckFile(dst, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !rep.OK() {
			t.Fatalf("the converted page store fails its check: %v", rep.Err())
		}
	})
}
