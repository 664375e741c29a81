package server

import (
	"context"
	"crypto/tls"
	"net/http"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"go.etcd.io/etcd/api/v3/etcdserverpb/gw"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
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
		c := tc.Clone()
		c.InsecureSkipVerify = true // the loopback peer is this process
		if len(c.Certificates) > 0 {
			c.GetClientCertificate = nil
		}
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
	return &gateway{mux: mux, conn: conn}, nil
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
