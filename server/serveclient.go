package server

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"golang.org/x/net/http2"
)

// serveClients binds every client address (clientAddrs) and serves on
// it what etcd serves there: gRPC and HTTP on one port, or, with
// --listen-client-http-urls, gRPC on the client URLs and HTTP on the HTTP
// URLs. One JSON gateway serves every HTTP address; like etcd's, it dials
// the first address that serves gRPC, over TLS if that address takes TLS.
// The caller stops the listeners on error.
func (s *Server) serveClients(clientTLS *tls.Config) error {
	addrs := clientAddrs(s.cfg.ListenClientURLs, s.cfg.ListenClientHTTPURLs)
	ls := make([]net.Listener, len(addrs))
	for i, a := range addrs {
		l, err := listen(a.u)
		if err != nil {
			return fmt.Errorf("listen on client url %s: %w", a.u.String(), err)
		}
		s.listeners = append(s.listeners, l)
		ls[i] = l
	}
	var gw *gateway
	for i, a := range addrs {
		if !a.grpc || !s.cfg.EnableGRPCGateway {
			continue
		}
		target := ls[i].Addr().String()
		if isUnixScheme(a.u.Scheme) {
			target = "unix:" + target
		}
		var tc *tls.Config
		if a.secure {
			tc = clientTLS
		}
		var err error
		if gw, err = s.newGateway(target, tc); err != nil {
			return err
		}
		break
	}
	for i, a := range addrs {
		var tc *tls.Config
		if a.secure {
			tc = clientTLS
		}
		mux := newMuxListener(ls[i], a, tc, s.tlsRejected("client"))
		if a.grpc {
			go s.grpc.Serve(mux.grpcL)
		}
		var handler http.Handler = http.NotFoundHandler()
		if a.http {
			var gwh http.Handler
			if gw != nil {
				gwh = gw
			}
			handler = s.accessController(s.httpHandler(true, gwh))
		}
		if tc != nil {
			h2 := &http2.Server{}
			split := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if a.grpc && r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
					s.grpc.ServeHTTP(w, r)
					return
				}
				handler.ServeHTTP(w, r)
			})
			mux.serveH2 = func(c net.Conn) { h2.ServeConn(c, &http2.ServeConnOpts{Handler: split}) }
		}
		if a.http {
			hsrv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
			s.httpSrv = append(s.httpSrv, hsrv)
			go hsrv.Serve(mux.httpL)
		}
		traffic := "grpc+http"
		switch {
		case !a.http:
			traffic = "grpc"
		case !a.grpc:
			traffic = "http"
		}
		if a.insecure {
			s.lg.Warn("serving client traffic insecurely; this is strongly discouraged!", "traffic", traffic, "address", a.u.Host)
		}
		if a.secure {
			s.lg.Info("serving client traffic securely", "traffic", traffic, "address", a.u.Host)
		}
	}
	return nil
}
