// Package readpath benchmarks the server's read path inside the process,
// without gRPC or a network: the store's Range as the in-process callers
// use it (decoded key-values, then encoded for the wire) against
// RangeEncoded as the gRPC handler uses it (stored bytes framed straight
// into the response), each followed by the protobuf encoding gRPC would
// do. So a regression in the read path shows here without starting two
// servers:
//
//	make bench-readpath
//	go test -run '^$' -bench . -benchtime 2s ./bench/readpath/
//
// The data is compare.sh's: 256-byte values, one key, a 100-key prefix,
// a 10,000-key prefix read 500 at a time (kube-apiserver's paginated
// list), on a real page store in a temp dir.
package readpath

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/mvcc"
	"github.com/strata-db/strata/pagestore"
)

func openStore(b *testing.B) *mvcc.Store {
	b.Helper()
	db, err := pagestore.Open(filepath.Join(b.TempDir(), "db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	be, err := mvcc.NewBackend(db, mvcc.BackendConfig{BatchInterval: 100 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	s, err := mvcc.OpenStore(be, mvcc.StoreConfig{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = s.Close()
		_ = be.Close()
		_ = db.Close()
	})
	val := make([]byte, 256)
	for i := range val {
		val[i] = byte(i * 7)
	}
	ci := uint64(0)
	put := func(k string) {
		ci++
		if _, err := s.Put(ci, 1, &pb.PutRequest{Key: []byte(k), Value: val}); err != nil {
			b.Fatal(err)
		}
	}
	put("bench-range-key")
	for i := 0; i < 100; i++ {
		put(fmt.Sprintf("a100/%04d", i))
	}
	for i := 0; i < 10000; i++ {
		put(fmt.Sprintf("b10k/%05d", i))
	}
	if err := be.ForceCommit(); err != nil {
		b.Fatal(err)
	}
	return s
}

var workloads = []struct {
	name string
	req  *pb.RangeRequest
	kvs  int
}{
	{"one-key", &pb.RangeRequest{Key: []byte("bench-range-key")}, 1},
	{"prefix-100", &pb.RangeRequest{Key: []byte("a100/"), RangeEnd: []byte("a1000")}, 100},
	{"prefix-10k-limit-500", &pb.RangeRequest{Key: []byte("b10k/"), RangeEnd: []byte("b10k0"), Limit: 500}, 500},
}

func BenchmarkRange(b *testing.B) {
	s := openStore(b)
	for _, w := range workloads {
		for _, mode := range []string{"decoded", "encoded"} {
			read := s.Range
			if mode == "encoded" {
				read = s.RangeEncoded
			}
			b.Run(w.name+"/"+mode, func(b *testing.B) {
				// Check once that the response decodes to what was asked.
				resp, err := read(w.req)
				if err != nil {
					b.Fatal(err)
				}
				wire, err := proto.Marshal(resp)
				if err != nil {
					b.Fatal(err)
				}
				var got pb.RangeResponse
				if err := proto.Unmarshal(wire, &got); err != nil || len(got.Kvs) != w.kvs {
					b.Fatalf("%d kvs (%v), want %d", len(got.Kvs), err, w.kvs)
				}
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					resp, err := read(w.req)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := proto.Marshal(resp); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ranges/s")
				b.ReportMetric(float64(len(wire)), "bytes/resp")
			})
		}
	}
}
