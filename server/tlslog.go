package server

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
)

// tlsRejected returns the logger of failed TLS handshakes on an endpoint
// ("client" or "peer"), with etcd's message ("rejected connection on
// client endpoint") and fields, so an operator chasing a misconfigured
// client sees who was refused and why. A client that hangs up during
// the handshake (EOF: probes, load balancer health checks) is logged at
// debug only, as etcd does, to keep the log quiet.
func (s *Server) tlsRejected(endpoint string) func(*tls.Conn, error) {
	msg := "rejected connection on " + endpoint + " endpoint"
	return func(c *tls.Conn, err error) {
		level := slog.LevelWarn
		if errors.Is(err, io.EOF) {
			level = slog.LevelDebug
		}
		st := c.ConnectionState()
		attrs := []any{"remote-addr", c.RemoteAddr().String(), "server-name", st.ServerName}
		if len(st.PeerCertificates) > 0 {
			cert := st.PeerCertificates[0]
			ips := make([]string, len(cert.IPAddresses))
			for i, ip := range cert.IPAddresses {
				ips[i] = ip.String()
			}
			attrs = append(attrs, "ip-addresses", ips, "dns-names", cert.DNSNames)
		}
		s.lg.Log(context.Background(), level, msg, append(attrs, "error", err)...)
	}
}
