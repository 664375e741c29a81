package server

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/strata-db/strata/internal/poll"
	"github.com/strata-db/strata/server/v3electionpb"
	"github.com/strata-db/strata/server/v3lockpb"
)

func wantStatus(t *testing.T, err error, code codes.Code, msg string) {
	t.Helper()
	if status.Code(err) != code || status.Convert(err).Message() != msg {
		t.Fatalf("error %v, want %v %q", err, code, msg)
	}
}

func TestLock(t *testing.T) {
	m := startMember(t, filepath.Join(t.TempDir(), "d"))
	defer m.stop(t)
	ctx := context.Background()
	lc := v3lockpb.NewLockClient(m.conn)
	lease := pb.NewLeaseClient(m.conn)
	grant := func() int64 {
		r, err := lease.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 60})
		if err != nil {
			t.Fatal(err)
		}
		return r.ID
	}
	la, lb := grant(), grant()

	a, err := lc.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("l"), Lease: la})
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("l/%x", la); string(a.Key) != want || a.Header.Revision != 2 {
		t.Fatalf("lock: key %q rev %d, want %q at 2", a.Key, a.Header.Revision, want)
	}
	// Locking again with the same lease is a no-op.
	if again, err := lc.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("l"), Lease: la}); err != nil || string(again.Key) != string(a.Key) {
		t.Fatalf("relock: %v %v", again, err)
	}

	got := make(chan *v3lockpb.LockResponse, 1)
	go func() {
		r, err := lc.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("l"), Lease: lb})
		if err != nil {
			t.Error(err)
		}
		got <- r
	}()
	select {
	case r := <-got:
		t.Fatalf("second lock granted while held: %v", r)
	case <-time.After(300 * time.Millisecond):
	}
	u, err := lc.Unlock(ctx, &v3lockpb.UnlockRequest{Key: a.Key})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if want := fmt.Sprintf("l/%x", lb); string(r.Key) != want || r.Header.Revision != u.Header.Revision {
			t.Fatalf("second lock: key %q rev %d, want %q at the unlock's %d", r.Key, r.Header.Revision, want, u.Header.Revision)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("second lock not granted after unlock")
	}

	// A waiter that gives up removes its key.
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = lc.Lock(cctx, &v3lockpb.LockRequest{Name: []byte("l")})
	cancel()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("lock with a deadline: %v", err)
	}
	// The waiter that gave up deletes its key (in the background).
	poll.Until(t, "the waiter that gave up to delete its key under l/", func() bool {
		rr, err := m.kv.Range(ctx, &pb.RangeRequest{Key: []byte("l/"), RangeEnd: []byte("l0"), CountOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		return rr.Count == 1
	})

	_, err = lc.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("x"), Lease: 12345})
	wantStatus(t, err, codes.Unknown, "etcdserver: requested lease not found")
	_, err = lc.Unlock(ctx, &v3lockpb.UnlockRequest{})
	wantStatus(t, err, codes.Unknown, "etcdserver: key is not provided")
}

func TestElection(t *testing.T) {
	waiting := make(chan string, 8)
	dir := filepath.Join(t.TempDir(), "d")
	client := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	peer := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	m := startHooked(t, []string{"--name", "m1", "--data-dir", dir,
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "m1=" + peer}, client, nil,
		storageHooks{deleteWait: func(key []byte) {
			select {
			case waiting <- string(key):
			default:
			}
		}})
	defer m.stop(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ec := v3electionpb.NewElectionClient(m.conn)

	_, err := ec.Leader(ctx, &v3electionpb.LeaderRequest{Name: []byte("e")})
	wantStatus(t, err, codes.Unknown, "election: no leader")

	obs, err := ec.Observe(ctx, &v3electionpb.LeaderRequest{Name: []byte("e")})
	if err != nil {
		t.Fatal(err)
	}
	observed := make(chan string, 16)
	go func() {
		for {
			r, err := obs.Recv()
			if err != nil {
				close(observed)
				return
			}
			observed <- fmt.Sprintf("%s@%d", r.Kv.Value, r.Header.Revision)
		}
	}()
	expect := func(want string) {
		t.Helper()
		select {
		case got := <-observed:
			if got != want {
				t.Fatalf("observed %s, want %s", got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("observed nothing, want %s", want)
		}
	}

	alice, err := ec.Campaign(ctx, &v3electionpb.CampaignRequest{Name: []byte("e"), Value: []byte("alice")})
	if err != nil {
		t.Fatal(err)
	}
	al := alice.Leader
	if string(al.Name) != "e" || string(al.Key) != fmt.Sprintf("e/%x", al.Lease) || al.Rev != 2 || alice.Header.Revision != 2 {
		t.Fatalf("campaign: %v", alice)
	}
	expect("alice@2")
	if _, err := ec.Proclaim(ctx, &v3electionpb.ProclaimRequest{Leader: al, Value: []byte("alice2")}); err != nil {
		t.Fatal(err)
	}
	expect("alice2@3")

	bobc := make(chan *v3electionpb.CampaignResponse, 1)
	go func() {
		r, err := ec.Campaign(ctx, &v3electionpb.CampaignRequest{Name: []byte("e"), Value: []byte("bob")})
		if err != nil {
			t.Error(err)
		}
		bobc <- r
	}()
	// Bob's campaign must wait for alice's key to go.
	select {
	case k := <-waiting:
		if k != string(al.Key) {
			t.Fatalf("bob waits for the deletion of %q, want alice's key %q", k, al.Key)
		}
	case r := <-bobc:
		t.Fatalf("bob elected while alice leads: %v", r)
	}
	l, err := ec.Leader(ctx, &v3electionpb.LeaderRequest{Name: []byte("e")})
	if err != nil || string(l.Kv.Value) != "alice2" {
		t.Fatalf("leader: %v %v", l, err)
	}
	wrong := &v3electionpb.LeaderKey{Name: al.Name, Key: al.Key, Rev: al.Rev + 100, Lease: al.Lease}
	_, err = ec.Proclaim(ctx, &v3electionpb.ProclaimRequest{Leader: wrong, Value: []byte("x")})
	wantStatus(t, err, codes.Unknown, "election: not leader")
	if _, err := ec.Resign(ctx, &v3electionpb.ResignRequest{Leader: wrong}); err != nil {
		t.Fatalf("resign with a lost leadership: %v", err)
	}
	_, err = ec.Resign(ctx, &v3electionpb.ResignRequest{})
	wantStatus(t, err, codes.Unknown, `"leader" field must be provided`)

	if _, err := ec.Resign(ctx, &v3electionpb.ResignRequest{Leader: al}); err != nil {
		t.Fatal(err)
	}
	var bob *v3electionpb.CampaignResponse
	select {
	case bob = <-bobc:
	case <-time.After(5 * time.Second):
		t.Fatal("bob not elected after alice resigned")
	}
	// bob's key was put at 4, alice's deleted at 5: the campaign answers
	// with the header of its own put; the observer reads bob at 5.
	if bob.Leader.Rev != 4 || bob.Header.Revision != 4 {
		t.Fatalf("bob: %v", bob)
	}
	expect("bob@5")
	if _, err := ec.Proclaim(ctx, &v3electionpb.ProclaimRequest{Leader: bob.Leader, Value: []byte("bob2")}); err != nil {
		t.Fatal(err)
	}
	expect("bob2@6")

	// The gateway serves the same calls in JSON.
	res, err := http.Post(m.client+"/v3/election/leader", "application/json",
		strings.NewReader(`{"name":"`+base64.StdEncoding.EncodeToString([]byte("e"))+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(body), `"value":"`+base64.StdEncoding.EncodeToString([]byte("bob2"))+`"`) {
		t.Fatalf("gateway leader: %d %s", res.StatusCode, body)
	}
	res, err = http.Post(m.client+"/v3/lock/lock", "application/json",
		strings.NewReader(`{"name":"`+base64.StdEncoding.EncodeToString([]byte("gl"))+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(body), `"key":"`+base64.StdEncoding.EncodeToString([]byte("gl/"))) {
		t.Fatalf("gateway lock: %d %s", res.StatusCode, body)
	}
}
