package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/strata-db/strata/membership"
)

// TestPeerHandler: the peer port's non-raft endpoints answer as etcd's
// do: /members (etcd's JSON, by id, with the cluster id header),
// /version, /members/promote/<id> with etcd's refusals, extras, and 404
// for anything else.
func TestPeerHandler(t *testing.T) {
	a := newMember(t, 1, 0xabc, nil, nil)
	var promoted uint64
	var promoteErr error
	h := NewPeerHandler(PeerHandlerConfig{
		Transport: a.tr,
		Members: func() []*membership.Member {
			return []*membership.Member{
				{ID: 0x20, Name: "two", PeerURLs: []string{"http://10.0.0.2:2380"}, ClientURLs: []string{"http://10.0.0.2:2379"}},
				{ID: 0x10, PeerURLs: []string{"http://10.0.0.1:2380"}, IsLearner: true},
			}
		},
		Versions: func() (string, string) { return "3.7.0", "" },
		Promote: func(_ context.Context, id uint64, token string) ([]*membership.Member, error) {
			promoted = id
			if promoteErr != nil {
				return nil, promoteErr
			}
			return []*membership.Member{{ID: id, Name: token, PeerURLs: []string{"http://p"}}}, nil
		},
		Extra: map[string]http.Handler{"/leases": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "leases") })},
	})
	srv := httptest.NewServer(h)
	defer srv.Close()
	do := func(method, path string, hdr map[string]string) (int, string, http.Header) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}

	code, body, hdr := do("GET", "/members", nil)
	wantMembers := `[{"id":16,"peerURLs":["http://10.0.0.1:2380"],"isLearner":true},` +
		`{"id":32,"peerURLs":["http://10.0.0.2:2380"],"name":"two","clientURLs":["http://10.0.0.2:2379"]}]` + "\n"
	if code != 200 || body != wantMembers || hdr.Get("X-Etcd-Cluster-ID") != "abc" || hdr.Get("Content-Type") != "application/json" {
		t.Fatalf("/members: %d %q %v", code, body, hdr)
	}
	if code, body, _ = do("GET", "/version", nil); code != 200 || body != `{"etcdserver":"3.7.3","etcdcluster":"3.7.0","storage":"unknown","strata":"0.1.0"}` {
		t.Fatalf("/version: %d %q", code, body)
	}
	if code, body, _ = do("POST", "/members/promote/77", map[string]string{"Authorization": "tok"}); code != 200 || promoted != 77 ||
		body != `[{"id":77,"peerURLs":["http://p"],"name":"tok"}]`+"\n" {
		t.Fatalf("promote: %d %q (promoted %d)", code, body, promoted)
	}
	for _, c := range []struct {
		err  error
		code int
		body string
	}{
		{fmt.Errorf("wrapped: %w", ErrIDNotFound), 404, "membership: ID not found\n"},
		{ErrMemberNotLearner, 412, "membership: can only promote a learner member\n"},
		{ErrLearnerNotReady, 412, "etcdserver: can only promote a learner member which is in sync with leader\n"},
		{errors.New("disk on fire"), 500, `{"message":"Internal Server Error"}`},
	} {
		promoteErr = c.err
		if code, body, _ := do("POST", "/members/promote/5", nil); code != c.code || body != c.body {
			t.Fatalf("promote refusing with %v: %d %q, want %d %q", c.err, code, body, c.code, c.body)
		}
	}
	for _, c := range []struct {
		method, path string
		code         int
		body         string
	}{
		{"POST", "/members/promote/xyz", 404, "member xyz not found in cluster\n"},
		{"GET", "/members/promote/5", 405, "Method Not Allowed\n"},
		{"POST", "/members", 405, "Method Not Allowed\n"},
		{"POST", "/version", 405, "Method Not Allowed\n"},
		{"GET", "/nothing/here", 404, "404 page not found\n"},
		{"GET", "/leases", 200, "leases"},
	} {
		if code, body, _ := do(c.method, c.path, nil); code != c.code || body != c.body {
			t.Fatalf("%s %s: %d %q, want %d %q", c.method, c.path, code, body, c.code, c.body)
		}
	}
	if code, body, _ := do("GET", "/raft/probing", nil); code != 200 || len(body) == 0 {
		t.Fatalf("/raft/probing through the peer handler: %d %q", code, body)
	}
}
