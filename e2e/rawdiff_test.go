package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/e2e/harness"
)

// Raw gRPC differential tests: the same sequence of calls, made with
// etcd's generated clients (no etcdctl in between), against real etcd and
// then the target, each response recorded as normalized JSON or as its
// gRPC code and message; the two transcripts must be equal line for line.

// rawCase is one side's run: its server, clients and transcript.
type rawCase struct {
	t       *testing.T
	srv     *harness.Server
	conn    *grpc.ClientConn
	ctx     context.Context // the identity calls are made with
	kv      pb.KVClient
	lease   pb.LeaseClient
	maint   pb.MaintenanceClient
	watch   pb.WatchClient
	auth    pb.AuthClient
	cluster pb.ClusterClient
	self    uint64 // this member's id, shown as <self>
	out     []string
}

// runRawDiff runs body against etcd, then against the target, each on a
// fresh server started with flags, and compares the transcripts.
func runRawDiff(t *testing.T, flags []string, body func(c *rawCase)) {
	b := needBins(t)
	sides := []struct{ label, bin string }{{"etcd", b.Etcd}, {"target", targetBin(t, b)}}
	var transcripts [2][]string
	for i, side := range sides {
		srv, err := harness.NewServer(harness.ServerConfig{Bin: side.bin, Dir: t.TempDir(), Flags: flags})
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		c := newRawCase(t, srv)
		body(c)
		c.conn.Close()
		srv.Stop()
		transcripts[i] = c.out
		if t.Failed() {
			t.Logf("%s's transcript so far:\n%s", side.label, strings.Join(c.out, "\n"))
			return
		}
	}
	want, got := transcripts[0], transcripts[1]
	t.Logf("etcd's transcript (%d lines):\n%s", len(want), strings.Join(want, "\n"))
	mismatches := 0
	for i := 0; i < max(len(want), len(got)); i++ {
		var w, g string
		if i < len(want) {
			w = want[i]
		}
		if i < len(got) {
			g = got[i]
		}
		if w != g {
			mismatches++
			t.Errorf("line %d:\n  etcd:   %s\n  target: %s", i+1, w, g)
		}
	}
	t.Logf("%d lines, %d mismatches", len(want), mismatches)
}

func newRawCase(t *testing.T, srv *harness.Server) *rawCase {
	conn, err := grpc.NewClient(strings.TrimPrefix(srv.ClientURL, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	c := &rawCase{t: t, srv: srv, conn: conn, ctx: context.Background(),
		kv: pb.NewKVClient(conn), lease: pb.NewLeaseClient(conn), maint: pb.NewMaintenanceClient(conn),
		watch: pb.NewWatchClient(conn), auth: pb.NewAuthClient(conn), cluster: pb.NewClusterClient(conn)}
	st, err := c.maint.Status(c.ctx, &pb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	c.self = st.Header.MemberId
	return c
}

// call bounds one call, so that a server that never answers fails the
// test instead of hanging it.
func (c *rawCase) call() (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.ctx, 10*time.Second)
}

func (c *rawCase) note(format string, args ...any) {
	c.out = append(c.out, fmt.Sprintf(format, args...))
}

// rec records a call's response or error under name.
func (c *rawCase) rec(name string, m proto.Message, err error) {
	if err != nil {
		st := status.Convert(err)
		c.note("%s: error %s %q", name, st.Code(), st.Message())
		return
	}
	c.note("%s: %s", name, c.json(m))
}

// must fails the test on a setup call's error.
func (c *rawCase) must(_ any, err error) {
	c.t.Helper()
	if err != nil {
		c.t.Fatalf("%s: %v", c.srv.Bin(), err)
	}
}

type headered interface{ GetHeader() *pb.ResponseHeader }

// json is m as compact JSON with etcd's field names, without the parts
// that differ between any two servers (cluster and member ids, raft
// term), and with this member's id shown as <self>. The header's
// revision stays: it is part of the API.
func (c *rawCase) json(m proto.Message) string {
	m = proto.Clone(m)
	if h, ok := m.(headered); ok && h.GetHeader() != nil {
		hd := h.GetHeader()
		hd.ClusterId, hd.MemberId, hd.RaftTerm = 0, 0, 0
	}
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		c.t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil { // protojson varies its spacing
		c.t.Fatal(err)
	}
	return strings.ReplaceAll(buf.String(), strconv.FormatUint(c.self, 10), "<self>")
}

// httpGet records a GET on the client port: status, and the body quoted
// (so trailing newlines show). With sortLines the body's lines are sorted
// first (etcd runs its /readyz checks from a map, in no fixed order).
func (c *rawCase) httpGet(name, path string, sortLines bool) {
	cl := &http.Client{Timeout: 10 * time.Second}
	resp, err := cl.Get(c.srv.ClientURL + path)
	if err != nil {
		c.note("%s: error %v", name, err)
		return
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		c.note("%s: read error %v", name, err)
		return
	}
	s := string(body)
	if sortLines {
		lines := strings.SplitAfter(s, "\n")
		sort.Strings(lines)
		s = strings.Join(lines, "")
	}
	c.note("%s: HTTP %d %q", name, resp.StatusCode, s)
}
