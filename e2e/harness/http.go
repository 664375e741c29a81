package harness

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// HTTPRequest is one request to a server's HTTP endpoints (/health,
// /version, the JSON gateway), made with net/http so that the tests need
// nothing outside Go: a missing curl once turned every HTTP step into
// "curl not installed" on both sides, which compared equal.
//
// Each request uses its own connection (a new TLS handshake each time), as
// one curl invocation does, and negotiates HTTP/2 over TLS by ALPN as curl
// does; plain http is HTTP/1.1.
type HTTPRequest struct {
	URL string
	// Body, when not empty, is POSTed with Content-Type application/json;
	// otherwise the request is a GET.
	Body string
	// CACert is a PEM file of CAs to trust for https (default: the
	// system's); Cert and Key a client certificate to present.
	CACert, Cert, Key string
	// Timeout bounds the whole request (default 10s, curl -m 10).
	Timeout time.Duration
	// Method overrides GET/POST (curl -X); Header adds request headers
	// (curl -H; "Host" sets the Host header).
	Method string
	Header map[string]string
	// ShowHeaders are response headers to print before the body, one
	// "< Name: value" line per value, in this order (a filtered curl -i).
	ShowHeaders []string
}

// Do sends the request. The Result has what `curl -sS -w '\nHTTP
// %{http_code}\n'` prints: stdout is the body and then a line "HTTP
// <status>"; when no response arrives (refused, TLS alert, timeout) stdout
// ends in "HTTP 000", stderr holds "http: " and the error, and Code is 1.
// The error is for a request that could not be built (an unreadable
// certificate file): a setup mistake, which must fail the test rather than
// be recorded the same on both sides.
func (r HTTPRequest) Do() (Result, error) {
	tr := &http.Transport{
		Proxy:             nil, // loopback servers; never a proxy from the environment
		DisableKeepAlives: true,
		ForceAttemptHTTP2: true,
	}
	if r.CACert != "" || r.Cert != "" || r.Key != "" {
		cfg := &tls.Config{}
		if r.CACert != "" {
			pem, err := os.ReadFile(r.CACert)
			if err != nil {
				return Result{}, fmt.Errorf("harness: CA file: %w", err)
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return Result{}, fmt.Errorf("harness: CA file %s: no PEM certificate", r.CACert)
			}
		}
		if r.Cert != "" || r.Key != "" {
			c, err := tls.LoadX509KeyPair(r.Cert, r.Key)
			if err != nil {
				return Result{}, fmt.Errorf("harness: client certificate: %w", err)
			}
			cfg.Certificates = []tls.Certificate{c}
		}
		tr.TLSClientConfig = cfg
	}
	defer tr.CloseIdleConnections()
	timeout := r.Timeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	client := &http.Client{Transport: tr, Timeout: timeout}

	method, body := http.MethodGet, io.Reader(nil)
	if r.Body != "" {
		method, body = http.MethodPost, bytes.NewBufferString(r.Body)
	}
	if r.Method != "" {
		method = r.Method
	}
	req, err := http.NewRequest(method, r.URL, body)
	if err != nil {
		return Result{}, fmt.Errorf("harness: %w", err)
	}
	if r.Body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range r.Header {
		if k == "Host" {
			req.Host = v
		} else {
			req.Header.Set(k, v)
		}
	}
	failed := func(err error) (Result, error) {
		var ne interface{ Timeout() bool }
		return Result{
			Stdout:   "\nHTTP 000\n",
			Stderr:   "http: " + err.Error() + "\n",
			Code:     1,
			TimedOut: errors.As(err, &ne) && ne.Timeout(),
		}, nil
	}
	resp, err := client.Do(req)
	if err != nil {
		return failed(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return failed(err)
	}
	var head strings.Builder
	for _, h := range r.ShowHeaders {
		for _, v := range resp.Header.Values(h) {
			fmt.Fprintf(&head, "< %s: %s\n", h, v)
		}
	}
	return Result{Stdout: fmt.Sprintf("%s%s\nHTTP %d\n", head.String(), data, resp.StatusCode)}, nil
}
