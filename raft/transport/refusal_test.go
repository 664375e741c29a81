package transport

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/internal/poll"
)

// peerRequest is a request as a peer member sends it; tweak edits the
// headers before it goes out. It returns the status and the body.
func peerRequest(t *testing.T, method, url string, body []byte, tweak func(http.Header)) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(hdrFrom, "2")
	req.Header.Set(hdrServerVersion, "3.7.3")
	req.Header.Set(hdrMinClusterVersion, "3.0.0")
	req.Header.Set(hdrClusterID, FormatID(100))
	req.Header.Set(hdrRaftTo, "1")
	if tweak != nil {
		tweak(req.Header)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK && strings.Contains(url, "/raft/stream/") {
		return resp.StatusCode, "", resp.Header // a stream: the body never ends
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// TestRefusals: every way etcd refuses a peer request, with etcd's status
// and text (etcd senders match the 412 texts).
func TestRefusals(t *testing.T) {
	a := newMember(t, 1, 100, nil, nil)
	if err := a.tr.AddPeer(2, []string{"http://127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	a.raft.removed[5] = true
	hb, _ := proto.Marshal(msg(raftpb.MsgHeartbeat, 2, 1, 1, 0))
	set := func(k, v string) func(http.Header) { return func(h http.Header) { h.Set(k, v) } }
	for _, c := range []struct {
		name, method, path string
		tweak              func(http.Header)
		code               int
		text               string
	}{
		{"other cluster, pipeline", "POST", "/raft", set(hdrClusterID, "63"), 412, "cluster ID mismatch\n"},
		{"other cluster, stream", "GET", "/raft/stream/message/2", set(hdrClusterID, "63"), 412, "cluster ID mismatch\n"},
		{"other cluster, snapshot", "POST", "/raft/snapshot", set(hdrClusterID, "63"), 412, "cluster ID mismatch\n"},
		{"no cluster id", "POST", "/raft", func(h http.Header) { h.Del(hdrClusterID) }, 412, "cluster ID mismatch\n"},
		{"server too old", "POST", "/raft", set(hdrServerVersion, "2.3.8"), 412, "incompatible version\n"},
		{"etcd 2.0 (no version)", "GET", "/raft/stream/msgapp/2", func(h http.Header) { h.Del(hdrServerVersion) }, 412, "incompatible version\n"},
		{"cluster too new", "POST", "/raft", set(hdrMinClusterVersion, "3.8.0"), 412, "incompatible version\n"},
		{"bad version", "POST", "/raft", set(hdrServerVersion, "three"), 412, "incompatible version\n"},
		{"removed member", "GET", "/raft/stream/message/5", nil, 410, "removed member\n"},
		{"unknown sender", "GET", "/raft/stream/message/9", nil, 404, "error sender not found\n"},
		{"bad sender id", "GET", "/raft/stream/message/zz", nil, 404, "invalid from\n"},
		{"bad stream type", "GET", "/raft/stream/msgappv2/2", nil, 404, "invalid path\n"},
		{"stream for another member", "GET", "/raft/stream/message/2", set(hdrRaftTo, "7"), 412, "to field mismatch\n"},
		{"stream by POST", "POST", "/raft/stream/message/2", nil, 405, "Method Not Allowed\n"},
		{"pipeline by GET", "GET", "/raft", nil, 405, "Method Not Allowed\n"},
		{"garbage message", "POST", "/raft", nil, 400, "error unmarshalling raft message\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := hb
			if c.name == "garbage message" {
				body = []byte{0xff, 0xff, 0xff}
			}
			code, text, hdr := peerRequest(t, c.method, a.url+c.path, body, c.tweak)
			if code != c.code || text != c.text {
				t.Fatalf("got %d %q, want %d %q", code, text, c.code, c.text)
			}
			if c.code != 405 && hdr.Get(hdrClusterID) != FormatID(100) {
				t.Fatalf("answer carries cluster id %q, want %q", hdr.Get(hdrClusterID), FormatID(100))
			}
		})
	}
	if n := len(a.raft.messages()); n != 0 {
		t.Fatalf("raft got %d messages from refused requests", n)
	}
	code, _, _ := peerRequest(t, "POST", a.url+"/raft", hb, nil)
	if code != http.StatusNoContent || a.raft.count(raftpb.MsgHeartbeat) != 1 {
		t.Fatalf("an acceptable request got %d and raft has %d heartbeats", code, a.raft.count(raftpb.MsgHeartbeat))
	}
}

// TestOtherClusterRefusedBothWays: two members configured with different
// cluster ids never exchange a message: the streams are refused (the
// dialer records why) and pipeline posts fail, reported unreachable.
func TestOtherClusterRefusedBothWays(t *testing.T) {
	a, c := newMember(t, 1, 100, nil, nil), newMember(t, 3, 200, nil, nil)
	connect(t, a, c)
	for _, pair := range [][2]*member{{a, c}, {c, a}} {
		from, to := pair[0], pair[1]
		poll.Until(t, "a cluster id refusal", func() bool {
			st, _ := from.tr.PeerStatus(to.id)
			return strings.Contains(st.LastError, "cluster ID mismatch")
		})
		from.tr.Send([]*raftpb.Message{msg(raftpb.MsgVote, from.id, to.id, 2, 3)}) // no stream: pipeline
		poll.Until(t, "the refused post reported unreachable", func() bool { return from.raft.unreachableCount(to.id) > 0 })
	}
	if len(a.raft.messages())+len(c.raft.messages()) != 0 {
		t.Fatalf("messages crossed clusters: %v %v", a.raft.messages(), c.raft.messages())
	}
	if st, _ := a.tr.PeerStatus(3); st.WritingMessage || st.WritingMsgApp || st.ReadingMessage || st.ReadingMsgApp {
		t.Fatalf("a stream to another cluster is up: %+v", st)
	}
}

// TestRemovedMemberLearnsIt: a member that the others removed learns it
// from a 410 on its stream dial, or a 403 on a post (etcd refuses raft
// messages from removed members with 403), and Removed() closes.
func TestRemovedMemberLearnsIt(t *testing.T) {
	t.Run("stream 410", func(t *testing.T) {
		a, b := newMember(t, 1, 100, nil, nil), newMember(t, 2, 100, nil, nil)
		b.raft.removed[1] = true
		connect(t, a, b)
		poll.Until(t, "a to learn it was removed", func() bool { return isClosed(a.tr.Removed()) })
	})
	t.Run("post 403", func(t *testing.T) {
		a, b := newMember(t, 1, 100, nil, nil), newMember(t, 2, 100, nil, nil)
		b.raft.setHook(func(context.Context, *raftpb.Message) error {
			return &RefusedError{Code: http.StatusForbidden, Message: "cannot process message from removed member"}
		})
		if err := a.tr.AddPeer(2, []string{b.url}); err != nil { // b does not dial back: pipeline
			t.Fatal(err)
		}
		a.tr.Send([]*raftpb.Message{msg(raftpb.MsgHeartbeat, 1, 2, 1, 0)})
		poll.Until(t, "a to learn it was removed", func() bool { return isClosed(a.tr.Removed()) })
		poll.Until(t, "the refused message reported unreachable", func() bool { return a.raft.unreachableCount(2) > 0 })
	})
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
