package tools

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/mvcc"
	"github.com/strata-db/strata/pagestore"
)

// strataSnapshot writes a Strata store with n puts and saves it as the
// snapshot stream does: the page-store copy followed by its SHA-256.
func strataSnapshot(t *testing.T, n int) string {
	dir := t.TempDir()
	db, err := pagestore.Open(filepath.Join(dir, "db"), nil)
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
	for i := 0; i < n; i++ {
		s.Put(uint64(i+1), 1, &pb.PutRequest{Key: []byte{'k', byte(i)}, Value: []byte("v")})
	}
	s.Close()
	be.Close()
	var buf bytes.Buffer
	if err := db.View(func(tx *pagestore.Tx) error { _, err := tx.WriteTo(&buf); return err }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	sum := sha256.Sum256(buf.Bytes())
	out := filepath.Join(dir, "snap.db")
	if err := os.WriteFile(out, append(buf.Bytes(), sum[:]...), 0o600); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestSnapshotStatusStrata(t *testing.T) {
	path := strataSnapshot(t, 10)
	st, err := Status(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Format != "strata" || st.Revision != 11 || st.TotalKey != 10 || !st.HashChecked || st.Hash == 0 {
		t.Fatalf("status %+v", st)
	}
	// A flipped byte fails the SHA-256 check.
	b, _ := os.ReadFile(path)
	b[100] ^= 1
	os.WriteFile(path, b, 0o600)
	if _, err := Status(path); !errors.Is(err, ErrSnapshotIntegrity) {
		t.Fatalf("corrupt snapshot: %v", err)
	}
}

func TestSnapshotStatusEtcd(t *testing.T) {
	path := filepath.Join(t.TempDir(), "snapshot.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		kb, err := tx.CreateBucket([]byte("key"))
		if err != nil {
			return err
		}
		// Five puts of five keys at revisions 2..6, then a delete of one.
		for rev := 2; rev <= 7; rev++ {
			k := make([]byte, 17, 18)
			k[7], k[8] = byte(rev), '_'
			key := []byte{'k', byte('0' + rev%5)}
			if rev == 7 {
				k = append(k, 't')
				key = []byte{'k', '2'}
			}
			v, _ := proto.Marshal(&mvccpb.KeyValue{Key: key, Value: []byte("v")})
			if err := kb.Put(k, v); err != nil {
				return err
			}
		}
		_, err = tx.CreateBucket([]byte("meta"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	st, err := Status(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Format != "etcd" || st.Revision != 7 || st.TotalKey != 4 || st.HashChecked {
		t.Fatalf("status %+v", st)
	}
}

// TestSnapshotStatusNamesTheRealFile: a damaged page in a db file (no
// trailer, so no SHA-256 to catch it first) is reported with the path the
// user gave and the page's offset, not a temporary copy's, and the file
// is not modified.
func TestSnapshotStatusNamesTheRealFile(t *testing.T) {
	withTrailer := strataSnapshot(t, 200)
	raw, err := os.ReadFile(withTrailer)
	if err != nil {
		t.Fatal(err)
	}
	raw = raw[:len(raw)-sha256.Size]
	path := filepath.Join(t.TempDir(), "db")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Status(path); err != nil {
		t.Fatalf("clean db file: %v", err)
	}
	const ps = 4096
	for p := 2; p*ps < len(raw); p++ {
		b := append([]byte(nil), raw...)
		b[p*ps+ps/2] ^= 0x5a
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		rep, err := pagestore.CheckFile(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if rep.OK() || rep.Problems[0].Offset != int64(p*ps) {
			continue // a free page: nothing reads it
		}
		_, err = Status(path)
		want := fmt.Sprintf("%s: page %d (offset %d): checksum mismatch", path, p, p*ps)
		if !errors.Is(err, pagestore.ErrCorrupt) || !strings.Contains(err.Error(), want) {
			t.Fatalf("status of a db file damaged at page %d: %v; want %q", p, err, want)
		}
		if now, _ := os.ReadFile(path); !bytes.Equal(now, b) {
			t.Fatal("status changed the file")
		}
		return
	}
	t.Fatal("no reachable page found to damage")
}
