package grpcproxy

import (
	"context"
	"sort"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// upstream is one Watch stream to a member carrying some watches, opened
// again after a failure with every watch resumed from the revision after
// the last one it delivered. Watches are created with automatic ids and
// matched to their Created responses in order (a member answers a
// stream's creates in the order it received them).
type upstream struct {
	p      *Proxy
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	stream  pb.Watch_WatchClient
	watches map[int64]*upWatch // by the caller's id
	byUp    map[int64]*upWatch // by the member's id on the current stream
	pending []*upWatch         // creates sent, Created not yet received
	// progress receives responses to progress requests (watch id -1).
	progress func(*pb.WatchResponse)
}

type upWatch struct {
	id        int64
	req       *pb.WatchCreateRequest
	deliver   func(*pb.WatchResponse)
	upID      int64
	created   bool  // the caller has had its Created response
	lastRev   int64 // the revision up to which it has delivered everything
	canceling bool
}

func newUpstream(p *Proxy, md context.Context, parent context.Context) *upstream {
	out, _ := metadata.FromOutgoingContext(md)
	ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(parent, out))
	u := &upstream{p: p, ctx: ctx, cancel: cancel, watches: map[int64]*upWatch{}, byUp: map[int64]*upWatch{}}
	go u.run()
	return u
}

func (u *upstream) has(id int64) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	_, ok := u.watches[id]
	return ok
}

// add creates watch id with r (its WatchId is ignored); deliver gets
// its responses with WatchId set to id.
func (u *upstream) add(id int64, r *pb.WatchCreateRequest, deliver func(*pb.WatchResponse)) {
	w := &upWatch{id: id, req: r, deliver: deliver}
	if r.StartRevision > 0 {
		w.lastRev = r.StartRevision - 1
	}
	u.mu.Lock()
	u.watches[id] = w
	u.p.m.upstreamWatches.Inc()
	if u.stream != nil {
		u.sendCreate(w)
	}
	u.mu.Unlock()
}

// sendCreate sends w's create on the current stream. Holds u.mu.
func (u *upstream) sendCreate(w *upWatch) {
	c := proto.Clone(w.req).(*pb.WatchCreateRequest)
	c.WatchId = 0
	if w.lastRev > 0 {
		c.StartRevision = w.lastRev + 1
	}
	u.pending = append(u.pending, w)
	_ = u.stream.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: c}})
}

func (u *upstream) cancelWatch(id int64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	w := u.watches[id]
	if w == nil {
		return
	}
	delete(u.watches, id)
	u.p.m.upstreamWatches.Dec()
	if u.stream != nil && w.created && u.byUp[w.upID] == w {
		w.canceling = true
		_ = u.stream.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{CancelRequest: &pb.WatchCancelRequest{WatchId: w.upID}}})
		return
	}
	w.deliver(&pb.WatchResponse{WatchId: id, Canceled: true, Header: &pb.ResponseHeader{}})
}

// send passes a progress request to the member.
func (u *upstream) send(req *pb.WatchRequest) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.stream != nil {
		_ = u.stream.Send(req)
	}
}

func (u *upstream) close() {
	u.cancel()
	u.mu.Lock()
	n := len(u.watches)
	u.watches = map[int64]*upWatch{}
	u.mu.Unlock()
	u.p.m.upstreamWatches.Sub(float64(n))
}

func (u *upstream) run() {
	for u.ctx.Err() == nil {
		stream, err := pb.NewWatchClient(u.p.cc).Watch(u.ctx)
		if err != nil {
			select {
			case <-u.ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		u.mu.Lock()
		u.stream, u.byUp, u.pending = stream, map[int64]*upWatch{}, nil
		ids := make([]int64, 0, len(u.watches))
		for id := range u.watches {
			ids = append(ids, id)
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		for _, id := range ids {
			u.sendCreate(u.watches[id])
		}
		u.mu.Unlock()
		for {
			resp, err := stream.Recv()
			if err != nil {
				break
			}
			u.handle(resp)
		}
		u.mu.Lock()
		u.stream = nil
		u.mu.Unlock()
		if u.ctx.Err() == nil {
			u.p.lg.Warn("watch stream to the member lost; resuming its watches", "watches", len(ids))
		}
	}
}

func (u *upstream) handle(resp *pb.WatchResponse) {
	u.mu.Lock()
	if resp.Created {
		if len(u.pending) == 0 {
			u.mu.Unlock()
			return
		}
		w := u.pending[0]
		u.pending = u.pending[1:]
		if u.watches[w.id] != w { // canceled meanwhile
			if !resp.Canceled && u.stream != nil {
				_ = u.stream.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{CancelRequest: &pb.WatchCancelRequest{WatchId: resp.WatchId}}})
			}
			u.mu.Unlock()
			if !w.created {
				w.deliver(&pb.WatchResponse{WatchId: w.id, Created: true, Canceled: true, Header: resp.Header})
			}
			return
		}
		if resp.Canceled {
			delete(u.watches, w.id)
			u.p.m.upstreamWatches.Dec()
			u.mu.Unlock()
			out := withID(resp, w.id)
			out.Created = !w.created
			w.deliver(out)
			return
		}
		w.upID = resp.WatchId
		u.byUp[w.upID] = w
		if w.req.StartRevision == 0 && !w.created && resp.Header != nil {
			w.lastRev = resp.Header.Revision // it watches what comes after
		}
		first := !w.created
		w.created = true
		u.mu.Unlock()
		if first {
			w.deliver(withID(resp, w.id))
		}
		return
	}
	if resp.WatchId == -1 {
		f := u.progress
		u.mu.Unlock()
		if f != nil {
			f(resp)
		}
		return
	}
	w := u.byUp[resp.WatchId]
	if w == nil {
		u.mu.Unlock()
		return
	}
	if n := len(resp.Events); n > 0 && !resp.Fragment {
		w.lastRev = resp.Events[n-1].Kv.ModRevision
	} else if n == 0 && resp.Header != nil && !resp.Canceled {
		w.lastRev = max(w.lastRev, resp.Header.Revision) // a progress notification
	}
	if resp.Canceled {
		delete(u.byUp, resp.WatchId)
		if !w.canceling {
			delete(u.watches, w.id)
			u.p.m.upstreamWatches.Dec()
		}
	}
	u.mu.Unlock()
	w.deliver(withID(resp, w.id))
}

// withID is resp for the caller's watch id (the events are shared, read
// only).
func withID(resp *pb.WatchResponse, id int64) *pb.WatchResponse {
	return &pb.WatchResponse{Header: resp.Header, WatchId: id, Created: resp.Created, Canceled: resp.Canceled,
		CompactRevision: resp.CompactRevision, CancelReason: resp.CancelReason, Fragment: resp.Fragment, Events: resp.Events}
}
