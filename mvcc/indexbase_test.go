package mvcc

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/btreeidx"
	"github.com/strata-db/strata/vfs"
)

// TestDamagedBaseDataBlock: an index base damaged inside a data block,
// which only the check of its data blocks finds (the store runs that
// check beside its read of the records since the base), is dropped, and
// the store opens by reading every record instead, with the same
// contents.
func TestDamagedBaseDataBlock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	cfg := baseConfig(path, 100)
	ts := openTestStore(t, path, cfg)
	ci := uint64(0)
	for i := range 3000 {
		ci++
		key := fmt.Sprintf("/registry/configmaps/ns-%02d/cm-%05d", i%17, i%2000)
		if _, err := ts.s.Put(ci, 1, &pb.PutRequest{Key: []byte(key), Value: []byte(fmt.Sprint("v", i))}); err != nil {
			t.Fatal(err)
		}
	}
	all := &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}}
	want, err := ts.s.Range(all)
	if err != nil {
		t.Fatal(err)
	}
	ts.close()

	basePath := path + ".index"
	if _, err := btreeidx.OpenBase(vfs.Default, basePath); err != nil {
		t.Fatalf("the store left no usable base: %v", err)
	}
	b, err := os.ReadFile(basePath)
	if err != nil {
		t.Fatal(err)
	}
	// The first data block of the entries table follows the header.
	b[4096+100] ^= 0x20
	if err := os.WriteFile(basePath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := btreeidx.OpenBaseUnchecked(vfs.Default, basePath); err != nil {
		t.Fatalf("the damage is not where only the data blocks' check finds it: %v", err)
	}
	if _, err := btreeidx.OpenBase(vfs.Default, basePath); err == nil {
		t.Fatal("the damaged base opens")
	}

	ts = openTestStore(t, path, cfg)
	defer ts.close()
	if ts.s.index().Base() != nil {
		t.Fatal("the store opened on the damaged base")
	}
	checkIndexRecords(t, ts)
	got, err := ts.s.Range(all)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, want) {
		t.Fatalf("after the damaged base: %d keys at revision %d, want %d at %d", len(got.Kvs), got.Header.Revision, len(want.Kvs), want.Header.Revision)
	}
}
