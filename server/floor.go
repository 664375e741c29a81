package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/server/config"
)

// Floor is a measuring instrument, not a server: the client API's gRPC
// server (the same transport options and codec as a member's) with
// nothing behind it but what any durable key-value server must do. A
// Range answers one fixed key-value, already encoded, as a member's
// encoded range does; a Put or a one-put Txn is written to a log file
// and answered once an fdatasync covering it has returned, one fdatasync
// for every put waiting when the previous one ends (group commit, no
// raft, no index, no page store). The log is zero-filled ahead, as a
// member's WAL segments are, and written round and round: an fdatasync
// flushes the data and no file size or block allocation. No unary
// interceptor runs: no metrics, no auth, no quota.
//
// bench/compare.sh runs etcd's benchmark against it next to strata and
// etcd. What a member spends beyond the floor's CPU per request is
// strata's own; the floor's ratio against etcd is the best a server on
// gRPC-go could show on this machine with this client, since the client
// shares the CPUs.
type Floor struct {
	GRPC *grpc.Server

	log     *os.File
	off     int64 // where the committer writes next (its own)
	rev     atomic.Int64
	mu      sync.Mutex
	batch   *floorBatch   // the puts not yet written
	kick    chan struct{} // wakes the committer
	done    chan struct{} // closed by Close
	stopped chan struct{} // closed by the committer on its way out
	kv      []byte
}

// floorBatch is the puts one write and fdatasync make durable.
type floorBatch struct {
	data []byte
	puts int
	done chan struct{} // closed once err is set
	err  error
}

// floorLogSize is the size of the floor's log, which the puts overwrite
// round and round.
const floorLogSize = 64 << 20

// NewFloor returns a floor whose log file is dir/floor.log and whose
// ranges answer a key-value of key key and value value. Serve its GRPC
// on a listener; Close stops the committer and removes the log.
func NewFloor(dir string, key, value []byte) (_ *Floor, err error) {
	f, err := os.OpenFile(filepath.Join(dir, "floor.log"), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	if _, err := f.Write(make([]byte, floorLogSize)); err != nil {
		return nil, err
	}
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		return nil, err
	}
	stored, err := proto.Marshal(&mvccpb.KeyValue{Key: key, Value: value, CreateRevision: 2, ModRevision: 2, Version: 1})
	if err != nil {
		return nil, err
	}
	fl := &Floor{log: f, batch: newFloorBatch(), kick: make(chan struct{}, 1), done: make(chan struct{}),
		stopped: make(chan struct{}), kv: protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), stored)}
	fl.rev.Store(2)
	fl.GRPC = grpc.NewServer(clientTransportOptions(config.DefaultMaxRequestBytes, 0, wireCodec{})...)
	pb.RegisterKVServer(fl.GRPC, floorKV{fl: fl})
	go fl.commit()
	return fl, nil
}

func newFloorBatch() *floorBatch { return &floorBatch{done: make(chan struct{})} }

// Close stops the gRPC server and the committer, and removes the log.
func (fl *Floor) Close() error {
	fl.GRPC.Stop()
	close(fl.done)
	<-fl.stopped
	name := fl.log.Name()
	err := fl.log.Close()
	if rerr := os.Remove(name); err == nil {
		err = rerr
	}
	return err
}

// commit writes and syncs the pending batch whenever kicked: the puts
// that arrive during one fdatasync share the next.
func (fl *Floor) commit() {
	defer close(fl.stopped)
	for {
		select {
		case <-fl.done:
			return
		case <-fl.kick:
		}
		fl.mu.Lock()
		b := fl.batch
		fl.batch = newFloorBatch()
		fl.mu.Unlock()
		if b.puts == 0 {
			continue
		}
		if fl.off+int64(len(b.data)) > floorLogSize {
			fl.off = 0
		}
		_, err := fl.log.WriteAt(b.data, fl.off)
		fl.off += int64(len(b.data))
		if err == nil {
			err = unix.Fdatasync(int(fl.log.Fd()))
		}
		if err != nil {
			b.err = fmt.Errorf("floor log %s: %w", fl.log.Name(), err)
		}
		close(b.done)
	}
}

// durable adds a put of key and value to the pending batch and returns
// once an fdatasync covers it, with the revision the put got.
func (fl *Floor) durable(ctx context.Context, key, value []byte) (int64, error) {
	fl.mu.Lock()
	b := fl.batch
	b.data = append(append(b.data, key...), value...)
	b.puts++
	rev := fl.rev.Add(1)
	fl.mu.Unlock()
	select {
	case fl.kick <- struct{}{}:
	default:
	}
	select {
	case <-b.done:
		return rev, b.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

type floorKV struct {
	pb.UnimplementedKVServer
	fl *Floor
}

func (k floorKV) header(rev int64) *pb.ResponseHeader {
	return &pb.ResponseHeader{ClusterId: 1, MemberId: 1, Revision: rev, RaftTerm: 2}
}

func (k floorKV) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	resp := &pb.RangeResponse{Header: k.header(k.fl.rev.Load()), Count: 1}
	resp.ProtoReflect().SetUnknown(k.fl.kv)
	return resp, nil
}

func (k floorKV) Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	rev, err := k.fl.durable(ctx, r.Key, r.Value)
	if err != nil {
		return nil, err
	}
	return &pb.PutResponse{Header: k.header(rev)}, nil
}

func (k floorKV) Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	if len(r.Compare) != 0 || len(r.Failure) != 0 || len(r.Success) != 1 || r.Success[0].GetRequestPut() == nil {
		return nil, fmt.Errorf("floor: only a txn of one put")
	}
	p := r.Success[0].GetRequestPut()
	rev, err := k.fl.durable(ctx, p.Key, p.Value)
	if err != nil {
		return nil, err
	}
	h := k.header(rev)
	return &pb.TxnResponse{Header: h, Succeeded: true, Responses: []*pb.ResponseOp{
		{Response: &pb.ResponseOp_ResponsePut{ResponsePut: &pb.PutResponse{Header: h}}}}}, nil
}

func (floorKV) DeleteRange(context.Context, *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	return nil, fmt.Errorf("floor: no deletes")
}

func (floorKV) Compact(context.Context, *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	return nil, fmt.Errorf("floor: no compaction")
}
