package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/e2e/harness"
	"github.com/strata-db/strata/internal/poll"
)

// TestPeerMessageToAnotherMember: a raft message posted to a member's
// peer port but addressed to another member id is refused as etcd
// refuses it (403, "cannot process message to mismatch member"): the
// peer URL belongs to a member with a new id now. The same message
// addressed to the member is taken (204).
func TestPeerMessageToAnotherMember(t *testing.T) {
	bin := strataTarget(t)
	s, err := harness.NewServer(harness.ServerConfig{Bin: bin, Name: "m1", Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), poll.Deadline)
	defer cancel()
	st, err := memberClient(t, s).Status(ctx, s.ClientURL)
	if err != nil {
		t.Fatal(err)
	}
	post := func(to uint64) (int, string) {
		t.Helper()
		// A stale append response (term 1, below the member's): raft
		// ignores it once taken.
		typ, from, term := raftpb.MsgAppResp, uint64(0x1234), uint64(1)
		m := raftpb.Message{Type: &typ, From: &from, To: &to, Term: &term}
		body, err := proto.Marshal(&m)
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.PeerURL+"/raft", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/protobuf")
		req.Header.Set("X-Etcd-Cluster-ID", fmt.Sprintf("%x", st.Header.ClusterId))
		req.Header.Set("X-Server-From", fmt.Sprintf("%x", from))
		req.Header.Set("X-Server-Version", "3.7.3")
		req.Header.Set("X-Min-Cluster-Version", "3.0.0")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
	if code, body := post(st.Header.MemberId + 1); code != http.StatusForbidden || body != "cannot process message to mismatch member" {
		t.Fatalf("a message for another member: %d %q, want 403 %q", code, body, "cannot process message to mismatch member")
	}
	if code, body := post(st.Header.MemberId); code != http.StatusNoContent {
		t.Fatalf("a message for the member: %d %q, want 204", code, body)
	}
}
