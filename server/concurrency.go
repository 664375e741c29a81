package server

import (
	"context"
	"errors"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/status"

	"github.com/strata-db/strata/auth"
	"github.com/strata-db/strata/mvcc"
)

// The v3lock and v3election services (lock.go, election.go) are what
// etcd builds with its clientv3/concurrency package over an in-process
// client: sessions are leases, a lock or a candidacy is a key
// <name>/<lease id in hex> on that lease, and the owner is the key with
// the lowest create revision; a waiter watches for the deletion of the
// key created just before its own. This file is that in-process client:
// the KV and Lease calls go through this server's own handlers with the
// caller's context, so validation and permissions are those of a client
// request, and watches use the store's watch streams directly.

// sessionTTL is the TTL of the lease granted for a request without one
// (concurrency's default session TTL).
const sessionTTL = 60

// Errors of etcd's concurrency package that its lock and election servers
// return as they are (gRPC code Unknown).
var (
	errElectionNotLeader = errors.New("election: not leader")
	errElectionNoLeader  = errors.New("election: no leader")
	errSessionExpired    = errors.New("mutex: session is expired")
	errMissingLeaderKey  = errors.New(`"leader" field must be provided`)
	errLostWatcher       = errors.New("lost watcher waiting for delete")
)

type localClient struct{ s *Server }

func (s *Server) local() localClient { return localClient{s} }

// clientErr is what etcd's server returns for an error its in-process
// client got: clientv3 turns every error etcd knows by message into a
// plain error carrying the message, which gRPC then sends with code
// Unknown; others (context errors) keep their status.
func clientErr(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		if ee, known := rpctypes.Error(err).(rpctypes.EtcdError); known {
			return errors.New(ee.Error())
		}
	}
	return err
}

func (c localClient) txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	resp, err := (&kvServer{s: c.s}).Txn(ctx, r)
	return resp, clientErr(err)
}

func (c localClient) get(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	resp, err := (&kvServer{s: c.s}).Range(ctx, r)
	return resp, clientErr(err)
}

func (c localClient) del(ctx context.Context, key []byte) (*pb.DeleteRangeResponse, error) {
	resp, err := (&kvServer{s: c.s}).DeleteRange(ctx, &pb.DeleteRangeRequest{Key: key})
	return resp, clientErr(err)
}

// session returns the lease to hold keys with: id, or a new lease of
// sessionTTL seconds if id is 0. Like etcd's servers, which orphan their
// sessions at once, it does not keep the lease alive.
func (c localClient) session(ctx context.Context, id int64) (int64, error) {
	if id != 0 {
		return id, nil
	}
	resp, err := (&leaseServer{s: c.s}).LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: sessionTTL})
	if err != nil {
		return 0, clientErr(err)
	}
	return resp.ID, nil
}

// cleanupCtx is for undoing a request's write after its context ended:
// the caller's identity without its cancellation.
func (c localClient) cleanupCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), c.s.requestTimeout())
}

func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return []byte{0} // every key >= p
}

// firstCreated is a read of the oldest key under prefix (clientv3's
// WithFirstCreate); lastCreated the newest with a create revision at most
// maxCreateRev (WithLastCreate and WithMaxCreateRev).
func firstCreated(prefix []byte) *pb.RangeRequest {
	return &pb.RangeRequest{Key: prefix, RangeEnd: prefixEnd(prefix), Limit: 1,
		SortTarget: pb.RangeRequest_CREATE, SortOrder: pb.RangeRequest_ASCEND}
}

func lastCreated(prefix []byte, maxCreateRev int64) *pb.RangeRequest {
	return &pb.RangeRequest{Key: prefix, RangeEnd: prefixEnd(prefix), Limit: 1,
		SortTarget: pb.RangeRequest_CREATE, SortOrder: pb.RangeRequest_DESCEND, MaxCreateRevision: maxCreateRev}
}

// ownKey is the key a session holds under prefix.
func ownKey(prefix []byte, lease int64) []byte {
	return fmt.Appendf(append([]byte(nil), prefix...), "%x", lease)
}

func createdIs(key []byte, rev int64) *pb.Compare {
	return &pb.Compare{Key: key, Target: pb.Compare_CREATE, Result: pb.Compare_EQUAL,
		TargetUnion: &pb.Compare_CreateRevision{CreateRevision: rev}}
}

func opPut(key, val []byte, lease int64) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: key, Value: val, Lease: lease}}}
}

func opGet(r *pb.RangeRequest) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: r}}
}

func opDelete(key []byte) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: key}}}
}

// watch opens a watch on [key, end) (end nil: the key alone) from rev on
// the store, if the caller may read that range. Close the stream when
// done.
func (c localClient) watch(ctx context.Context, key, end []byte, rev int64) (*mvcc.WatchStream, error) {
	s := c.s
	ai, err := s.authInfo(ctx)
	if err != nil {
		return nil, clientErr(err)
	}
	if err := s.auth.IsRangePermitted(ai, key, end); err != nil {
		return nil, clientErr(auth.ToGRPCError(err))
	}
	ws := s.watch.NewWatchStream()
	if _, err := ws.Watch(mvcc.WatchRequest{Key: key, End: end, StartRev: rev}); err != nil {
		ws.Close()
		return nil, clientErr(toGRPCError(err))
	}
	return ws, nil
}

// nextEvents waits for the watch's next events. It returns done (and
// err nil) when the watch ended without an error of its own, as a clientv3
// watch channel closes, and an error when the context ended, the server
// stops, or the watch was canceled (compaction).
func (c localClient) nextEvents(ctx context.Context, ws *mvcc.WatchStream) (evs []*mvccpb.Event, rev int64, done bool, err error) {
	for {
		select {
		case r, ok := <-ws.Chan():
			if !ok {
				return nil, 0, true, nil
			}
			if r.Canceled || r.CompactRevision != 0 {
				if r.CompactRevision != 0 {
					return nil, 0, true, rpctypes.ErrCompacted
				}
				return nil, 0, true, errors.New(r.CancelReason)
			}
			if len(r.Events) > 0 {
				return r.Events, r.Revision, false, nil
			}
		case <-ctx.Done():
			return nil, 0, true, ctx.Err()
		case <-c.s.stopping:
			return nil, 0, true, rpctypes.ErrGRPCStopped
		}
	}
}

// waitDelete waits for key to be deleted at or after rev.
func (c localClient) waitDelete(ctx context.Context, key []byte, rev int64) error {
	ws, err := c.watch(ctx, key, nil, rev)
	if err != nil {
		return err
	}
	defer ws.Close()
	if c.s.deleteWait != nil {
		c.s.deleteWait(key)
	}
	for {
		evs, _, done, err := c.nextEvents(ctx, ws)
		if err != nil {
			return err
		}
		if done {
			return errLostWatcher
		}
		for _, ev := range evs {
			if ev.Type == mvccpb.Event_DELETE {
				return nil
			}
		}
	}
}

// waitDeletes waits until no key under prefix has a create revision at
// most maxCreateRev: it waits for the deletion of the newest such key,
// then looks again.
func (c localClient) waitDeletes(ctx context.Context, prefix []byte, maxCreateRev int64) error {
	for {
		resp, err := c.get(ctx, lastCreated(prefix, maxCreateRev))
		if err != nil {
			return err
		}
		if len(resp.Kvs) == 0 {
			return nil
		}
		if err := c.waitDelete(ctx, resp.Kvs[0].Key, resp.Header.Revision); err != nil {
			return err
		}
	}
}
