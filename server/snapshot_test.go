package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/schema"
)

// saveSnapshot receives a Snapshot stream as etcdctl does, checking its
// shape: 32 KiB messages with RemainingBytes counting down to 0, then the
// SHA-256 alone; no message carries a response header, as etcd's do not.
func saveSnapshot(t *testing.T, ctx context.Context, m *testMember) []byte {
	t.Helper()
	st, err := m.maint.Snapshot(ctx, &pb.SnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var data []byte
	var msgs []*pb.SnapshotResponse
	for {
		r, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, r)
		data = append(data, r.Blob...)
	}
	if len(msgs) < 2 || len(data)%512 != sha256.Size {
		t.Fatalf("%d messages, %d bytes (%% 512 = %d)", len(msgs), len(data), len(data)%512)
	}
	last := msgs[len(msgs)-1]
	if len(last.Blob) != sha256.Size || last.RemainingBytes != 0 || msgs[len(msgs)-2].RemainingBytes != 0 {
		t.Fatalf("the stream does not end with the database's last piece, then its SHA-256 alone")
	}
	for i, r := range msgs[:len(msgs)-1] {
		if len(r.Blob) > snapshotChunk || (i < len(msgs)-2 && len(r.Blob) != snapshotChunk) {
			t.Fatalf("message %d holds %d bytes", i, len(r.Blob))
		}
		if r.Version != ClusterVersion {
			t.Fatalf("message %d names version %q", i, r.Version)
		}
		if r.Header != nil { // etcd's carry none
			t.Fatalf("message %d carries a header %v", i, r.Header)
		}
	}
	img := data[:len(data)-sha256.Size]
	if sum := sha256.Sum256(img); !bytes.Equal(sum[:], data[len(img):]) {
		t.Fatal("the last message is not the SHA-256 of the database")
	}
	return img
}

// TestSnapshotStreamsEtcdFormat: Maintenance.Snapshot streams etcd's
// snapshot.db by default; bbolt opens it, its check passes, and it holds
// the keys in etcd's schema.
func TestSnapshotStreamsEtcdFormat(t *testing.T) {
	m := startMember(t, filepath.Join(t.TempDir(), "d"))
	defer m.stop(t)
	ctx := context.Background()
	for i := 0; i < 500; i++ {
		if _, err := m.kv.Put(ctx, &pb.PutRequest{Key: fmt.Appendf(nil, "k%03d", i%100), Value: bytes.Repeat([]byte{'v'}, i*10)}); err != nil {
			t.Fatal(err)
		}
	}
	img := saveSnapshot(t, ctx, m)
	if f := schema.Detect(img); f != schema.FormatEtcd {
		t.Fatalf("the snapshot is in format %q, want etcd's", f)
	}
	path := filepath.Join(t.TempDir(), "snap.db")
	if err := os.WriteFile(path, img, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			t.Errorf("tx.Check: %v", err)
		}
		for _, b := range schema.EtcdBuckets {
			if tx.Bucket(b) == nil {
				t.Errorf("no bucket %s", b)
			}
		}
		if v := tx.Bucket(schema.Meta).Get(schema.MetaStorageVersion); string(v) != ClusterVersion {
			t.Errorf("storageVersion %q", v)
		}
		if tx.Bucket(schema.Members).Stats().KeyN != 1 {
			t.Error("the member is missing")
		}
		n := 0
		err := tx.Bucket(schema.Key).ForEach(func(k, v []byte) error {
			var kv mvccpb.KeyValue
			if err := proto.Unmarshal(v, &kv); err != nil {
				return err
			}
			if want := fmt.Sprintf("k%03d", n%100); string(kv.Key) != want || len(kv.Value) != n*10 {
				t.Errorf("record %d: %s with %d bytes, want %s with %d", n, kv.Key, len(kv.Value), want, n*10)
			}
			n++
			return nil
		})
		if n != 500 {
			t.Errorf("%d key records, want 500", n)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	// A client that goes away mid-stream ends the stream; the next one
	// gets a whole snapshot.
	cctx, cancel := context.WithCancel(ctx)
	st, err := m.maint.Snapshot(cctx, &pb.SnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()
	if again := saveSnapshot(t, ctx, m); len(again) < len(img) {
		t.Fatalf("the snapshot after a cancelled one has %d bytes, the first %d", len(again), len(img))
	}

	// Strata's own format, on request.
	sctx := metadata.AppendToOutgoingContext(ctx, SnapshotFormatKey, "strata")
	if f := schema.Detect(saveSnapshot(t, sctx, m)); f != schema.FormatStrata {
		t.Fatalf("with %s=strata the snapshot is in format %q", SnapshotFormatKey, f)
	}
	bad := metadata.AppendToOutgoingContext(ctx, SnapshotFormatKey, "bolt")
	st, err = m.maint.Snapshot(bad, &pb.SnapshotRequest{})
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("an unknown format: %v, want InvalidArgument", err)
	}
}
