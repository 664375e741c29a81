package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// TestBootstrapDefrag: --bootstrap-defrag-threshold-megabytes, as etcd's.
// A data dir with megabytes of free pages is started twice: with a
// threshold above what defragmenting would free, the server logs etcd's
// "Skipping defragmentation" line with etcd's fields and leaves the file
// alone; with a threshold below it, the file is defragmented at start
// (etcd's "defragmenting" and "finished defragmenting directory" lines)
// and the data reads back.
func TestBootstrapDefrag(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	m := startMember(t, dir)
	ctx := context.Background()
	val := incompressible(8<<10, 2)
	var rev int64
	for i := 0; i < 600; i++ {
		r, err := m.kv.Put(ctx, &pb.PutRequest{Key: fmt.Appendf(nil, "k%03d", i), Value: val})
		if err != nil {
			t.Fatal(err)
		}
		rev = r.Header.Revision
	}
	if _, err := m.kv.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte("k"), RangeEnd: []byte("l")}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.kv.Put(ctx, &pb.PutRequest{Key: []byte("kept"), Value: []byte("yes")}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.kv.Compact(ctx, &pb.CompactionRequest{Revision: rev + 1, Physical: true}); err != nil {
		t.Fatal(err)
	}
	m.stop(t)
	dbPath := filepath.Join(dir, "member", "snap", "db")
	size := func() int64 {
		st, err := os.Stat(dbPath)
		if err != nil {
			t.Fatal(err)
		}
		return st.Size()
	}
	before := size()

	// Threshold 1000 MiB: skipped, with etcd's fields.
	var lg jsonLog
	m = startHooked(t, m.args, m.client, lg.logger(), storageHooks{})
	m.stop(t)
	skips := lg.records(t, "Skipping defragmentation")
	if len(skips) != 0 {
		t.Fatalf("skip line without the flag: %v", skips)
	}
	lg = jsonLog{}
	m = startHooked(t, append(m.args[:len(m.args):len(m.args)], "--bootstrap-defrag-threshold-megabytes", "1000"), m.client, lg.logger(), storageHooks{})
	m.stop(t)
	skips = lg.records(t, "Skipping defragmentation")
	if len(skips) != 1 {
		t.Fatalf("%d skip lines, want 1", len(skips))
	}
	r := skips[0]
	if r["bootstrap-defrag-threshold-bytes"] != float64(1000<<20) || r["bootstrap-defrag-threshold"] != "1.0 GB" ||
		r["current-db-size-bytes"] != float64(before) || r["current-db-size"] != humanBytes(uint64(before)) {
		t.Errorf("skip line %v (file %d bytes)", r, before)
	}
	if _, ok := r["current-db-size-in-use-bytes"].(float64); !ok || r["current-db-size-in-use"] == nil {
		t.Errorf("skip line %v lacks the size in use", r)
	}
	if len(lg.records(t, "defragmenting")) != 0 || size() != before {
		t.Fatalf("defragmented although the threshold was not reached (%d -> %d bytes)", before, size())
	}

	// Threshold 1 MiB: defragmented.
	lg = jsonLog{}
	m = startHooked(t, append(m.args[:len(m.args):len(m.args)], "--bootstrap-defrag-threshold-megabytes", "1"), m.client, lg.logger(), storageHooks{})
	if len(lg.records(t, "Skipping defragmentation")) != 0 || len(lg.records(t, "finished defragmenting directory")) != 1 {
		t.Fatalf("no defragmentation at start: %s", lg.buf.String())
	}
	got, err := m.kv.Range(ctx, &pb.RangeRequest{Key: []byte("kept")})
	if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "yes" {
		t.Fatalf("after the bootstrap defrag: %v, %v", got, err)
	}
	m.stop(t)
	if after := size(); after > before-(1<<20) {
		t.Errorf("file %d bytes after the bootstrap defrag, %d before", after, before)
	}
}

// TestHumanBytes: etcd's logs format sizes with go-humanize's Bytes.
func TestHumanBytes(t *testing.T) {
	for n, want := range map[uint64]string{
		0: "0 B", 9: "9 B", 10: "10 B", 999: "999 B", 1000: "1.0 kB", 16384: "16 kB", 28672: "29 kB",
		98304: "98 kB", 1500000: "1.5 MB", 9999: "10 kB", 1048576000: "1.0 GB", 2147483648: "2.1 GB",
	} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
