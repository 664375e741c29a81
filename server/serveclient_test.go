package server

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// httpDo does one request with c (http.DefaultClient if nil) and returns
// the status, the body, and the response's headers, or the error.
func httpDo(c *http.Client, method, url, body string, hdr map[string]string) (int, string, http.Header, error) {
	if c == nil {
		c = http.DefaultClient
	}
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0, "", nil, err
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	res, err := c.Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, string(b), res.Header, err
}

// grpcPut puts k=v through a gRPC connection to target.
func grpcPut(t *testing.T, target string, creds credentials.TransportCredentials, k string) error {
	t.Helper()
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = pb.NewKVClient(conn).Put(ctx, &pb.PutRequest{Key: []byte(k), Value: []byte("v")})
	return err
}

func tlsClient(c *tls.Config) *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: c}}
}

// TestClientURLsPlainAndTLSOnOnePort: http:// and https:// client URLs
// naming the same address share one listener, as in etcd: gRPC and HTTP
// are served there both in plaintext and over TLS (etcd's
// TestConnectionMultiplexing/ServerTLSAndNonTLS).
func TestClientURLsPlainAndTLSOnOnePort(t *testing.T) {
	pki := newTestPKI(t)
	cert, key := pki.issue(t, "server", "")
	port, pp := freePort(t), freePort(t)
	plain, secure := fmt.Sprintf("http://127.0.0.1:%d", port), fmt.Sprintf("https://127.0.0.1:%d", port)
	peer := fmt.Sprintf("http://127.0.0.1:%d", pp)
	m := startWithArgs(t, []string{"--name", "m1", "--data-dir", filepath.Join(t.TempDir(), "d"),
		"--listen-client-urls", plain + "," + secure, "--advertise-client-urls", plain,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "m1=" + peer,
		"--cert-file", cert, "--key-file", key}, plain)
	defer m.stop(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if err := grpcPut(t, addr, insecure.NewCredentials(), "plain"); err != nil {
		t.Errorf("gRPC in plaintext: %v", err)
	}
	if err := grpcPut(t, addr, credentials.NewTLS(pki.clientConfig(t, "", "")), "tls"); err != nil {
		t.Errorf("gRPC over TLS: %v", err)
	}
	for _, tc := range []struct {
		url string
		c   *http.Client
	}{{plain, nil}, {secure, tlsClient(pki.clientConfig(t, "", ""))}} {
		code, body, _, err := httpDo(tc.c, "POST", tc.url+"/v3/kv/range", `{"key":"cGxhaW4="}`, nil)
		if err != nil || code != 200 || !strings.Contains(body, `"count":"1"`) {
			t.Errorf("gateway range at %s: %d %q %v", tc.url, code, body, err)
		}
	}
}

// TestListenClientHTTPURLs: with --listen-client-http-urls the client URL
// serves gRPC only and the HTTP URL serves HTTP only (the gateway there
// relays to the gRPC URL), as etcd's
// TestConnectionMultiplexing/SeparateHTTP.
func TestListenClientHTTPURLs(t *testing.T) {
	hp := freePort(t)
	httpURL := fmt.Sprintf("http://127.0.0.1:%d", hp)
	m := startMember(t, filepath.Join(t.TempDir(), "d"), "--listen-client-http-urls", httpURL)
	defer m.stop(t)
	if _, err := m.kv.Put(context.Background(), &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatalf("gRPC on the client URL: %v", err)
	}
	if code, body, _, err := httpDo(nil, "GET", m.client+"/health", "", nil); err == nil {
		t.Errorf("HTTP on the gRPC-only client URL answered %d %q", code, body)
	}
	if code, body, _, err := httpDo(nil, "GET", httpURL+"/health", "", nil); err != nil || code != 200 {
		t.Errorf("/health on the HTTP URL: %d %q %v", code, body, err)
	}
	code, body, _, err := httpDo(nil, "POST", httpURL+"/v3/kv/range", `{"key":"aw=="}`, nil)
	if err != nil || code != 200 || !strings.Contains(body, `"count":"1"`) {
		t.Errorf("gateway on the HTTP URL: %d %q %v", code, body, err)
	}
	if err := grpcPut(t, fmt.Sprintf("127.0.0.1:%d", hp), insecure.NewCredentials(), "x"); err == nil {
		t.Error("gRPC served on the HTTP-only URL")
	}
}

// TestDebugVars: /debug/vars is etcd's expvar JSON: Go's variables plus
// file_descriptor_limit and raft.status; only GET is allowed.
func TestDebugVars(t *testing.T) {
	m := startMember(t, filepath.Join(t.TempDir(), "d"))
	defer m.stop(t)
	code, body, _, err := httpDo(nil, "GET", m.client+"/debug/vars", "", nil)
	if err != nil || code != 200 {
		t.Fatalf("GET /debug/vars: %d %v", code, err)
	}
	var vars map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &vars); err != nil {
		t.Fatalf("not JSON: %v\n%.300s", err, body)
	}
	for _, k := range []string{"cmdline", "memstats", "file_descriptor_limit", "raft.status"} {
		if _, ok := vars[k]; !ok {
			t.Errorf("no %s in %.300s", k, body)
		}
	}
	var rs struct {
		ID, Lead, RaftState string
		Applied             uint64
	}
	if err := json.Unmarshal(vars["raft.status"], &rs); err != nil || rs.ID != fmt.Sprintf("%x", m.s.ID()) ||
		rs.Lead != rs.ID || rs.RaftState != "StateLeader" || rs.Applied == 0 {
		t.Errorf("raft.status %s (%v)", vars["raft.status"], err)
	}
	code, body, hdr, err := httpDo(nil, "POST", m.client+"/debug/vars", "", nil)
	if err != nil || code != 405 || hdr.Get("Allow") != "GET" || body != "Method Not Allowed\n" {
		t.Errorf("POST /debug/vars: %d %q %v %v", code, body, hdr, err)
	}
}

// TestAccessController: etcd's checks on the client port's HTTP: CORS
// headers (every response, with the default --cors=*), OPTIONS answered
// 200 and empty, --host-whitelist on plaintext requests (421 and etcd's
// text), and none of it on the metrics port.
func TestAccessController(t *testing.T) {
	mp := freePort(t)
	metrics := fmt.Sprintf("http://127.0.0.1:%d", mp)
	m := startMember(t, filepath.Join(t.TempDir(), "d"), "--listen-metrics-urls", metrics)
	code, body, hdr, err := httpDo(nil, "GET", m.client+"/health", "", nil)
	if err != nil || code != 200 || hdr.Get("Access-Control-Allow-Origin") != "*" ||
		hdr.Get("Access-Control-Allow-Methods") != "POST, GET, OPTIONS, PUT, DELETE" ||
		hdr.Get("Access-Control-Allow-Headers") != "accept, content-type, authorization" {
		t.Errorf("GET /health: %d %q %v %v", code, body, hdr, err)
	}
	if code, body, _, err := httpDo(nil, "OPTIONS", m.client+"/v3/kv/put", "", nil); err != nil || code != 200 || body != "" {
		t.Errorf("OPTIONS: %d %q %v", code, body, err)
	}
	if _, _, hdr, _ := httpDo(nil, "GET", metrics+"/health", "", nil); hdr.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("CORS headers on the metrics port: %v", hdr)
	}
	m.stop(t)

	m = startWithArgs(t, append(m.args[:len(m.args):len(m.args)], "--cors", "http://a.example:80",
		"--host-whitelist", "localhost,a.example"), m.client)
	defer m.stop(t)
	if _, _, hdr, _ := httpDo(nil, "GET", m.client+"/version", "", map[string]string{"Host": "localhost"}); hdr.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("CORS headers without an allowed Origin: %v", hdr)
	}
	_, _, hdr, _ = httpDo(nil, "GET", m.client+"/version", "", map[string]string{"Host": "localhost", "Origin": "http://a.example:80"})
	if hdr.Get("Access-Control-Allow-Origin") != "http://a.example:80" {
		t.Errorf("allowed Origin: %v", hdr)
	}
	code, body, _, err = httpDo(nil, "GET", m.client+"/version", "", nil) // Host 127.0.0.1:port
	if err != nil || code != http.StatusMisdirectedRequest || !strings.Contains(body, `etcd --host-whitelist "127.0.0.1"`) {
		t.Errorf("Host outside the whitelist: %d %q %v", code, body, err)
	}
	if code, _, _, err := httpDo(nil, "GET", m.client+"/version", "", map[string]string{"Host": "a.example:1234"}); err != nil || code != 200 {
		t.Errorf("whitelisted Host: %d %v", code, err)
	}
}

// TestGatewayClientCertAuth: under --client-cert-auth the gateway works
// (its loopback connection presents the member's certificate); once auth
// is enabled, a gateway request whose client certificate has a
// CommonName is refused with etcd's 400, while one without a CommonName
// gets the auth error of a request without a user, as in etcd's
// TestCurlV3AuthClientTLSCertAuth.
func TestGatewayClientCertAuth(t *testing.T) {
	pki := newTestPKI(t)
	cert, key := pki.issue(t, "server", "")
	rootCert, rootKey := pki.issue(t, "root", "root")
	anonCert, anonKey := pki.issue(t, "anon", "")
	cp, pp := freePort(t), freePort(t)
	client, peer := fmt.Sprintf("https://127.0.0.1:%d", cp), fmt.Sprintf("http://127.0.0.1:%d", pp)
	m := startWithArgs(t, []string{"--name", "m1", "--data-dir", filepath.Join(t.TempDir(), "d"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "m1=" + peer,
		"--cert-file", cert, "--key-file", key, "--trusted-ca-file", pki.caFile, "--client-cert-auth"}, client)
	defer m.stop(t)
	root := tlsClient(pki.clientConfig(t, rootCert, rootKey))
	anon := tlsClient(pki.clientConfig(t, anonCert, anonKey))
	post := func(c *http.Client, path, body string) (int, string) {
		t.Helper()
		code, out, _, err := httpDo(c, "POST", client+path, body, nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return code, out
	}
	if code, body := post(root, "/v3/kv/put", `{"key":"aw==","value":"dg=="}`); code != 200 || !strings.Contains(body, `"revision"`) {
		t.Fatalf("gateway put under --client-cert-auth: %d %q", code, body)
	}
	for _, p := range []string{`/v3/auth/user/add {"name":"root","password":"pw"}`, `/v3/auth/role/add {"name":"root"}`, `/v3/auth/user/grant {"user":"root","role":"root"}`} {
		path, body, _ := strings.Cut(p, " ")
		if code, out := post(root, path, body); code != 200 {
			t.Fatalf("%s: %d %q", p, code, out)
		}
	}
	if code, body := post(root, "/v3/auth/enable", `{}`); code != 200 {
		t.Fatalf("auth enable: %d %q", code, body)
	}
	code, body := post(root, "/v3/kv/put", `{"key":"aw==","value":"dg=="}`)
	if code != 400 || body != "CommonName of client sending a request against gateway will be ignored and not used as expected\n" {
		t.Errorf("gateway put with a CN certificate, auth enabled: %d %q", code, body)
	}
	if code, body := post(anon, "/v3/kv/put", `{"key":"aw==","value":"dg=="}`); !strings.Contains(body, "etcdserver: user name is empty") {
		t.Errorf("gateway put without a CN, auth enabled: %d %q", code, body)
	}
	if code, _, _, err := httpDo(root, "GET", client+"/health", "", nil); err != nil || code != 200 {
		t.Errorf("/health with a CN certificate: %d %v", code, err)
	}
}
