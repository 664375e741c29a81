package server

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestFloor: the floor answers etcd's benchmark requests over real gRPC:
// a range gets the fixed key-value, decoded as a client decodes it; each
// put and one-put txn is in the log file when its answer arrives, under
// a distinct revision, written from the log's start; anything else is
// refused.
func TestFloor(t *testing.T) {
	dir := t.TempDir()
	val := bytes.Repeat([]byte("v"), 256)
	f, err := NewFloor(dir, []byte("bench-range-key"), val)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go f.GRPC.Serve(l)
	defer func() {
		if err := f.Close(); err != nil {
			t.Error(err)
		}
		if _, err := os.Stat(filepath.Join(dir, "floor.log")); !os.IsNotExist(err) {
			t.Errorf("the log outlived Close: %v", err)
		}
	}()
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	kv := pb.NewKVClient(conn)
	ctx := context.Background()

	rr, err := kv.Range(ctx, &pb.RangeRequest{Key: []byte("bench-range-key")})
	if err != nil {
		t.Fatal(err)
	}
	if rr.Count != 1 || len(rr.Kvs) != 1 || string(rr.Kvs[0].Key) != "bench-range-key" || !bytes.Equal(rr.Kvs[0].Value, val) || rr.Header.Revision == 0 {
		t.Fatalf("range: %v", rr)
	}

	const n = 50
	revs := make(chan int64, 2*n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			r, err := kv.Put(ctx, &pb.PutRequest{Key: []byte("put-key"), Value: []byte("put-value")})
			if err != nil {
				t.Error(err)
				return
			}
			revs <- r.Header.Revision
		}()
		go func() {
			defer wg.Done()
			r, err := kv.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{
				RequestPut: &pb.PutRequest{Key: []byte("txn-key"), Value: []byte("txn-value")}}}}})
			if err != nil {
				t.Error(err)
				return
			}
			if !r.Succeeded || len(r.Responses) != 1 || r.Responses[0].GetResponsePut() == nil {
				t.Errorf("txn: %v", r)
			}
			revs <- r.Header.Revision
		}()
	}
	wg.Wait()
	close(revs)
	seen := map[int64]bool{}
	for r := range revs {
		if seen[r] || r <= rr.Header.Revision {
			t.Errorf("revision %d repeated or not after the range's %d", r, rr.Header.Revision)
		}
		seen[r] = true
	}
	b, err := os.ReadFile(filepath.Join(dir, "floor.log"))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != floorLogSize {
		t.Errorf("the log is %d bytes, want %d (zero-filled ahead)", len(b), floorLogSize)
	}
	b = bytes.TrimRight(b, "\x00")
	if got := bytes.Count(b, []byte("put-keyput-value")); got != n {
		t.Errorf("the log holds %d puts, want %d", got, n)
	}
	if got := bytes.Count(b, []byte("txn-keytxn-value")); got != n {
		t.Errorf("the log holds %d txn puts, want %d", got, n)
	}
	if len(b) != n*len("put-keyput-value")+n*len("txn-keytxn-value") {
		t.Errorf("the log holds %d bytes of puts", len(b))
	}

	if _, err := kv.Txn(ctx, &pb.TxnRequest{}); err == nil {
		t.Error("an empty txn was answered")
	}
	if _, err := kv.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte("k")}); err == nil {
		t.Error("a delete was answered")
	}
}
