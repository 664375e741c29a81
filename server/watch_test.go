package server

import (
	"bufio"
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// TestWatchAfterCloseSend: a client that sends its
// create request and half-closes the stream still gets the events, on a
// raw gRPC stream and through the JSON gateway's POST /v3/watch (which
// half-closes once it has read the request body).
func TestWatchAfterCloseSend(t *testing.T) {
	m := startMember(t, filepath.Join(t.TempDir(), "d"))
	defer m.stop(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	put := func(k, v string) {
		t.Helper()
		if _, err := m.kv.Put(ctx, &pb.PutRequest{Key: []byte(k), Value: []byte(v)}); err != nil {
			t.Fatal(err)
		}
	}

	ws, err := pb.NewWatchClient(m.conn).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ws.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{Key: []byte("foo")}}}); err != nil {
		t.Fatal(err)
	}
	if err := ws.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if r, err := ws.Recv(); err != nil || !r.Created {
		t.Fatalf("created response after CloseSend: %v, %v", r, err)
	}
	for _, v := range []string{"1", "2"} {
		put("foo", v)
		r, err := ws.Recv()
		if err != nil || len(r.Events) != 1 || string(r.Events[0].Kv.Value) != v {
			t.Fatalf("event for foo=%s after CloseSend: %v, %v", v, r, err)
		}
	}

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.client+"/v3/watch", strings.NewReader(`{"create_request":{"key":"Zm9v"}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewReader(resp.Body)
	l, err := lines.ReadString('\n')
	if err != nil || !strings.Contains(l, `"created":true`) {
		t.Fatalf("gateway watch: first line %q, %v; want the created response", l, err)
	}
	put("foo", "3")
	l, err = lines.ReadString('\n')
	if err != nil || !strings.Contains(l, `"value":"Mw=="`) { // "3"
		t.Fatalf("gateway watch: line after a put %q, %v; want the event", l, err)
	}
}

// TestWatchRefusalSentOnce: a create that reuses a
// watch_id on its stream, or asks for an empty range, gets one
// created-and-canceled response, as from etcd; the next message on the
// stream is the first watcher's event.
func TestWatchRefusalSentOnce(t *testing.T) {
	m := startMember(t, filepath.Join(t.TempDir(), "d"))
	defer m.stop(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ws, err := pb.NewWatchClient(m.conn).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	create := func(id int64, key, end string) {
		t.Helper()
		if err := ws.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{
			WatchId: id, Key: []byte(key), RangeEnd: []byte(end)}}}); err != nil {
			t.Fatal(err)
		}
	}
	create(7, "a", "")
	if r, err := ws.Recv(); err != nil || !r.Created || r.WatchId != 7 {
		t.Fatalf("first create: %v, %v", r, err)
	}
	for _, c := range []struct {
		id               int64
		key, end, reason string
	}{
		{7, "b", "", "mvcc: duplicate watch ID provided on the WatchStream"},
		{0, "b", "a", "mvcc: watcher range is empty"},
	} {
		create(c.id, c.key, c.end)
		r, err := ws.Recv()
		if err != nil || !r.Created || !r.Canceled || r.WatchId != -1 || r.CancelReason != c.reason {
			t.Fatalf("refused create (%s): %v, %v; want created and canceled, watch -1, %q", c.reason, r, err, c.reason)
		}
	}
	if _, err := m.kv.Put(ctx, &pb.PutRequest{Key: []byte("a"), Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	if r, err := ws.Recv(); err != nil || r.WatchId != 7 || len(r.Events) != 1 {
		t.Fatalf("after the refusals: %v, %v; want watch 7's event (a refusal sent twice?)", r, err)
	}
}
