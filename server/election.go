package server

import (
	"bytes"
	"context"
	"errors"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/strata-db/strata/server/v3electionpb"
)

// electionServer serves etcd's v3election service with the semantics of
// etcd's concurrency.Election (see concurrency.go): a candidate's key is
// <name>/<lease hex> holding its value, the leader is the candidate with
// the oldest key, and a leadership is checked by the key's create
// revision.
type electionServer struct{ s *Server }

func electionPrefix(name []byte) []byte { return append(append([]byte(nil), name...), '/') }

func (e *electionServer) Campaign(ctx context.Context, r *v3electionpb.CampaignRequest) (*v3electionpb.CampaignResponse, error) {
	c := e.s.local()
	lease, err := c.session(ctx, r.Lease)
	if err != nil {
		return nil, err
	}
	prefix := electionPrefix(r.Name)
	key := ownKey(prefix, lease)
	resp, err := c.txn(ctx, &pb.TxnRequest{
		Compare: []*pb.Compare{createdIs(key, 0)},
		Success: []*pb.RequestOp{opPut(key, r.Value, lease)},
		Failure: []*pb.RequestOp{opGet(&pb.RangeRequest{Key: key})},
	})
	if err != nil {
		return nil, err
	}
	rev := resp.Header.Revision
	if !resp.Succeeded {
		// Already a candidate with this lease: keep the key, update the
		// value.
		kv := resp.Responses[0].GetResponseRange().Kvs[0]
		rev = kv.CreateRevision
		if !bytes.Equal(kv.Value, r.Value) {
			if _, err := e.proclaim(ctx, key, rev, lease, r.Value); err != nil {
				if !errors.Is(err, errElectionNotLeader) {
					e.resign(ctx, key, rev)
				}
				return nil, err
			}
		}
	}
	if err := c.waitDeletes(ctx, prefix, rev-1); err != nil {
		if ctx.Err() != nil {
			cctx, cancel := c.cleanupCtx(ctx)
			e.resign(cctx, key, rev)
			cancel()
		}
		return nil, err
	}
	// The header is the one of the campaign's own write, not of the moment
	// leadership came.
	return &v3electionpb.CampaignResponse{
		Header: resp.Header,
		Leader: &v3electionpb.LeaderKey{Name: r.Name, Key: key, Rev: rev, Lease: lease},
	}, nil
}

// proclaim puts val on key if key still has create revision rev.
func (e *electionServer) proclaim(ctx context.Context, key []byte, rev, lease int64, val []byte) (*pb.ResponseHeader, error) {
	resp, err := e.s.local().txn(ctx, &pb.TxnRequest{
		Compare: []*pb.Compare{createdIs(key, rev)},
		Success: []*pb.RequestOp{opPut(key, val, lease)},
	})
	if err != nil {
		return nil, err
	}
	if !resp.Succeeded {
		return nil, errElectionNotLeader
	}
	return resp.Header, nil
}

// resign deletes key if it still has create revision rev; a leadership
// already lost is no error.
func (e *electionServer) resign(ctx context.Context, key []byte, rev int64) (*pb.ResponseHeader, error) {
	resp, err := e.s.local().txn(ctx, &pb.TxnRequest{
		Compare: []*pb.Compare{createdIs(key, rev)},
		Success: []*pb.RequestOp{opDelete(key)},
	})
	if err != nil {
		return nil, err
	}
	return resp.Header, nil
}

func (e *electionServer) Proclaim(ctx context.Context, r *v3electionpb.ProclaimRequest) (*v3electionpb.ProclaimResponse, error) {
	if r.Leader == nil {
		return nil, errMissingLeaderKey
	}
	// As in etcd, a leader key without a lease gets a new one.
	lease, err := e.s.local().session(ctx, r.Leader.Lease)
	if err != nil {
		return nil, err
	}
	hdr, err := e.proclaim(ctx, r.Leader.Key, r.Leader.Rev, lease, r.Value)
	if err != nil {
		return nil, err
	}
	return &v3electionpb.ProclaimResponse{Header: hdr}, nil
}

func (e *electionServer) Resign(ctx context.Context, r *v3electionpb.ResignRequest) (*v3electionpb.ResignResponse, error) {
	if r.Leader == nil {
		return nil, errMissingLeaderKey
	}
	if _, err := e.s.local().session(ctx, r.Leader.Lease); err != nil {
		return nil, err
	}
	hdr, err := e.resign(ctx, r.Leader.Key, r.Leader.Rev)
	if err != nil {
		return nil, err
	}
	return &v3electionpb.ResignResponse{Header: hdr}, nil
}

func (e *electionServer) Leader(ctx context.Context, r *v3electionpb.LeaderRequest) (*v3electionpb.LeaderResponse, error) {
	resp, err := e.s.local().get(ctx, firstCreated(electionPrefix(r.Name)))
	if err != nil {
		return nil, err
	}
	if len(resp.Kvs) == 0 {
		return nil, errElectionNoLeader
	}
	return &v3electionpb.LeaderResponse{Header: resp.Header, Kv: resp.Kvs[0]}, nil
}

// Observe streams the leader's value, then each value it proclaims, until
// it is gone; then the next leader's, and so on. Like etcd's, it ends
// without error when its watch is lost (a compaction).
func (e *electionServer) Observe(r *v3electionpb.LeaderRequest, stream v3electionpb.ObserveServer) error {
	ctx := stream.Context()
	c := e.s.local()
	prefix := electionPrefix(r.Name)
	send := func(hdr *pb.ResponseHeader, kv *mvccpb.KeyValue) error {
		return stream.Send(&v3electionpb.LeaderResponse{Header: hdr, Kv: kv})
	}
	for {
		resp, err := c.get(ctx, firstCreated(prefix))
		if err != nil {
			return observeEnd(ctx, err)
		}
		var hdr *pb.ResponseHeader
		var kv *mvccpb.KeyValue
		if len(resp.Kvs) > 0 {
			hdr, kv = resp.Header, resp.Kvs[0]
		} else {
			// No leader: wait for the first key put under the prefix.
			hdr, kv, err = e.firstPut(ctx, prefix, resp.Header.Revision)
			if err != nil || kv == nil {
				return observeEnd(ctx, err)
			}
		}
		if err := send(hdr, kv); err != nil {
			return err
		}
		// Follow this leader's key until it is deleted.
		ws, err := c.watch(ctx, kv.Key, nil, hdr.Revision+1)
		if err != nil {
			return observeEnd(ctx, err)
		}
		deleted := false
		for !deleted {
			evs, rev, done, err := c.nextEvents(ctx, ws)
			if done || err != nil {
				ws.Close()
				return observeEnd(ctx, err)
			}
			for _, ev := range evs {
				if ev.Type == mvccpb.Event_DELETE {
					deleted = true
					break
				}
				if err := send(e.s.header(rev), ev.Kv); err != nil {
					ws.Close()
					return err
				}
			}
		}
		ws.Close()
	}
}

// firstPut waits for the first put under prefix from rev on and returns
// it with a header at its revision; nil if the watch was lost.
func (e *electionServer) firstPut(ctx context.Context, prefix []byte, rev int64) (*pb.ResponseHeader, *mvccpb.KeyValue, error) {
	c := e.s.local()
	ws, err := c.watch(ctx, prefix, prefixEnd(prefix), rev)
	if err != nil {
		return nil, nil, err
	}
	defer ws.Close()
	for {
		evs, _, done, err := c.nextEvents(ctx, ws)
		if done || err != nil {
			return nil, nil, err
		}
		for _, ev := range evs {
			if ev.Type == mvccpb.Event_PUT {
				return e.s.header(ev.Kv.ModRevision), ev.Kv, nil
			}
		}
	}
}

// observeEnd is how an Observe stream ends: with the context's error once
// the client went away, with the server's when it stops, and else without
// error, as etcd's ends when its observer stops for any other reason.
func observeEnd(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, rpctypes.ErrGRPCStopped) {
		return err
	}
	return nil
}
