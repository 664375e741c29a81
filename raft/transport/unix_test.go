package transport

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestUnixPeerURL: a unix:// peer URL (etcd accepts them) parses, and the
// transport's dialer reaches the socket it names, as etcd's does.
func TestUnixPeerURL(t *testing.T) {
	// etcd's form: the socket is the URL's host part, a path relative to
	// the working directory.
	t.Chdir(t.TempDir())
	sock := "peer.unix:1"
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })}
	go srv.Serve(l)
	defer srv.Close()

	us, err := parseURLs([]string{"unix://" + sock})
	if err != nil {
		t.Fatal(err)
	}
	if us[0].Scheme != "http" || us[0].Host != sock {
		t.Fatalf("parsed %v", us[0])
	}
	cl := &http.Client{Transport: newRoundTripper(nil, nil, time.Second, 0, 0)}
	resp, err := cl.Get(us[0].String() + "/version")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "ok" {
		t.Fatalf("body %q", b)
	}
	if _, err := parseURLs([]string{"ftp://x:1"}); err == nil {
		t.Fatal("ftp:// accepted as a peer URL")
	}
}
