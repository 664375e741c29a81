package server

import (
	"context"
	"log/slog"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/proto"
)

// requestStats logs a unary request as etcd's "request stats" line: at
// debug level every request, otherwise (as a warning) only requests slower
// than --warning-unary-request-duration. The fields are etcd's, with
// their names and meanings, so a grep or an alert written for etcd's
// expensive-request warnings finds Strata's: the request's size and count
// of operations, the response's size and count, and the request itself
// with put values redacted to their sizes (as etcd redacts them).
// Called by unaryInterceptor after the request, which started at start.
func (s *Server) requestStats(ctx context.Context, req any, info *grpc.UnaryServerInfo, resp any, start time.Time) {
	took := time.Since(start)
	debug := s.lg.Enabled(ctx, slog.LevelDebug)
	if !debug && took <= s.cfg.WarningUnaryRequestDuration {
		return
	}
	remote := "No remote client info."
	if p, ok := peer.FromContext(ctx); ok {
		remote = p.Addr.String()
	}
	var reqCount, respCount int64
	var reqSize, respSize int
	var content string
	switch r := resp.(type) {
	case *pb.RangeResponse:
		if q, ok := req.(*pb.RangeRequest); ok {
			reqSize, content = proto.Size(q), q.String()
		}
		if r != nil {
			respCount, respSize = r.GetCount(), proto.Size(r)
		}
	case *pb.PutResponse:
		if q, ok := req.(*pb.PutRequest); ok {
			reqCount, reqSize, content = 1, proto.Size(q), pb.NewLoggablePutRequest(q).String()
		}
		if r != nil {
			respSize = proto.Size(r)
		}
	case *pb.DeleteRangeResponse:
		if q, ok := req.(*pb.DeleteRangeRequest); ok {
			reqSize, content = proto.Size(q), q.String()
		}
		if r != nil {
			respCount, respSize = r.GetDeleted(), proto.Size(r)
		}
	case *pb.TxnResponse:
		if q, ok := req.(*pb.TxnRequest); ok && r != nil {
			// The branch that ran is the request's "actual" size.
			ops := q.GetFailure()
			if r.GetSucceeded() {
				ops = q.GetSuccess()
			}
			reqCount = int64(len(ops))
			for _, op := range ops {
				reqSize += proto.Size(op)
			}
			content = pb.NewLoggableTxnRequest(q).String()
		}
		if r != nil {
			respSize = proto.Size(r)
		}
	default:
		reqCount, reqSize, respCount, respSize = -1, -1, -1, -1
	}
	level := slog.LevelWarn
	if debug {
		level = slog.LevelDebug
	}
	s.lg.Log(ctx, level, "request stats",
		"start time", start,
		"time spent", took,
		"remote", remote,
		"response type", info.FullMethod,
		"request count", reqCount,
		"request size", reqSize,
		"response count", respCount,
		"response size", respSize,
		"request content", content)
}

// unaryInterceptor is the server's one unary interceptor. In order, as
// the chain it replaces: the request count and request-stats log line
// (outermost), the gRPC metrics (grpc_server_*), the learner's refusals,
// and the authentication check. It calls each step in one frame; grpc's
// chain of interceptors made a closure per level per request.
func (s *Server) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	s.requests.Add(1)
	start := time.Now()
	mm := s.metrics.grpc.method(info.FullMethod, "unary")
	mm.started.Inc()
	mm.received.Inc()
	var resp any
	err := s.metrics.grpc.countClient(ctx, "unary")
	if err == nil {
		err = s.learnerRefuses(req)
	}
	if err == nil {
		err = s.requireIdentity(ctx, info.FullMethod)
	}
	if err == nil {
		resp, err = h(ctx, req)
	}
	mm.sent.Inc()
	mm.done(err, start)
	s.requestStats(ctx, req, info, resp, start)
	return resp, err
}
