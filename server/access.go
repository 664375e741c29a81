package server

import (
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
)

// accessController wraps the HTTP handler of a client address as etcd's
// embed package does (its accessController), in etcd's order:
//
//  1. /v3beta/ paths become /v3/;
//  2. a plaintext request whose Host is not in --host-whitelist is refused
//     with etcd's 421 text (DNS rebinding, CVE-2018-5702);
//  3. under --client-cert-auth with auth enabled, a TLS request to the
//     gateway whose verified client certificate has a CommonName is
//     refused with 400: the gateway relays it over its own connection,
//     so that CommonName would not be the identity the request runs as;
//  4. CORS headers for an allowed origin (--cors, default "*": every
//     response carries them); OPTIONS is answered 200 with nothing else.
//
// The metrics listener (--listen-metrics-urls) is not wrapped, as in etcd.
// r.TLS is set for TLS connections only: the mux listener hands net/http
// a peekedTLSConn, whose ConnectionState net/http reads.
func (s *Server) accessController(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v3beta/") {
			r.URL.Path = "/v3/" + strings.TrimPrefix(r.URL.Path, "/v3beta/")
		}
		if r.TLS == nil {
			if host := requestHostname(r); !allowedBy(s.cfg.HostWhitelist, host) {
				s.lg.Warn("rejecting HTTP request to prevent DNS rebinding attacks", "host", host)
				http.Error(w, hostNotWhitelisted(host), http.StatusMisdirectedRequest)
				return
			}
		} else if s.cfg.ClientSecurity.ClientCertAuth && s.cfg.EnableGRPCGateway &&
			s.auth.IsAuthEnabled() && strings.HasPrefix(r.URL.Path, "/v3/") {
			for _, chain := range r.TLS.VerifiedChains {
				if len(chain) > 0 && chain[0].Subject.CommonName != "" {
					http.Error(w, "CommonName of client sending a request against gateway will be ignored and not used as expected", http.StatusBadRequest)
					return
				}
			}
		}
		if allowedBy(s.cfg.CORS, "*") {
			addCORSHeaders(w, "*")
		} else if origin := r.Header.Get("Origin"); allowedBy(s.cfg.CORS, origin) {
			addCORSHeaders(w, origin)
		}
		if r.Method == http.MethodOptions {
			w.WriteHeader(http.StatusOK)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// allowedBy is etcd's rule for --cors and --host-whitelist: an empty list
// or "*" allows everything, otherwise only what is listed.
func allowedBy(list []string, v string) bool {
	return len(list) == 0 || slices.Contains(list, "*") || slices.Contains(list, v)
}

func addCORSHeaders(w http.ResponseWriter, origin string) {
	w.Header().Add("Access-Control-Allow-Methods", "POST, GET, OPTIONS, PUT, DELETE")
	w.Header().Add("Access-Control-Allow-Origin", origin)
	w.Header().Add("Access-Control-Allow-Headers", "accept, content-type, authorization")
}

// requestHostname is the Host header without its port.
func requestHostname(r *http.Request) string {
	h, _, err := net.SplitHostPort(r.Host)
	if err != nil {
		return r.Host
	}
	return h
}

// hostNotWhitelisted is etcd's answer to a Host outside --host-whitelist.
func hostNotWhitelisted(host string) string {
	return fmt.Sprintf(`
etcd received your request, but the Host header was unrecognized.

To fix this, choose one of the following options:
- Enable TLS, then any HTTPS request will be allowed.
- Add the hostname you want to use to the whitelist in settings.
  - e.g. etcd --host-whitelist %q

This requirement has been added to help prevent "DNS Rebinding" attacks (CVE-2018-5702).
`, host)
}
