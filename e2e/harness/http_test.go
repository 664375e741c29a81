package harness

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

// echo answers with the method, content type, body and TLS peer it saw,
// and a status the path asks for.
func echo(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	peer := "-"
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		peer = r.TLS.PeerCertificates[0].Subject.CommonName
	}
	if r.URL.Path == "/teapot" {
		w.WriteHeader(http.StatusTeapot)
	}
	io.WriteString(w, r.Method+" "+r.Header.Get("Content-Type")+" "+string(body)+" peer="+peer+" proto="+r.Proto)
}

func TestHTTPRequestPlain(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(echo))
	defer srv.Close()
	for _, c := range []struct {
		req  HTTPRequest
		want string
	}{
		{HTTPRequest{URL: srv.URL + "/health"}, "GET   peer=- proto=HTTP/1.1\nHTTP 200\n"},
		{HTTPRequest{URL: srv.URL + "/v3/kv/put", Body: `{"key":"Zm9v"}`}, `POST application/json {"key":"Zm9v"} peer=- proto=HTTP/1.1` + "\nHTTP 200\n"},
		{HTTPRequest{URL: srv.URL + "/teapot"}, "GET   peer=- proto=HTTP/1.1\nHTTP 418\n"},
	} {
		r, err := c.req.Do()
		if err != nil {
			t.Fatal(err)
		}
		if r.Stdout != c.want || r.Stderr != "" || r.Code != 0 {
			t.Errorf("%+v:\n got %q (stderr %q, code %d)\nwant %q", c.req, r.Stdout, r.Stderr, r.Code, c.want)
		}
	}
}

// TestHTTPRequestMethodHeaders: Method, Header (Host included) and
// ShowHeaders, as curl -X, -H and a filtered -i.
func TestHTTPRequestMethodHeaders(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("X-Seen", r.Method+" "+r.Host+" "+r.Header.Get("Origin"))
		w.Header().Add("X-Two", "a")
		w.Header().Add("X-Two", "b")
		io.WriteString(w, "body")
	}))
	defer srv.Close()
	r, err := HTTPRequest{URL: srv.URL + "/x", Method: http.MethodOptions,
		Header:      map[string]string{"Host": "example.com", "Origin": "http://o"},
		ShowHeaders: []string{"X-Seen", "X-Two", "X-Missing"}}.Do()
	if err != nil {
		t.Fatal(err)
	}
	want := "< X-Seen: OPTIONS example.com http://o\n< X-Two: a\n< X-Two: b\nbody\nHTTP 200\n"
	if r.Stdout != want || r.Code != 0 {
		t.Errorf("got %q (code %d), want %q", r.Stdout, r.Code, want)
	}
}

func TestHTTPRequestRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	r, err := HTTPRequest{URL: "http://" + addr + "/health"}.Do()
	if err != nil {
		t.Fatal(err)
	}
	if r.Code != 1 || r.Stdout != "\nHTTP 000\n" || !strings.Contains(r.Stderr, "connection refused") {
		t.Fatalf("%s", r)
	}
}

func TestHTTPRequestTLS(t *testing.T) {
	dir := t.TempDir()
	ca, err := NewCA(dir, "ca")
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewCA(dir, "other")
	if err != nil {
		t.Fatal(err)
	}
	srvCert, srvKey, err := ca.Issue("server", "server")
	if err != nil {
		t.Fatal(err)
	}
	cliCert, cliKey, err := ca.Issue("alice", "alice")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(srvCert, srvKey)
	if err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(ca.CertPath)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(echo))
	srv.EnableHTTP2 = true
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refusals below are expected
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	srv.StartTLS()
	defer srv.Close()

	// A client certificate from the CA: in, over HTTP/2 as curl would.
	r, err := HTTPRequest{URL: srv.URL + "/health", CACert: ca.CertPath, Cert: cliCert, Key: cliKey}.Do()
	if err != nil {
		t.Fatal(err)
	}
	if r.Stdout != "GET   peer=alice proto=HTTP/2.0\nHTTP 200\n" || r.Code != 0 {
		t.Fatalf("with a client certificate: %s", r)
	}
	// No client certificate, or a server the client does not trust:
	// refused, recorded as a failed request.
	for name, req := range map[string]HTTPRequest{
		"no client certificate": {URL: srv.URL + "/health", CACert: ca.CertPath},
		"untrusted server":      {URL: srv.URL + "/health", CACert: other.CertPath, Cert: cliCert, Key: cliKey},
	} {
		r, err := req.Do()
		if err != nil {
			t.Fatal(err)
		}
		if r.Code != 1 || r.Stdout != "\nHTTP 000\n" || !strings.HasPrefix(r.Stderr, "http: ") {
			t.Errorf("%s: %s", name, r)
		}
	}
	// A setup mistake is an error, not a recorded result.
	if _, err := (HTTPRequest{URL: srv.URL, CACert: dir + "/missing.pem"}).Do(); err == nil {
		t.Error("a missing CA file was not an error")
	}
	if _, err := (HTTPRequest{URL: srv.URL, CACert: ca.CertPath, Cert: cliCert}).Do(); err == nil {
		t.Error("a certificate without its key was not an error")
	}
}
