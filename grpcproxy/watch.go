package grpcproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// The Watch service. A client stream's watchers are of two kinds:
//
//   - coalesced: a watcher that starts at the current revision (no start
//     revision) joins the group of every watcher, from any client with the
//     same auth token, of the same range with the same options. A group
//     holds one watch on a member, on its own upstream stream, and fans
//     its responses out; it ends with its last watcher.
//   - own: a watcher with a start revision gets a watch of its own on the
//     client stream's upstream stream, created with the client's watch id,
//     so the member's responses pass through unchanged.
//
// When the member under an upstream stream dies, the stream is opened
// again (the connection has failed over to another endpoint) and every
// watch on it created again from the revision after the last one it
// delivered: clients see no gap and no repeated event. A member that
// compacted that revision away cancels the watch with the compact
// revision, as it would have done directly.

type watchProxy struct {
	pb.UnimplementedWatchServer
	p      *Proxy
	mu     sync.Mutex
	groups map[groupKey]*group
	ctx    context.Context
	cancel context.CancelFunc
}

func newWatchProxy(p *Proxy) *watchProxy {
	ctx, cancel := context.WithCancel(context.Background())
	return &watchProxy{p: p, groups: map[groupKey]*group{}, ctx: ctx, cancel: cancel}
}

func (w *watchProxy) stop() { w.cancel() }

// groupKey is what coalesced watchers share.
type groupKey struct {
	token, key, end        string
	prevKV, progress, frag bool
	noPut, noDelete        bool
}

func coalescable(r *pb.WatchCreateRequest) bool { return r.StartRevision == 0 }

func keyOf(token string, r *pb.WatchCreateRequest) groupKey {
	k := groupKey{token: token, key: string(r.Key), end: string(r.RangeEnd), prevKV: r.PrevKv,
		progress: r.ProgressNotify, frag: r.Fragment}
	for _, f := range r.Filters {
		switch f {
		case pb.WatchCreateRequest_NOPUT:
			k.noPut = true
		case pb.WatchCreateRequest_NODELETE:
			k.noDelete = true
		}
	}
	return k
}

// clientStream is one client's Watch stream.
type clientStream struct {
	w      *watchProxy
	ctx    context.Context
	cancel context.CancelFunc
	sendc  chan *pb.WatchResponse
	token  string

	mu     sync.Mutex
	nextID int64
	joined map[int64]*group // coalesced watchers by id
	own    *upstream        // the stream for the client's own watchers
}

func (w *watchProxy) Watch(stream pb.Watch_WatchServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	cs := &clientStream{w: w, ctx: ctx, cancel: cancel, sendc: make(chan *pb.WatchResponse, 256), joined: map[int64]*group{}}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		cs.token = strings.Join(md.Get("token"), ",")
	}
	defer cs.close()
	senderr := make(chan error, 1)
	go func() {
		for {
			select {
			case r := <-cs.sendc:
				if err := stream.Send(r); err != nil {
					senderr <- err
					cancel()
					return
				}
			case <-ctx.Done():
				senderr <- nil
				return
			}
		}
	}()
	for {
		req, err := stream.Recv()
		if err != nil {
			cancel()
			if errors.Is(err, io.EOF) {
				err = nil
			}
			if serr := <-senderr; serr != nil {
				return serr
			}
			return err
		}
		switch r := req.RequestUnion.(type) {
		case *pb.WatchRequest_CreateRequest:
			cs.create(r.CreateRequest)
		case *pb.WatchRequest_CancelRequest:
			cs.cancelWatch(r.CancelRequest.WatchId)
		case *pb.WatchRequest_ProgressRequest:
			if u := cs.upstream(); u != nil {
				u.send(req)
			}
		}
	}
}

// send queues a response for the client; false once the stream is done.
func (cs *clientStream) send(r *pb.WatchResponse) bool {
	if ns := cs.w.p.ns; ns != nil {
		r = ns.watchResp(r)
	}
	select {
	case cs.sendc <- r:
		return true
	case <-cs.ctx.Done():
		return false
	}
}

func (cs *clientStream) create(r *pb.WatchCreateRequest) {
	if ns := cs.w.p.ns; ns != nil {
		ns.watchReq(r)
	}
	cs.mu.Lock()
	id := r.WatchId
	if id == 0 { // AutoWatchID
		for {
			id = cs.nextID
			cs.nextID++
			if _, used := cs.joined[id]; !used && (cs.own == nil || !cs.own.has(id)) {
				break
			}
		}
	}
	cs.mu.Unlock()
	if coalescable(r) {
		g, hdr, err := cs.w.join(cs, id, r)
		if err != nil {
			cs.send(&pb.WatchResponse{WatchId: id, Created: true, Canceled: true, CancelReason: err.Error(), Header: &pb.ResponseHeader{}})
			return
		}
		cs.mu.Lock()
		cs.joined[id] = g
		cs.mu.Unlock()
		cs.send(&pb.WatchResponse{WatchId: id, Created: true, Header: hdr})
		return
	}
	u := cs.upstream()
	if u == nil {
		cs.send(&pb.WatchResponse{WatchId: id, Created: true, Canceled: true, CancelReason: "grpc-proxy: no member answers", Header: &pb.ResponseHeader{}})
		return
	}
	c := proto.Clone(r).(*pb.WatchCreateRequest)
	c.WatchId = id
	u.add(id, c, func(resp *pb.WatchResponse) { cs.send(resp) })
}

func (cs *clientStream) cancelWatch(id int64) {
	cs.mu.Lock()
	g, ok := cs.joined[id]
	delete(cs.joined, id)
	u := cs.own
	cs.mu.Unlock()
	if ok {
		cs.w.leave(g, cs, id)
		cs.send(&pb.WatchResponse{WatchId: id, Canceled: true, Header: g.header()})
		return
	}
	if u != nil {
		u.cancelWatch(id)
	}
}

// upstream returns the client's own upstream stream, opening it.
func (cs *clientStream) upstream() *upstream {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.own == nil {
		cs.own = newUpstream(cs.w.p, outgoing(cs.ctx), cs.ctx)
		cs.own.mu.Lock()
		cs.own.progress = func(r *pb.WatchResponse) { cs.send(r) }
		cs.own.mu.Unlock()
	}
	return cs.own
}

func (cs *clientStream) close() {
	cs.mu.Lock()
	joined := cs.joined
	cs.joined = map[int64]*group{}
	u := cs.own
	cs.mu.Unlock()
	for id, g := range joined {
		cs.w.leave(g, cs, id)
	}
	if u != nil {
		u.close()
	}
}

// group is coalesced watchers and their shared upstream watch.
type group struct {
	key     groupKey
	up      *upstream
	mu      sync.Mutex
	members map[*clientStream]map[int64]bool
	last    *pb.ResponseHeader
}

func (g *group) header() *pb.ResponseHeader {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.last == nil {
		return &pb.ResponseHeader{}
	}
	return proto.Clone(g.last).(*pb.ResponseHeader)
}

// join adds watcher id of cs to its group, creating the group (and its
// upstream watch) for the first one.
func (w *watchProxy) join(cs *clientStream, id int64, r *pb.WatchCreateRequest) (*group, *pb.ResponseHeader, error) {
	k := keyOf(cs.token, r)
	w.mu.Lock()
	g := w.groups[k]
	if g != nil {
		g.mu.Lock()
		if g.members[cs] == nil {
			g.members[cs] = map[int64]bool{}
		}
		g.members[cs][id] = true
		g.mu.Unlock()
		w.mu.Unlock()
		w.p.m.watchersCoalescing.Inc()
		return g, g.header(), nil
	}
	g = &group{key: k, members: map[*clientStream]map[int64]bool{cs: {id: true}}}
	w.groups[k] = g
	w.mu.Unlock()
	g.up = newUpstream(w.p, outgoing(cs.ctx), w.ctx)
	c := proto.Clone(r).(*pb.WatchCreateRequest)
	c.WatchId = 0
	created := make(chan *pb.WatchResponse, 1)
	first := true
	g.up.add(0, c, func(resp *pb.WatchResponse) {
		g.mu.Lock()
		if resp.Header != nil {
			g.last = resp.Header
		}
		if first {
			first = false
			g.mu.Unlock()
			created <- resp
			return
		}
		type target struct {
			cs  *clientStream
			ids []int64
		}
		var ts []target
		n := 0
		for m, ids := range g.members {
			t := target{cs: m}
			for id := range ids {
				t.ids = append(t.ids, id)
				n++
			}
			ts = append(ts, t)
		}
		g.mu.Unlock()
		if n > 1 {
			w.p.m.eventsCoalescing.Add(float64(len(resp.Events) * (n - 1)))
		}
		for _, t := range ts {
			for _, id := range t.ids {
				out := withID(resp, id)
				out.Created = false
				t.cs.send(out)
			}
		}
		if resp.Canceled {
			w.drop(g)
		}
	})
	select {
	case resp := <-created:
		if resp.Canceled {
			w.drop(g)
			return nil, nil, fmt.Errorf("%s", resp.CancelReason)
		}
		return g, g.header(), nil
	case <-cs.ctx.Done():
		w.drop(g)
		return nil, nil, cs.ctx.Err()
	}
}

// leave removes a watcher from its group, and ends the group with its
// last watcher.
func (w *watchProxy) leave(g *group, cs *clientStream, id int64) {
	w.mu.Lock()
	g.mu.Lock()
	delete(g.members[cs], id)
	if len(g.members[cs]) == 0 {
		delete(g.members, cs)
	}
	empty := len(g.members) == 0
	g.mu.Unlock()
	if empty && w.groups[g.key] == g {
		delete(w.groups, g.key)
	}
	w.mu.Unlock()
	if empty {
		g.up.close()
	} else {
		w.p.m.watchersCoalescing.Dec()
	}
}

// drop ends a group whose upstream watch was canceled.
func (w *watchProxy) drop(g *group) {
	w.mu.Lock()
	if w.groups[g.key] == g {
		delete(w.groups, g.key)
	}
	w.mu.Unlock()
	g.up.close()
}
