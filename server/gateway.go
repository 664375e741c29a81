package server

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"go.etcd.io/etcd/api/v3/etcdserverpb/gw"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/server/v3electionpb"
	"github.com/strata-db/strata/server/v3lockpb"
)

// gateway serves etcd's JSON gateway under /v3/ (and /v3beta/, rewritten
// to /v3/) with the handlers generated in go.etcd.io/etcd/api/v3: each
// request is translated to a gRPC call on a loopback connection to this
// member, so it goes through exactly the same checks as a gRPC client.
type gateway struct {
	mux  *runtime.ServeMux
	conn *grpc.ClientConn
}

func (s *Server) newGateway(target string, tc *tls.Config) (*gateway, error) {
	creds := insecure.NewCredentials()
	if tc != nil {
		// The server's own config dials too: its GetClientCertificate
		// presents this member's client (or server) certificate, which
		// --client-cert-auth requires.
		c := tc.Clone()
		c.InsecureSkipVerify = true // the loopback peer is this process
		creds = credentials.NewTLS(c)
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, err
	}
	mux := runtime.NewServeMux(runtime.WithMarshalerOption(runtime.MIMEWildcard,
		&runtime.HTTPBodyMarshaler{Marshaler: &runtime.JSONPb{
			MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: false},
			UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: true},
		}}))
	ctx := context.Background()
	for _, reg := range []func(context.Context, *runtime.ServeMux, *grpc.ClientConn) error{
		gw.RegisterKVHandler, gw.RegisterWatchHandler, gw.RegisterLeaseHandler, gw.RegisterClusterHandler,
		gw.RegisterMaintenanceHandler, gw.RegisterAuthHandler,
	} {
		if err := reg(ctx, mux, conn); err != nil {
			conn.Close()
			return nil, err
		}
	}
	if err := registerConcurrencyGateway(mux, conn); err != nil {
		conn.Close()
		return nil, err
	}
	return &gateway{mux: mux, conn: conn}, nil
}

// registerConcurrencyGateway serves the v3lock and v3election services on
// the gateway at etcd's paths. etcd generates these handlers with its
// protos in go.etcd.io/etcd/server/v3; these are equivalent: the body is
// the request in JSON, relayed as a gRPC call.
func registerConcurrencyGateway(mux *runtime.ServeMux, conn *grpc.ClientConn) error {
	routes := []struct {
		path, method string
		newReq       func() proto.Message
		newResp      func() proto.Message // nil: a server stream of LeaderResponse
	}{
		{"/v3/lock/lock", v3lockpb.LockMethod, func() proto.Message { return new(v3lockpb.LockRequest) }, func() proto.Message { return new(v3lockpb.LockResponse) }},
		{"/v3/lock/unlock", v3lockpb.UnlockMethod, func() proto.Message { return new(v3lockpb.UnlockRequest) }, func() proto.Message { return new(v3lockpb.UnlockResponse) }},
		{"/v3/election/campaign", v3electionpb.CampaignMethod, func() proto.Message { return new(v3electionpb.CampaignRequest) }, func() proto.Message { return new(v3electionpb.CampaignResponse) }},
		{"/v3/election/proclaim", v3electionpb.ProclaimMethod, func() proto.Message { return new(v3electionpb.ProclaimRequest) }, func() proto.Message { return new(v3electionpb.ProclaimResponse) }},
		{"/v3/election/leader", v3electionpb.LeaderMethod, func() proto.Message { return new(v3electionpb.LeaderRequest) }, func() proto.Message { return new(v3electionpb.LeaderResponse) }},
		{"/v3/election/observe", v3electionpb.ObserveMethod, func() proto.Message { return new(v3electionpb.LeaderRequest) }, nil},
		{"/v3/election/resign", v3electionpb.ResignMethod, func() proto.Message { return new(v3electionpb.ResignRequest) }, func() proto.Message { return new(v3electionpb.ResignResponse) }},
	}
	for _, rt := range routes {
		err := mux.HandlePath(http.MethodPost, rt.path, func(w http.ResponseWriter, req *http.Request, _ map[string]string) {
			ctx, cancel := context.WithCancel(req.Context())
			defer cancel()
			inbound, outbound := runtime.MarshalerForRequest(mux, req)
			ctx, err := runtime.AnnotateContext(ctx, mux, req, rt.method, runtime.WithHTTPPathPattern(rt.path))
			if err != nil {
				runtime.HTTPError(ctx, mux, outbound, w, req, err)
				return
			}
			in := rt.newReq()
			if err := inbound.NewDecoder(req.Body).Decode(in); err != nil && !errors.Is(err, io.EOF) {
				runtime.HTTPError(ctx, mux, outbound, w, req, status.Errorf(codes.InvalidArgument, "%v", err))
				return
			}
			var md runtime.ServerMetadata
			if rt.newResp != nil {
				out := rt.newResp()
				err := conn.Invoke(ctx, rt.method, in, out, grpc.Header(&md.HeaderMD), grpc.Trailer(&md.TrailerMD))
				ctx = runtime.NewServerMetadataContext(ctx, md)
				if err != nil {
					runtime.HTTPError(ctx, mux, outbound, w, req, err)
					return
				}
				runtime.ForwardResponseMessage(ctx, mux, outbound, w, req, out, mux.GetForwardResponseOptions()...)
				return
			}
			stream, err := conn.NewStream(ctx, &v3electionpb.ObserveStreamDesc, rt.method)
			if err == nil {
				err = stream.SendMsg(in)
			}
			if err == nil {
				err = stream.CloseSend()
			}
			if err == nil {
				md.HeaderMD, err = stream.Header()
			}
			ctx = runtime.NewServerMetadataContext(ctx, md)
			if err != nil {
				runtime.HTTPError(ctx, mux, outbound, w, req, err)
				return
			}
			runtime.ForwardResponseStream(ctx, mux, outbound, w, req, func() (proto.Message, error) {
				m := new(v3electionpb.LeaderResponse)
				return m, stream.RecvMsg(m)
			}, mux.GetForwardResponseOptions()...)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (g *gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/v3beta/") {
		r.URL.Path = "/v3/" + strings.TrimPrefix(r.URL.Path, "/v3beta/")
	}
	// Streams (watch, keepalive) come in as GET from browsers; the
	// gateway routes them as POST, as etcd's websocket proxy does.
	if r.Method == http.MethodGet && (strings.HasSuffix(r.URL.Path, "/watch") || strings.HasSuffix(r.URL.Path, "/keepalive")) {
		r.Method = http.MethodPost
	}
	g.mux.ServeHTTP(w, r)
}
