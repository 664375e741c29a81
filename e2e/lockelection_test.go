package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3election/v3electionpb"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/strata-db/strata/e2e/harness"
	"github.com/strata-db/strata/internal/poll"
)

// TestLockElection drives etcd's v3lock and v3election gRPC services (and
// their JSON gateway) with the same sequence of calls against real etcd
// and the target, with etcd's own generated client types, and requires
// identical transcripts: responses with their header revisions, keys and
// values, and the gRPC code and message of every error. Lease ids the
// server chooses (a Lock or Campaign without a lease) are numbered in
// order of appearance.
func TestLockElection(t *testing.T) {
	b := needBins(t)
	sides := []struct{ label, bin string }{{"etcd", b.Etcd}, {"target", targetBin(t, b)}}
	var transcripts [2][]string
	for i, side := range sides {
		srv, err := harness.NewServer(harness.ServerConfig{Bin: side.bin, Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		transcripts[i] = runLockElection(t, srv)
		srv.Stop()
		if t.Failed() {
			return
		}
	}
	want, got := transcripts[0], transcripts[1]
	t.Logf("etcd's transcript (%d lines):\n%s", len(want), strings.Join(want, "\n"))
	for i := 0; i < max(len(want), len(got)); i++ {
		var w, g string
		if i < len(want) {
			w = want[i]
		}
		if i < len(got) {
			g = got[i]
		}
		if w != g {
			t.Errorf("line %d:\n  etcd:   %s\n  target: %s", i+1, w, g)
		}
	}
}

// leCase is one side's run: its clients and the transcript.
type leCase struct {
	t      *testing.T
	srv    *harness.Server
	ctx    context.Context
	kv     pb.KVClient
	lease  pb.LeaseClient
	lock   v3lockpb.LockClient
	elect  v3electionpb.ElectionClient
	out    []string
	leases map[int64]string // lease id -> its name in the transcript
}

// Client-chosen lease ids, the same on both sides.
const (
	leaseA, leaseB, leaseC = 0xa1, 0xb2, 0xc3
	leaseE1, leaseE2       = 0xe1, 0xe2
	leaseE3, leaseE4       = 0xe3, 0xe4
)

func (c *leCase) rec(format string, args ...any) { c.out = append(c.out, fmt.Sprintf(format, args...)) }

// leaseName names a lease id: client-chosen ones by their hex, others
// (chosen by the server) L1, L2, ... in order of appearance.
func (c *leCase) leaseName(id int64) string {
	switch id {
	case 0:
		return "0"
	case leaseA, leaseB, leaseC, leaseE1, leaseE2, leaseE3, leaseE4:
		return fmt.Sprintf("%x", id)
	}
	if n, ok := c.leases[id]; ok {
		return n
	}
	n := fmt.Sprintf("L%d", len(c.leases)+1)
	c.leases[id] = n
	return n
}

var leaseSuffix = regexp.MustCompile(`^(.*/)([0-9a-f]{1,16})$`)

// key shows a lock or election key with its lease suffix named.
func (c *leCase) key(k []byte) string {
	m := leaseSuffix.FindSubmatch(k)
	if m == nil {
		return strconv.Quote(string(k))
	}
	id, err := strconv.ParseUint(string(m[2]), 16, 64)
	if err != nil {
		return strconv.Quote(string(k))
	}
	return strconv.Quote(string(m[1]) + "<" + c.leaseName(int64(id)) + ">")
}

func hdr(h *pb.ResponseHeader) string {
	if h == nil {
		return "header=nil"
	}
	ok := h.ClusterId != 0 && h.MemberId != 0 && h.RaftTerm != 0
	return fmt.Sprintf("rev=%d ids-set=%v", h.Revision, ok)
}

func (c *leCase) kvString(kv *mvccpb.KeyValue) string {
	if kv == nil {
		return "kv=nil"
	}
	return fmt.Sprintf("kv{%s=%q create=%d mod=%d ver=%d lease=%s}", c.key(kv.Key), kv.Value,
		kv.CreateRevision, kv.ModRevision, kv.Version, c.leaseName(kv.Lease))
}

func (c *leCase) leaderKey(l *v3electionpb.LeaderKey) string {
	if l == nil {
		return "leader=nil"
	}
	return fmt.Sprintf("leader{name=%q key=%s rev=%d lease=%s}", l.Name, c.key(l.Key), l.Rev, c.leaseName(l.Lease))
}

// errString shows an error's code and message; for a deadline the
// client's own, only the code (its text depends on which side of the
// connection noticed first).
func errString(err error) string {
	st := status.Convert(err)
	if st.Code() == codes.DeadlineExceeded {
		return "error " + st.Code().String()
	}
	return fmt.Sprintf("error %s %q", st.Code(), st.Message())
}

// result records a call's response (shown by show) or its error.
func result[T any](c *leCase, name string, resp T, err error, show func(T) string) T {
	if err != nil {
		c.rec("%s: %s", name, errString(err))
	} else {
		c.rec("%s: %s", name, show(resp))
	}
	return resp
}

func (c *leCase) grant(id int64) {
	if _, err := c.lease.LeaseGrant(c.ctx, &pb.LeaseGrantRequest{ID: id, TTL: 60}); err != nil {
		c.t.Fatal(err)
	}
}

// keys lists the keys under prefix in create order.
func (c *leCase) keys(name, prefix string) {
	r, err := c.kv.Range(c.ctx, &pb.RangeRequest{Key: []byte(prefix), RangeEnd: prefixEnd(prefix),
		SortTarget: pb.RangeRequest_CREATE, SortOrder: pb.RangeRequest_ASCEND})
	if err != nil {
		c.t.Fatal(err)
	}
	var ks []string
	for _, kv := range r.Kvs {
		ks = append(ks, c.kvString(kv))
	}
	c.rec("%s: %s [%s]", name, hdr(r.Header), strings.Join(ks, " "))
}

// prefixEnd is the range end of a prefix ending in '/'.
func prefixEnd(prefix string) []byte {
	end := []byte(prefix)
	end[len(end)-1]++
	return end
}

// waitCount polls until n keys exist under prefix (a blocked call has
// written its key, or a canceled one removed it).
func (c *leCase) waitCount(prefix string, n int64) {
	c.t.Helper()
	end := prefixEnd(prefix)
	poll.UntilNil(c.t, fmt.Sprintf("%s: %d keys under %q", c.srv.Bin(), n, prefix), func() error {
		r, err := c.kv.Range(c.ctx, &pb.RangeRequest{Key: []byte(prefix), RangeEnd: end, CountOnly: true})
		if err != nil {
			c.t.Fatal(err)
		}
		if r.Count != n {
			return fmt.Errorf("%d keys", r.Count)
		}
		return nil
	})
}

// pending is a call running in the background.
type pending[T any] struct {
	ch chan pendingResult[T]
}

type pendingResult[T any] struct {
	resp T
	err  error
}

func start[T any](fn func() (T, error)) pending[T] {
	p := pending[T]{ch: make(chan pendingResult[T], 1)}
	go func() {
		r, err := fn()
		p.ch <- pendingResult[T]{r, err}
	}()
	return p
}

// stillBlocked reports whether the call has not returned after a while.
func (p pending[T]) stillBlocked() bool {
	select {
	case r := <-p.ch:
		p.ch <- r
		return false
	case <-time.After(300 * time.Millisecond):
		return true
	}
}

func (p pending[T]) wait(t *testing.T) (T, error) {
	select {
	case r := <-p.ch:
		return r.resp, r.err
	case <-time.After(10 * time.Second):
		t.Fatal("a blocked call did not return within 10s")
		var zero T
		return zero, nil
	}
}

func runLockElection(t *testing.T, srv *harness.Server) []string {
	conn, err := grpc.NewClient(srv.ClientAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := &leCase{t: t, srv: srv, ctx: ctx, kv: pb.NewKVClient(conn), lease: pb.NewLeaseClient(conn),
		lock: v3lockpb.NewLockClient(conn), elect: v3electionpb.NewElectionClient(conn), leases: map[int64]string{}}
	c.lockCalls()
	c.electionCalls()
	c.gatewayCalls()
	return c.out
}

func (c *leCase) lockCalls() {
	ctx, t := c.ctx, c.t
	showLock := func(r *v3lockpb.LockResponse) string { return hdr(r.Header) + " key=" + c.key(r.Key) }
	showUnlock := func(r *v3lockpb.UnlockResponse) string { return hdr(r.Header) }
	for _, id := range []int64{leaseA, leaseB, leaseC} {
		c.grant(id)
	}

	a, err := c.lock.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("lk"), Lease: leaseA})
	result(c, "lock lk with A", a, err, showLock)
	if err != nil {
		t.Fatalf("%s: %v", c.srv.Bin(), err)
	}
	r, err := c.lock.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("lk"), Lease: leaseA})
	result(c, "lock lk with A again", r, err, showLock)

	// Contention: B waits until A unlocks.
	pb2 := start(func() (*v3lockpb.LockResponse, error) {
		return c.lock.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("lk"), Lease: leaseB})
	})
	c.waitCount("lk/", 2)
	c.rec("lock lk with B blocked while A holds it: %v", pb2.stillBlocked())
	c.keys("keys under lk/", "lk/")
	u, err := c.lock.Unlock(ctx, &v3lockpb.UnlockRequest{Key: a.Key})
	result(c, "unlock A", u, err, showUnlock)
	bresp, err := pb2.wait(t)
	result(c, "lock lk with B after A unlocked", bresp, err, showLock)

	// A third waiter whose lease goes away while it waits.
	pc := start(func() (*v3lockpb.LockResponse, error) {
		return c.lock.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("lk"), Lease: leaseC})
	})
	c.waitCount("lk/", 2)
	c.rec("lock lk with C blocked while B holds it: %v", pc.stillBlocked())
	_, err = c.lease.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: leaseC})
	c.rec("revoke C: %v", err)
	c.rec("lock lk with C blocked after its lease is revoked: %v", pc.stillBlocked())
	u, err = c.lock.Unlock(ctx, &v3lockpb.UnlockRequest{Key: bresp.Key})
	result(c, "unlock B", u, err, showUnlock)
	r, err = pc.wait(t)
	result(c, "lock lk with C after B unlocked", r, err, showLock)

	// Revoking the holder's lease releases the lock.
	r, err = c.lock.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("lk2"), Lease: leaseA})
	result(c, "lock lk2 with A", r, err, showLock)
	pbB := start(func() (*v3lockpb.LockResponse, error) {
		return c.lock.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("lk2"), Lease: leaseB})
	})
	c.waitCount("lk2/", 2)
	c.rec("lock lk2 with B blocked: %v", pbB.stillBlocked())
	_, err = c.lease.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: leaseA})
	c.rec("revoke A: %v", err)
	r, err = pbB.wait(t)
	result(c, "lock lk2 with B after A's lease was revoked", r, err, showLock)

	// A lock without a lease gets a server-granted one.
	r, err = c.lock.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("lk3")})
	result(c, "lock lk3 without a lease", r, err, showLock)
	if r != nil {
		m := leaseSuffix.FindSubmatch(r.Key)
		id, _ := strconv.ParseUint(string(m[2]), 16, 64)
		ttl, err := c.lease.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: int64(id), Keys: true})
		result(c, "its lease", ttl, err, func(r *pb.LeaseTimeToLiveResponse) string {
			return fmt.Sprintf("granted_ttl=%d keys=%d", r.GrantedTTL, len(r.Keys))
		})
	}
	// A waiter that gives up (deadline) removes its key.
	dctx, dcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	r, err = c.lock.Lock(dctx, &v3lockpb.LockRequest{Name: []byte("lk3"), Lease: leaseB})
	dcancel()
	result(c, "lock lk3 with B and a deadline", r, err, showLock)
	c.waitCount("lk3/", 1)
	c.keys("keys under lk3/ after the waiter gave up", "lk3/")

	r, err = c.lock.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("lk4"), Lease: 0x7777})
	result(c, "lock with a missing lease", r, err, showLock)
	r, err = c.lock.Lock(ctx, &v3lockpb.LockRequest{Lease: leaseB})
	result(c, "lock with an empty name", r, err, showLock)
	u, err = c.lock.Unlock(ctx, &v3lockpb.UnlockRequest{})
	result(c, "unlock an empty key", u, err, showUnlock)
	u, err = c.lock.Unlock(ctx, &v3lockpb.UnlockRequest{Key: []byte("lk/none")})
	result(c, "unlock a missing key", u, err, showUnlock)
}

func (c *leCase) electionCalls() {
	ctx, t := c.ctx, c.t
	showCampaign := func(r *v3electionpb.CampaignResponse) string { return hdr(r.Header) + " " + c.leaderKey(r.Leader) }
	showLeader := func(r *v3electionpb.LeaderResponse) string { return hdr(r.Header) + " " + c.kvString(r.Kv) }
	showProclaim := func(r *v3electionpb.ProclaimResponse) string { return hdr(r.Header) }
	showResign := func(r *v3electionpb.ResignResponse) string { return hdr(r.Header) }
	for _, id := range []int64{leaseE1, leaseE2, leaseE3, leaseE4} {
		c.grant(id)
	}
	name := []byte("el")

	l, err := c.elect.Leader(ctx, &v3electionpb.LeaderRequest{Name: name})
	result(c, "leader with no candidate", l, err, showLeader)

	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	obs, err := c.elect.Observe(octx, &v3electionpb.LeaderRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	observed := make(chan *v3electionpb.LeaderResponse, 32)
	go func() {
		defer close(observed)
		for {
			r, err := obs.Recv()
			if err != nil {
				return
			}
			observed <- r
		}
	}()
	// Each write the observer must see is followed by waiting for it, so
	// that what it reports does not depend on timing.
	observe := func(what string) {
		t.Helper()
		select {
		case r, ok := <-observed:
			if !ok {
				c.rec("observe %s: stream ended", what)
				return
			}
			c.rec("observe %s: %s", what, showLeader(r))
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: observer saw nothing for %s", c.srv.Bin(), what)
		}
	}

	alice, err := c.elect.Campaign(ctx, &v3electionpb.CampaignRequest{Name: name, Lease: leaseE1, Value: []byte("alice")})
	result(c, "campaign alice", alice, err, showCampaign)
	if err != nil {
		t.Fatalf("%s: %v", c.srv.Bin(), err)
	}
	observe("alice elected")
	p, err := c.elect.Proclaim(ctx, &v3electionpb.ProclaimRequest{Leader: alice.Leader, Value: []byte("alice-2")})
	result(c, "proclaim alice-2", p, err, showProclaim)
	observe("alice-2")

	// A second observer starts while alice leads.
	obs2, err := c.elect.Observe(octx, &v3electionpb.LeaderRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := obs2.Recv()
	result(c, "second observer's first", r2, err, showLeader)

	bob := start(func() (*v3electionpb.CampaignResponse, error) {
		return c.elect.Campaign(ctx, &v3electionpb.CampaignRequest{Name: name, Lease: leaseE2, Value: []byte("bob")})
	})
	c.waitCount("el/", 2)
	c.rec("campaign bob blocked while alice leads: %v", bob.stillBlocked())
	l, err = c.elect.Leader(ctx, &v3electionpb.LeaderRequest{Name: name})
	result(c, "leader", l, err, showLeader)

	wrong := &v3electionpb.LeaderKey{Name: name, Key: alice.Leader.Key, Rev: alice.Leader.Rev + 1000, Lease: leaseE1}
	p, err = c.elect.Proclaim(ctx, &v3electionpb.ProclaimRequest{Leader: wrong, Value: []byte("x")})
	result(c, "proclaim with a wrong leader rev", p, err, showProclaim)
	p, err = c.elect.Proclaim(ctx, &v3electionpb.ProclaimRequest{Leader: &v3electionpb.LeaderKey{Name: name, Lease: leaseE1}, Value: []byte("x")})
	result(c, "proclaim with an empty leader key", p, err, showProclaim)
	p, err = c.elect.Proclaim(ctx, &v3electionpb.ProclaimRequest{Value: []byte("x")})
	result(c, "proclaim without a leader", p, err, showProclaim)
	rs, err := c.elect.Resign(ctx, &v3electionpb.ResignRequest{Leader: wrong})
	result(c, "resign with a wrong leader rev", rs, err, showResign)
	rs, err = c.elect.Resign(ctx, &v3electionpb.ResignRequest{})
	result(c, "resign without a leader", rs, err, showResign)
	c.keys("keys under el/", "el/")

	// Campaigning again with the leader's lease and a new value keeps the
	// leadership and proclaims the value.
	again, err := c.elect.Campaign(ctx, &v3electionpb.CampaignRequest{Name: name, Lease: leaseE1, Value: []byte("alice-3")})
	result(c, "campaign alice again", again, err, showCampaign)
	observe("alice-3")

	rs, err = c.elect.Resign(ctx, &v3electionpb.ResignRequest{Leader: alice.Leader})
	result(c, "resign alice", rs, err, showResign)
	br, err := bob.wait(t)
	result(c, "campaign bob after alice resigned", br, err, showCampaign)
	observe("bob elected")
	if br != nil {
		p, err = c.elect.Proclaim(ctx, &v3electionpb.ProclaimRequest{Leader: br.Leader, Value: []byte("bob-2")})
		result(c, "proclaim bob-2", p, err, showProclaim)
		observe("bob-2")
	}

	// A candidate that gives up (deadline) withdraws.
	dctx, dcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	cr, err := c.elect.Campaign(dctx, &v3electionpb.CampaignRequest{Name: name, Lease: leaseE3, Value: []byte("carol")})
	dcancel()
	result(c, "campaign carol with a deadline", cr, err, showCampaign)
	c.waitCount("el/", 1)
	c.keys("keys under el/ after carol gave up", "el/")

	// The leader's lease goes: no leader until the next campaign, which
	// the observer sees as the first put.
	_, err = c.lease.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: leaseE2})
	c.rec("revoke bob's lease: %v", err)
	l, err = c.elect.Leader(ctx, &v3electionpb.LeaderRequest{Name: name})
	result(c, "leader after bob's lease was revoked", l, err, showLeader)
	dave, err := c.elect.Campaign(ctx, &v3electionpb.CampaignRequest{Name: name, Value: []byte("dave")})
	result(c, "campaign dave without a lease", dave, err, showCampaign)
	observe("dave elected")
	if dave != nil {
		rs, err = c.elect.Resign(ctx, &v3electionpb.ResignRequest{Leader: dave.Leader})
		result(c, "resign dave", rs, err, showResign)
	}
	// Resign and proclaim with a leader key without a lease: the server
	// grants one on the way, as etcd does.
	rs, err = c.elect.Resign(ctx, &v3electionpb.ResignRequest{Leader: &v3electionpb.LeaderKey{Name: name, Key: []byte("el/none"), Rev: 1}})
	result(c, "resign a leader key without a lease", rs, err, showResign)
	ll, err := c.lease.LeaseLeases(ctx, &pb.LeaseLeasesRequest{})
	result(c, "leases", ll, err, func(r *pb.LeaseLeasesResponse) string { return fmt.Sprintf("%d leases", len(r.Leases)) })
	ocancel()
	for range observed {
		c.rec("observe after cancel: unexpected message")
	}
}

// gatewayCalls uses the JSON gateway. Its JSON is compared as data (the
// protojson encoder varies its spacing between builds).
func (c *leCase) gatewayCalls() {
	post := func(name, path, body string) map[string]any {
		res, err := http.Post(c.srv.ClientURL+path, "application/json", strings.NewReader(body))
		if err != nil {
			c.t.Fatal(err)
		}
		defer res.Body.Close()
		data, _ := io.ReadAll(res.Body)
		var v map[string]any
		if err := json.Unmarshal(data, &v); err != nil {
			c.rec("gateway %s: HTTP %d, not JSON: %q", name, res.StatusCode, data)
			return nil
		}
		c.rec("gateway %s: HTTP %d %s", name, res.StatusCode, c.normJSON(v))
		return v
	}
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	c.grant(0x9a)
	v := post("lock", "/v3/lock/lock", `{"name":"`+b64("gl")+`","lease":"154"}`)
	key, _ := v["key"].(string)
	post("unlock", "/v3/lock/unlock", `{"key":"`+key+`"}`)
	post("leader of an empty election", "/v3/election/leader", `{"name":"`+b64("ge")+`"}`)
	v = post("campaign", "/v3/election/campaign", `{"name":"`+b64("ge")+`","lease":"154","value":"`+b64("v1")+`"}`)
	post("leader", "/v3/election/leader", `{"name":"`+b64("ge")+`"}`)
	if leader, ok := v["leader"].(map[string]any); ok {
		lj, _ := json.Marshal(leader)
		post("proclaim", "/v3/election/proclaim", `{"leader":`+string(lj)+`,"value":"`+b64("v2")+`"}`)
		post("resign", "/v3/election/resign", `{"leader":`+string(lj)+`}`)
	}
	post("proclaim without a leader", "/v3/election/proclaim", `{"value":"`+b64("v3")+`"}`)
	post("bad body", "/v3/lock/lock", `{"name":5}`)

	// Observe streams one JSON object per proclamation.
	_, err := c.elect.Campaign(c.ctx, &v3electionpb.CampaignRequest{Name: []byte("go"), Lease: 0x9a, Value: []byte("gv")})
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(c.ctx, 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, c.srv.ClientURL+"/v3/election/observe", strings.NewReader(`{"name":"`+b64("go")+`"}`))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer res.Body.Close()
	dec := json.NewDecoder(res.Body)
	var first map[string]any
	if err := dec.Decode(&first); err != nil {
		c.rec("gateway observe: HTTP %d, %v", res.StatusCode, err)
		return
	}
	c.rec("gateway observe: HTTP %d %s", res.StatusCode, c.normJSON(first))
}

var jsonKeyFields = map[string]bool{"key": true}

// normJSON prints v with sorted keys, headers reduced to their revision,
// lock and election keys and leases named as elsewhere. protobuf-go's
// error texts put a space or, varying between builds, a no-break space
// after "proto:"; it is shown as a space.
func (c *leCase) normJSON(v any) string {
	var walk func(path string, v any) any
	walk = func(path string, v any) any {
		switch x := v.(type) {
		case map[string]any:
			out := map[string]any{}
			for k, e := range x {
				if k == "header" {
					if h, ok := e.(map[string]any); ok {
						out[k] = map[string]any{"revision": h["revision"]}
						continue
					}
				}
				out[k] = walk(k, e)
			}
			return out
		case []any:
			for i := range x {
				x[i] = walk(path, x[i])
			}
			return x
		case string:
			if jsonKeyFields[path] {
				if raw, err := base64.StdEncoding.DecodeString(x); err == nil {
					return "key:" + c.key(raw)
				}
			}
			if path == "lease" {
				if id, err := strconv.ParseInt(x, 10, 64); err == nil {
					return "lease:" + c.leaseName(id)
				}
			}
			return strings.ReplaceAll(x, "\u00a0", " ")
		}
		return v
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.Encode(walk("", v))
	return strings.TrimSpace(buf.String())
}
