package server

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/strata-db/strata/auth"
	"github.com/strata-db/strata/mvcc"
)

// watchServer serves the Watch service over the watchable store: one
// mvcc.WatchStream per gRPC stream, a receive loop for create, cancel and
// progress requests, and a send loop for what the store produces.
type watchServer struct {
	pb.UnimplementedWatchServer
	s *Server
}

func (w *watchServer) Watch(stream pb.Watch_WatchServer) error {
	s := w.s
	ctx := stream.Context()
	if err := s.requireLeader(ctx); err != nil {
		return err
	}
	ws := s.watch.NewWatchStream()
	defer ws.Close()
	// Responses the handler makes itself (refusals) go through the same
	// send goroutine as the store's, so the stream is written by one
	// goroutine only.
	own := make(chan *pb.WatchResponse, 16)
	sendErr := make(chan error, 1)
	go func() {
		for {
			select {
			case r, ok := <-ws.Chan():
				if !ok {
					sendErr <- nil
					return
				}
				s.kv.Metrics().EventsTaken(len(r.Events))
				start := time.Now()
				if err := s.sendWatchResponse(stream, &r); err != nil {
					s.metrics.streamFailed("send", "watch", ctx, err)
					sendErr <- err
					return
				}
				s.metrics.observeWatchSend(r, time.Since(start))
			case m := <-own:
				start := time.Now()
				if err := stream.Send(m); err != nil {
					s.metrics.streamFailed("send", "watch", ctx, err)
					sendErr <- err
					return
				}
				s.metrics.watchSendControl.Observe(time.Since(start).Seconds())
			case <-ctx.Done():
				sendErr <- ctx.Err()
				return
			}
		}
	}()
	recvErr := make(chan error, 1)
	go func() { recvErr <- w.recvLoop(stream, ws, own) }()
	for {
		select {
		case err := <-recvErr:
			if err == io.EOF {
				// The client half-closed its side (the JSON gateway does
				// once it has read the request body): as etcd, keep
				// sending what the watchers produce until the client
				// goes away or the server stops.
				recvErr = nil
				continue
			}
			if err != nil {
				s.metrics.streamFailed("receive", "watch", ctx, err)
			}
			return watchCanceled(err)
		case err := <-sendErr:
			return watchCanceled(err)
		case <-s.stopping:
			return rpctypes.ErrGRPCStopped
		}
	}
}

// watchCanceled is etcd's answer when a watch stream's context is
// canceled (the client went away): its "watch canceled" error, code
// Canceled.
func watchCanceled(err error) error {
	if errors.Is(err, context.Canceled) {
		return rpctypes.ErrGRPCWatchCanceled
	}
	return err
}

// sendWatchResponse sends what the store produced for one watcher. A
// response carrying an event the store shared between watchers goes out
// as its own few bytes of header and watch ID followed by the event's
// shared encoding (wireWatchResponse), the bytes proto.Marshal would
// make; any other is converted and marshalled (and fragmented if the
// watcher asked for it).
func (s *Server) sendWatchResponse(stream pb.Watch_WatchServer, r *mvcc.WatchResponse) error {
	if enc := r.EncodedEvents(); enc != nil && !r.Created && !r.Canceled && r.CompactRevision == 0 && r.CancelReason == "" && (!r.Fragment || len(r.Events) < 2) {
		head := appendWatchHead(make([]byte, 0, 48), s.cluster, s.id, r.Revision, s.node.Term(), r.WatchID)
		return stream.SendMsg(&wireWatchResponse{head: head, events: enc})
	}
	for _, m := range r.Proto(s.header(0), int(s.cfg.MaxRequestBytes)) {
		if err := stream.Send(m); err != nil {
			return err
		}
	}
	return nil
}

// wireWatchResponse is a WatchResponse already encoded: head is every
// field but the events (header and watch ID), events the events field,
// shared with the other watchers sent the same event. wireCodec writes
// the two without copying them.
type wireWatchResponse struct {
	head, events []byte
}

// appendWatchHead appends a WatchResponse's header and watch ID as
// proto.Marshal encodes them: fields in number order, zero scalars left
// out, the header present even if empty.
func appendWatchHead(b []byte, cluster, member uint64, rev int64, term uint64, id mvcc.WatchID) []byte {
	var h [4 * (1 + binary.MaxVarintLen64)]byte // four tags and varints
	hb := h[:0]
	for i, v := range [4]uint64{cluster, member, uint64(rev), term} {
		hb = appendVarintField(hb, protowire.Number(i+1), v)
	}
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendBytes(b, hb)
	return appendVarintField(b, 2, uint64(id))
}

func (w *watchServer) recvLoop(stream pb.Watch_WatchServer, ws *mvcc.WatchStream, own chan<- *pb.WatchResponse) error {
	s := w.s
	for {
		req, err := stream.Recv()
		if err != nil {
			return err
		}
		switch {
		case req.GetCreateRequest() != nil:
			c := req.GetCreateRequest()
			if len(c.Key) == 0 {
				c.Key = []byte{0} // the smallest key, as etcd
			}
			if len(c.RangeEnd) == 0 {
				c.RangeEnd = nil
			}
			refuse := func(reason string) {
				own <- &pb.WatchResponse{Header: s.header(0), WatchId: int64(mvcc.InvalidWatchID), Created: true, Canceled: true, CancelReason: reason}
			}
			if c.StartRevision < 0 {
				refuse(rpctypes.ErrCompacted.Error())
				continue
			}
			ai, err := s.authInfo(stream.Context())
			if err == nil {
				err = s.auth.IsRangePermitted(ai, c.Key, c.RangeEnd)
			}
			if err != nil {
				// etcd puts the whole gRPC error text in cancel_reason.
				if ge := auth.ToGRPCError(err); ge != nil {
					err = ge
				}
				refuse(err.Error())
				continue
			}
			// A refused create (duplicate watch_id, empty range) is
			// answered on the stream by ws itself: one created-and-
			// canceled response, as etcd sends.
			if _, err := ws.Watch(mvcc.WatchRequestFromProto(c)); errors.Is(err, mvcc.ErrWatchStreamClosed) {
				return nil
			}
		case req.GetCancelRequest() != nil:
			_ = ws.Cancel(mvcc.WatchID(req.GetCancelRequest().WatchId))
		case req.GetProgressRequest() != nil:
			ws.RequestProgress()
		}
	}
}

// requireLeader is etcd's check on a stream whose client asked for a
// leader (clientv3.WithRequireLeader): refused while the member knows of
// none.
func (s *Server) requireLeader(ctx context.Context) error {
	if v := metadata.ValueFromIncomingContext(ctx, rpctypes.MetadataRequireLeaderKey); len(v) > 0 && v[0] == rpctypes.MetadataHasLeader && s.node.Status().Leader == 0 {
		return rpctypes.ErrGRPCNoLeader
	}
	return nil
}
