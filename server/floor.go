package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
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
	off     int64 // where the committer writes next
	mu      sync.Mutex
	pending []byte          // the puts' bytes not yet written
	waiters []chan struct{} // closed once an fdatasync covers their put
	kick    chan struct{}   // wakes the committer
	done    chan struct{}
	err     error // the committer's first error, sticky
	kv      []byte
	rev     int64
}

// floorLogSize is the size of the floor's log, which the puts overwrite
// round and round.
const floorLogSize = 64 << 20

// NewFloor returns a floor whose log file is dir/floor.log and whose
// ranges answer a key-value of key key and value value. Serve its GRPC
// on a listener; Close stops the committer and removes the log.
func NewFloor(dir string, key, value []byte) (*Floor, error) {
	f, err := os.OpenFile(filepath.Join(dir, "floor.log"), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	if _, err := f.Write(make([]byte, floorLogSize)); err != nil {
		f.Close()
		return nil, err
	}
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		f.Close()
		return nil, err
	}
	stored, err := proto.Marshal(&mvccpb.KeyValue{Key: key, Value: value, CreateRevision: 2, ModRevision: 2, Version: 1})
	if err != nil {
		f.Close()
		return nil, err
	}
	fl := &Floor{log: f, kick: make(chan struct{}, 1), done: make(chan struct{}), rev: 2,
		kv: protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), stored)}
	fl.GRPC = grpc.NewServer(clientTransportOptions(1.5*1024*1024, 0, wireCodec{})...)
	pb.RegisterKVServer(fl.GRPC, floorKV{fl: fl})
	go fl.commit()
	return fl, nil
}

// Close stops the gRPC server and the committer, and removes the log.
func (fl *Floor) Close() error {
	fl.GRPC.Stop()
	close(fl.done)
	name := fl.log.Name()
	err := fl.log.Close()
	if rerr := os.Remove(name); err == nil {
		err = rerr
	}
	return err
}

// commit writes and syncs what is pending whenever kicked: the puts that
// arrive during one fdatasync share the next.
func (fl *Floor) commit() {
	var buf []byte
	for {
		select {
		case <-fl.done:
			return
		case <-fl.kick:
		}
		fl.mu.Lock()
		buf, fl.pending = fl.pending, buf[:0]
		ws := fl.waiters
		fl.waiters = nil
		fl.mu.Unlock()
		if len(ws) == 0 {
			continue
		}
		if fl.off+int64(len(buf)) > floorLogSize {
			fl.off = 0
		}
		_, err := fl.log.WriteAt(buf[:min(len(buf), floorLogSize)], fl.off)
		fl.off += int64(len(buf))
		if err == nil {
			err = unix.Fdatasync(int(fl.log.Fd()))
		}
		if err != nil {
			fl.mu.Lock()
			if fl.err == nil {
				fl.err = fmt.Errorf("floor log %s: %w", fl.log.Name(), err)
			}
			fl.mu.Unlock()
		}
		for _, w := range ws {
			close(w)
		}
	}
}

// durable appends a put of key and value and returns once an fdatasync covers it, with the
// revision the put got.
func (fl *Floor) durable(ctx context.Context, key, value []byte) (int64, error) {
	w := make(chan struct{})
	fl.mu.Lock()
	fl.pending = append(append(fl.pending, key...), value...)
	fl.waiters = append(fl.waiters, w)
	fl.rev++
	rev := fl.rev
	fl.mu.Unlock()
	select {
	case fl.kick <- struct{}{}:
	default:
	}
	select {
	case <-w:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	fl.mu.Lock()
	err := fl.err
	fl.mu.Unlock()
	return rev, err
}

type floorKV struct {
	pb.UnimplementedKVServer
	fl *Floor
}

func (k floorKV) header(rev int64) *pb.ResponseHeader {
	return &pb.ResponseHeader{ClusterId: 1, MemberId: 1, Revision: rev, RaftTerm: 2}
}

func (k floorKV) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	k.fl.mu.Lock()
	rev := k.fl.rev
	k.fl.mu.Unlock()
	resp := &pb.RangeResponse{Header: k.header(rev), Count: 1}
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
