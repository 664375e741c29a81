package server

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/strata-db/strata/server/v3lockpb"
)

// lockServer serves etcd's v3lock service with the semantics of etcd's
// concurrency.Mutex (see concurrency.go): the lock key is
// <name>/<lease hex>, and the lock is held once every key under <name>/
// created before it is gone.
type lockServer struct{ s *Server }

func (l *lockServer) Lock(ctx context.Context, r *v3lockpb.LockRequest) (*v3lockpb.LockResponse, error) {
	c := l.s.local()
	lease, err := c.session(ctx, r.Lease)
	if err != nil {
		return nil, err
	}
	prefix := append(append([]byte(nil), r.Name...), '/')
	key := ownKey(prefix, lease)
	// Join the waiters with a key on the session's lease, or find the key
	// this lease already has, and read the current owner in the same txn.
	resp, err := c.txn(ctx, &pb.TxnRequest{
		Compare: []*pb.Compare{createdIs(key, 0)},
		Success: []*pb.RequestOp{opPut(key, nil, lease), opGet(firstCreated(prefix))},
		Failure: []*pb.RequestOp{opGet(&pb.RangeRequest{Key: key}), opGet(firstCreated(prefix))},
	})
	if err != nil {
		return nil, err
	}
	myRev := resp.Header.Revision
	if !resp.Succeeded {
		myRev = resp.Responses[0].GetResponseRange().Kvs[0].CreateRevision
	}
	owner := resp.Responses[1].GetResponseRange().Kvs
	if len(owner) == 0 || owner[0].CreateRevision == myRev {
		return &v3lockpb.LockResponse{Header: resp.Header, Key: key}, nil
	}
	unlock := func() {
		cctx, cancel := c.cleanupCtx(ctx)
		defer cancel()
		c.del(cctx, key)
	}
	if err := c.waitDeletes(ctx, prefix, myRev-1); err != nil {
		unlock()
		return nil, err
	}
	// The key is gone if the session's lease expired meanwhile.
	g, err := c.get(ctx, &pb.RangeRequest{Key: key})
	if err != nil {
		unlock()
		return nil, err
	}
	if len(g.Kvs) == 0 {
		return nil, errSessionExpired
	}
	return &v3lockpb.LockResponse{Header: g.Header, Key: key}, nil
}

func (l *lockServer) Unlock(ctx context.Context, r *v3lockpb.UnlockRequest) (*v3lockpb.UnlockResponse, error) {
	resp, err := l.s.local().del(ctx, r.Key)
	if err != nil {
		return nil, err
	}
	return &v3lockpb.UnlockResponse{Header: resp.Header}, nil
}
