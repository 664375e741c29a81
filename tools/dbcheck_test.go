package tools

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/strata-db/strata/mvcc"
	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/schema"
)

func TestDBCheckDataDirProgressAndLock(t *testing.T) {
	dir := t.TempDir()
	snap := filepath.Join(dir, "member", "snap")
	if err := os.MkdirAll(snap, 0o700); err != nil {
		t.Fatal(err)
	}
	db, err := pagestore.Open(filepath.Join(snap, "db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *pagestore.Tx) error {
		b, err := tx.CreateBucket([]byte("key"))
		if err != nil {
			return err
		}
		for i := 0; i < 3000; i++ {
			if err := b.Put([]byte{byte(i >> 8), byte(i)}, bytes.Repeat([]byte("v"), 100)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Held by a writer: refused with the reason.
	if _, err := DBCheck(dir, DBCheckOptions{}); !errors.Is(err, pagestore.ErrDatabaseLocked) || !strings.Contains(err.Error(), "stop it first") {
		t.Fatalf("check while a writer holds the file: %v", err)
	}
	db.Close()
	var bar, out bytes.Buffer
	rep, err := DBCheck(dir, DBCheckOptions{Progress: &bar})
	if err != nil || !rep.OK() {
		t.Fatalf("check: %v %v", err, rep.Err())
	}
	if !strings.Contains(bar.String(), "checking") || !strings.Contains(bar.String(), "100%") {
		t.Fatalf("progress bar: %q", bar.String())
	}
	WriteDBCheckReport(&out, rep)
	for _, want := range []string{filepath.Join(snap, "db") + ": OK", "buckets:   1 (keys: key 3000)", "keys:      3000", "free "} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("summary lacks %q:\n%s", want, out.String())
		}
	}
}

// TestDBCheckRevMeta: a check of sound pages also checks the revision
// metadata against the records, and reports a record changed behind it
// (an offline edit that left the metadata as it was) with its revision.
func TestDBCheckRevMeta(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	db, err := pagestore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	be, err := mvcc.NewBackend(db, mvcc.BackendConfig{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := mvcc.OpenStore(be, mvcc.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		if _, err := s.Put(uint64(i+1), 1, &pb.PutRequest{Key: fmt.Appendf(nil, "k%d", i%10), Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	be.Close()
	db.Close()
	if rep, err := DBCheck(path, DBCheckOptions{}); err != nil || !rep.OK() {
		t.Fatalf("check of a sound store: %v %v", err, rep.Err())
	}

	db, err = pagestore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *pagestore.Tx) error {
		kb, err := tx.Bucket(schema.Key)
		if err != nil {
			return err
		}
		k, v := kb.Cursor().First()
		return kb.Put(bytes.Clone(k), append(bytes.Clone(v), 0x2a, 0)) // a second, empty value field: still a valid KeyValue
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	rep, err := DBCheck(path, DBCheckOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	WriteDBCheckReport(&out, rep)
	if rep.OK() || !strings.Contains(out.String(), "strata_revmeta: the metadata of revision 2.0 does not match its record") {
		t.Fatalf("check of a record changed behind its metadata:\n%s", out.String())
	}
}

// TestDBCheckIndexBase: the check opens the key index's base beside the
// page store as a member would, and names the file and the offset of a
// damaged one.
func TestDBCheckIndexBase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	db, err := pagestore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	be, err := mvcc.NewBackend(db, mvcc.BackendConfig{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := mvcc.OpenStore(be, mvcc.StoreConfig{IndexBase: path + ".index", IndexBaseEvery: 10})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 30_000; i++ { // enough for the base written on close
		if _, err := s.Put(uint64(i+1), 1, &pb.PutRequest{Key: fmt.Appendf(nil, "k%05d", i%5000), Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	be.Close()
	db.Close()
	st, err := os.Stat(path + ".index")
	if err != nil {
		t.Fatalf("no index base after close: %v", err)
	}
	if rep, err := DBCheck(path, DBCheckOptions{}); err != nil || !rep.OK() {
		t.Fatalf("check of a sound store and base: %v %v", err, rep.Err())
	}
	f, err := os.OpenFile(path+".index", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	off := st.Size() / 2
	if _, err := f.WriteAt([]byte{0xff, 0x00, 0xff}, off); err != nil {
		t.Fatal(err)
	}
	f.Close()
	rep, err := DBCheck(path, DBCheckOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	WriteDBCheckReport(&out, rep)
	if rep.OK() || !strings.Contains(out.String(), path+".index") || !strings.Contains(out.String(), "checksum mismatch") {
		t.Fatalf("check of a damaged index base:\n%s", out.String())
	}
}
