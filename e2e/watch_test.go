package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/strata-db/strata/e2e/harness"
)

// TestWatchStreams records, on etcd and on the
// target, what a raw gRPC Watch stream and the JSON gateway's
// POST /v3/watch deliver: a stream the client half-closes after its create
// request keeps delivering events; the gateway streams the created
// response and then each event as JSON lines; a create that reuses a
// watch_id on its stream, or asks for an empty range, gets exactly one
// created-and-canceled response, byte for byte etcd's.
func TestWatchStreams(t *testing.T) {
	runRawDiff(t, nil, watchSequence)
}

func watchSequence(c *rawCase) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	put := func(key, val string) {
		c.must(c.kv.Put(ctx, &pb.PutRequest{Key: []byte(key), Value: []byte(val)}))
	}
	create := func(id int64, key, end string) *pb.WatchRequest {
		return &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{
			WatchId: id, Key: []byte(key), RangeEnd: []byte(end)}}}
	}
	put("a", "0")

	// (a) create, then CloseSend, then writes from another client.
	wctx, wcancel := context.WithCancel(ctx)
	ws, err := c.watch.Watch(wctx)
	c.must(nil, err)
	c.must(nil, ws.Send(create(0, "a", "")))
	c.must(nil, ws.CloseSend())
	next := func(name string) {
		r, err := ws.Recv()
		c.rec(name, r, err)
	}
	next("half-closed: created")
	put("a", "1")
	next("half-closed: event 1")
	put("a", "2")
	next("half-closed: event 2")
	wcancel()

	// (b) the same watch_id twice on one stream, then an event for the
	// first watcher: what comes between is all the refusal sends.
	wctx, wcancel = context.WithCancel(ctx)
	ws, err = c.watch.Watch(wctx)
	c.must(nil, err)
	c.must(nil, ws.Send(create(7, "a", "")))
	next("watch_id 7: created")
	c.must(nil, ws.Send(create(7, "b", "")))
	next("watch_id 7 again: refused")
	put("a", "3")
	next("watch_id 7 again: next message")
	// An empty range ("b" to "a"), then a valid create on the stream.
	c.must(nil, ws.Send(create(0, "b", "a")))
	next("empty range: refused")
	c.must(nil, ws.Send(create(0, "a", "")))
	next("empty range: next message")
	wcancel()

	// (c) the gateway: POST /v3/watch, read the JSON lines as they come.
	gctx, gcancel := context.WithCancel(ctx)
	defer gcancel()
	req, err := http.NewRequestWithContext(gctx, http.MethodPost, c.srv.ClientURL+"/v3/watch",
		strings.NewReader(`{"create_request":{"key":"Zm9v"}}`))
	c.must(nil, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.note("gateway: error %v", err)
		return
	}
	defer resp.Body.Close()
	c.note("gateway: HTTP %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	lines := bufio.NewReader(resp.Body)
	line := func(name string) {
		l, err := lines.ReadString('\n')
		if err != nil {
			if err == io.EOF && l == "" {
				c.note("%s: stream ended", name)
			} else {
				c.note("%s: %q, error %v", name, l, err)
			}
			return
		}
		c.note("%s: %s", name, gatewayLine(l))
	}
	line("gateway: first line")
	put("foo", "bar")
	line("gateway: after put foo=bar")
	put("foo", "baz")
	line("gateway: after put foo=baz")
}

// gatewayLine normalizes one streamed JSON line of the gateway: the
// header's cluster and member ids and raft term (which differ between
// any two servers) go, keys are sorted, spacing is compact.
func gatewayLine(l string) string {
	var v map[string]any
	if err := json.Unmarshal([]byte(l), &v); err != nil {
		return "not JSON: " + l
	}
	if res, ok := v["result"].(map[string]any); ok {
		if h, ok := res["header"].(map[string]any); ok {
			delete(h, "cluster_id")
			delete(h, "member_id")
			delete(h, "raft_term")
		}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// gatewayWatchStep is the http scenario's gateway watch: POST /v3/watch
// with Go's HTTP client, read the created line, then the event line after
// each of two etcdctl puts; the lines are recorded as they came (the
// normalizer masks the ids in their headers).
func gatewayWatchStep() step {
	const body = `{"create_request":{"key":"Z3dhdGNo"}}` // "gwatch"
	return step{
		name: "gateway watch: created, then one line per put",
		show: "POST /v3/watch -d " + body + "; etcdctl put gwatch v1; etcdctl put gwatch v2",
		run: func(t *testing.T, s *side) harness.Result {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.srv.ClientURL+"/v3/watch", strings.NewReader(body))
			if err != nil {
				return harness.Result{Stderr: err.Error(), Code: 1}
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return harness.Result{Stderr: err.Error(), Code: 1}
			}
			defer resp.Body.Close()
			var out strings.Builder
			fmt.Fprintf(&out, "HTTP %d\n", resp.StatusCode)
			lines := bufio.NewReader(resp.Body)
			for i, val := range []string{"", "v1", "v2"} {
				if i > 0 {
					if r := s.ctl.Run("", "put", "gwatch", val); r.Code != 0 {
						return harness.Result{Stdout: out.String(), Stderr: r.Stderr, Code: 1}
					}
				}
				l, err := lines.ReadString('\n')
				if err != nil {
					fmt.Fprintf(&out, "%s(stream: %v)\n", l, err)
					return harness.Result{Stdout: out.String(), Code: 1}
				}
				out.WriteString(l)
			}
			return harness.Result{Stdout: out.String()}
		},
	}
}
