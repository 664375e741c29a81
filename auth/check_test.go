package auth

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// permEnv has auth enabled and these users:
//
//	reader  READ      prefix /r/
//	writer  WRITE     prefix /w/
//	ranger  READWRITE [b, d) and the single key "k"
//	fromkey READ      from "m" to the end
//	norole  no role
//	root    root
func permEnv(t *testing.T) *env {
	e := newEnv(t)
	e.setupRoot()
	for _, u := range []string{"reader", "writer", "ranger", "fromkey", "norole"} {
		e.must(e.userAdd(u, "pw"))
	}
	for _, r := range []string{"ro", "wo", "rng", "fk"} {
		e.must(e.roleAdd(r))
	}
	e.must(e.grantPerm("ro", authpb.Permission_READ, "/r/", "/r0")) // etcdctl --prefix /r/
	e.must(e.grantPerm("wo", authpb.Permission_WRITE, "/w/", "/w0"))
	e.must(e.grantPerm("rng", authpb.Permission_READWRITE, "b", "d"))
	e.must(e.grantPerm("rng", authpb.Permission_READWRITE, "k", ""))
	e.must(e.grantPerm("fk", authpb.Permission_READ, "m", "\x00"))
	e.must(e.grantRole("reader", "ro"))
	e.must(e.grantRole("writer", "wo"))
	e.must(e.grantRole("ranger", "rng"))
	e.must(e.grantRole("fromkey", "fk"))
	e.must(e.enable())
	return e
}

func TestPermissionMatrix(t *testing.T) {
	e := permEnv(t)
	s := e.s
	type op int
	const (
		rng op = iota
		put
		del
	)
	cases := []struct {
		user     string
		op       op
		key, end string
		ok       bool
	}{
		{"reader", rng, "/r/a", "", true},
		{"reader", rng, "/r/", "/r0", true}, // the whole prefix
		{"reader", rng, "/r/a", "/r/z", true},
		{"reader", rng, "/r/a", "/s", false}, // runs past the prefix
		{"reader", rng, "/x", "", false},
		{"reader", rng, "\x00", "\x00", false}, // everything
		{"reader", put, "/r/a", "", false},
		{"reader", del, "/r/a", "", false},

		{"writer", put, "/w/a", "", true},
		{"writer", del, "/w/", "/w0", true},
		{"writer", del, "/w/a", "\x00", false},
		{"writer", rng, "/w/a", "", false},
		{"writer", put, "/r/a", "", false},

		{"ranger", rng, "b", "", true},
		{"ranger", rng, "b", "d", true},
		{"ranger", rng, "c", "d", true},
		{"ranger", rng, "b", "d\x00", false},
		{"ranger", rng, "a", "c", false},
		{"ranger", put, "cz", "", true},
		{"ranger", put, "d", "", false}, // range end is exclusive
		{"ranger", put, "k", "", true},
		{"ranger", put, "k0", "", false}, // a single-key permission
		{"ranger", rng, "k", "k\x00", true},
		{"ranger", rng, "k", "l", false},

		{"fromkey", rng, "m", "", true},
		{"fromkey", rng, "zzzz", "", true},
		{"fromkey", rng, "m", "\x00", true},
		{"fromkey", rng, "n", "\x00", true},
		{"fromkey", rng, "l", "\x00", false},
		{"fromkey", put, "z", "", false},

		{"norole", rng, "a", "", false},
		{"norole", put, "a", "", false},
		{"ghost", rng, "a", "", false}, // a token for a since-deleted user

		{"root", rng, "\x00", "\x00", true},
		{"root", put, "anything", "", true},
		{"root", del, "\x00", "\x00", true},
	}
	ai := func(u string) *AuthInfo { return &AuthInfo{Username: u, Revision: s.Revision()} }
	var table strings.Builder
	mismatches := 0
	for _, c := range cases {
		var err error
		switch c.op {
		case rng:
			err = s.IsRangePermitted(ai(c.user), []byte(c.key), []byte(c.end))
		case put:
			err = s.IsPutPermitted(ai(c.user), []byte(c.key))
		case del:
			err = s.IsDeleteRangePermitted(ai(c.user), []byte(c.key), []byte(c.end))
		}
		got := err == nil
		mark := "ok"
		if got != c.ok {
			mark = "MISMATCH"
			mismatches++
		}
		if err != nil && err != ErrPermissionDenied {
			t.Errorf("%s %v %q..%q: unexpected error %v", c.user, c.op, c.key, c.end, err)
		}
		fmt.Fprintf(&table, "%-8s %-6s %-10q %-8q allowed=%-5v %s\n", c.user, []string{"range", "put", "delete"}[c.op], c.key, c.end, got, mark)
	}
	t.Logf("permission matrix:\n%s", table.String())
	if mismatches > 0 {
		t.Fatalf("%d mismatches", mismatches)
	}

	// Admin: only root.
	wantErr(t, s.IsAdminPermitted(ai("root")), nil, "")
	wantErr(t, s.IsAdminPermitted(ai("reader")), ErrPermissionDenied, "etcdserver: permission denied")
	wantErr(t, s.IsAdminPermitted(ai("ghost")), ErrUserNotFound, "etcdserver: user name not found")
	wantErr(t, s.IsAdminPermitted(&AuthInfo{}), ErrUserEmpty, "etcdserver: user name is empty")

	// Disabled auth allows everything, even nobody.
	e.must(e.disable())
	for _, err := range []error{
		s.IsRangePermitted(&AuthInfo{}, []byte("x"), nil),
		s.IsPutPermitted(nil, []byte("x")),
		s.IsAdminPermitted(nil),
	} {
		if err != nil {
			t.Fatalf("auth disabled: %v", err)
		}
	}
}

func TestRevokeTakesEffectAtOnce(t *testing.T) {
	e := permEnv(t)
	s := e.s
	ai := func() *AuthInfo { return &AuthInfo{Username: "reader", Revision: s.Revision()} }
	wantErr(t, s.IsRangePermitted(ai(), []byte("/r/a"), nil), nil, "")

	e.must(e.revokePerm("ro", "/r/", "/r0"))
	wantErr(t, s.IsRangePermitted(ai(), []byte("/r/a"), nil), ErrPermissionDenied, "etcdserver: permission denied")

	e.must(e.grantPerm("ro", authpb.Permission_READ, "/r/", "/r0"))
	wantErr(t, s.IsRangePermitted(ai(), []byte("/r/a"), nil), nil, "")
	e.must(e.revokeRole("reader", "ro"))
	wantErr(t, s.IsRangePermitted(ai(), []byte("/r/a"), nil), ErrPermissionDenied, "etcdserver: permission denied")

	e.must(e.grantRole("reader", "ro"))
	e.must(e.apply(func(w Writer) error { _, err := s.RoleDelete(w, &pb.AuthRoleDeleteRequest{Role: "ro"}); return err }))
	wantErr(t, s.IsRangePermitted(ai(), []byte("/r/a"), nil), ErrPermissionDenied, "etcdserver: permission denied")

	e.must(e.apply(func(w Writer) error { _, err := s.UserDelete(w, &pb.AuthUserDeleteRequest{Name: "writer"}); return err }))
	wantErr(t, s.IsPutPermitted(&AuthInfo{Username: "writer", Revision: s.Revision()}, []byte("/w/a")), ErrPermissionDenied, "etcdserver: permission denied")
}

func TestTxnAndLeaseChecks(t *testing.T) {
	e := permEnv(t)
	s := e.s
	w := &AuthInfo{Username: "writer", Revision: s.Revision()}
	ranger := &AuthInfo{Username: "ranger", Revision: s.Revision()}
	leases := func(id int64) [][]byte {
		switch id {
		case 1:
			return [][]byte{[]byte("/w/x")}
		case 2:
			return [][]byte{[]byte("/w/x"), []byte("/secret")}
		}
		return nil
	}
	putOp := func(k string, lease int64) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(k), Lease: lease}}}
	}
	rangeOp := func(k string) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte(k)}}}
	}
	cases := []struct {
		name string
		ai   *AuthInfo
		txn  *pb.TxnRequest
		ok   bool
	}{
		{"puts in prefix", w, &pb.TxnRequest{Success: []*pb.RequestOp{putOp("/w/a", 0)}, Failure: []*pb.RequestOp{putOp("/w/b", 0)}}, true},
		{"compare needs read", w, &pb.TxnRequest{Compare: []*pb.Compare{{Key: []byte("/w/a")}}}, false},
		{"failure branch checked", w, &pb.TxnRequest{Success: []*pb.RequestOp{putOp("/w/a", 0)}, Failure: []*pb.RequestOp{putOp("/x", 0)}}, false},
		{"range needs read", w, &pb.TxnRequest{Success: []*pb.RequestOp{rangeOp("/w/a")}}, false},
		{"nested txn", w, &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Success: []*pb.RequestOp{putOp("/x", 0)}}}}}}, false},
		{"lease with own keys", w, &pb.TxnRequest{Success: []*pb.RequestOp{putOp("/w/a", 1)}}, true},
		{"lease with foreign keys", w, &pb.TxnRequest{Success: []*pb.RequestOp{putOp("/w/a", 2)}}, false},
		{"ranger compare and put", ranger, &pb.TxnRequest{Compare: []*pb.Compare{{Key: []byte("b"), RangeEnd: []byte("c")}}, Success: []*pb.RequestOp{putOp("c", 0)}}, true},
	}
	for _, c := range cases {
		err := s.IsTxnPermitted(c.ai, c.txn, leases)
		if (err == nil) != c.ok {
			t.Errorf("%s: err=%v want ok=%v", c.name, err, c.ok)
		}
	}
	if err := s.IsLeaseKeysPermitted(w, leases(2)); err != ErrPermissionDenied {
		t.Errorf("LeaseRevoke with a foreign key: %v", err)
	}
	if err := s.IsLeaseKeysPermitted(&AuthInfo{Username: "root", Revision: s.Revision()}, leases(2)); err != nil {
		t.Errorf("root LeaseRevoke: %v", err)
	}
	if err := s.IsPutRequestPermitted(w, &pb.PutRequest{Key: []byte("/w/a"), PrevKv: true}, nil); err != ErrPermissionDenied {
		t.Errorf("put with prev_kv by a write-only user: %v", err)
	}
	// The lease's keys are listed only for a user the check concerns:
	// not for root (nor with auth off), where a put to a lease of many
	// keys would pay for a sorted copy of them all.
	asked := 0
	counting := func(id int64) [][]byte { asked++; return leases(id) }
	if err := s.IsPutRequestPermitted(&AuthInfo{Username: "root", Revision: s.Revision()}, &pb.PutRequest{Key: []byte("/x"), Lease: 2}, counting); err != nil || asked != 0 {
		t.Errorf("root's put with a lease: %v, the lease's keys asked for %d times", err, asked)
	}
	if err := s.IsPutRequestPermitted(w, &pb.PutRequest{Key: []byte("/w/a"), Lease: 2}, counting); err != ErrPermissionDenied || asked != 1 {
		t.Errorf("a user's put with a lease of foreign keys: %v, the lease's keys asked for %d times", err, asked)
	}
	if err := s.IsDeleteRangeRequestPermitted(w, &pb.DeleteRangeRequest{Key: []byte("/w/a")}); err != nil {
		t.Errorf("delete in prefix: %v", err)
	}
}

// TestLeaseKeysReadPermitted is etcd's rule for LeaseTimeToLive with keys
// and LeaseLeases: root, or read access to every attached key.
func TestLeaseKeysReadPermitted(t *testing.T) {
	e := permEnv(t)
	s := e.s
	ai := func(u string) *AuthInfo { return &AuthInfo{Username: u, Revision: s.Revision()} }
	keys := func(k ...string) [][]byte {
		out := [][]byte{}
		for _, x := range k {
			out = append(out, []byte(x))
		}
		return out
	}
	cases := []struct {
		user string
		keys [][]byte
		want error
	}{
		{"reader", keys("/r/a", "/r/b"), nil},
		{"reader", keys("/r/a", "/w/b"), ErrPermissionDenied},
		{"reader", keys(), nil}, // a lease without keys
		{"writer", keys("/w/a"), ErrPermissionDenied},
		{"norole", keys(), nil},
		{"norole", keys("/r/a"), ErrPermissionDenied},
		{"root", keys("/secret", "/w/a"), nil},
	}
	for _, c := range cases {
		if err := s.IsLeaseKeysReadPermitted(ai(c.user), c.keys); err != c.want {
			t.Errorf("%s on %q: %v, want %v", c.user, c.keys, err, c.want)
		}
	}
	if err := s.IsLeaseKeysReadPermitted(&AuthInfo{}, keys("/r/a")); err != ErrUserEmpty {
		t.Errorf("no user: %v, want %v", err, ErrUserEmpty)
	}
}

func TestApplyChecksAdmin(t *testing.T) {
	e := permEnv(t)
	s := e.s
	hdr := func(u string) *pb.RequestHeader { return &pb.RequestHeader{Username: u, AuthRevision: s.Revision()} }
	run := func(r *pb.InternalRaftRequest) error {
		return e.apply(func(w Writer) error {
			_, handled, err := s.Apply(w, e.index, r)
			if !handled {
				t.Fatalf("not handled: %v", r)
			}
			return err
		})
	}
	wantErr(t, run(&pb.InternalRaftRequest{Header: hdr("reader"), AuthRoleAdd: &pb.AuthRoleAddRequest{Name: "x"}}),
		ErrPermissionDenied, "etcdserver: permission denied")
	wantErr(t, run(&pb.InternalRaftRequest{AuthUserList: &pb.AuthUserListRequest{}}),
		ErrUserEmpty, "etcdserver: user name is empty")
	wantErr(t, run(&pb.InternalRaftRequest{Header: hdr("reader"), AuthUserGet: &pb.AuthUserGetRequest{Name: "writer"}}),
		ErrPermissionDenied, "etcdserver: permission denied")
	e.must(run(&pb.InternalRaftRequest{Header: hdr("reader"), AuthUserGet: &pb.AuthUserGetRequest{Name: "reader"}}))
	e.must(run(&pb.InternalRaftRequest{Header: hdr("reader"), AuthRoleGet: &pb.AuthRoleGetRequest{Role: "ro"}}))
	wantErr(t, run(&pb.InternalRaftRequest{Header: hdr("reader"), AuthRoleGet: &pb.AuthRoleGetRequest{Role: "wo"}}),
		ErrPermissionDenied, "etcdserver: permission denied")
	e.must(run(&pb.InternalRaftRequest{Header: hdr("nobody-at-all"), AuthStatus: &pb.AuthStatusRequest{}}))
	e.must(run(&pb.InternalRaftRequest{Header: hdr("root"), AuthRoleAdd: &pb.AuthRoleAddRequest{Name: "x"}}))

	var resp any
	e.must(e.apply(func(w Writer) error {
		var err error
		resp, _, err = s.Apply(w, e.index, &pb.InternalRaftRequest{Header: hdr("root"), AuthRoleList: &pb.AuthRoleListRequest{}})
		return err
	}))
	if rl, ok := resp.(*pb.AuthRoleListResponse); !ok || len(rl.Roles) != 5 {
		t.Fatalf("RoleList via Apply = %v", resp)
	}
	_, handled, _ := s.Apply(nil, 0, &pb.InternalRaftRequest{Put: &pb.PutRequest{}})
	if handled {
		t.Fatal("a Put was handled as an auth request")
	}
}

// TestRangeSetModel compares rangeSet.covers with a brute-force model over
// a small alphabet, with random permissions and requests.
func TestRangeSetModel(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	alpha := []string{"a", "b", "c", "d", "e"}
	// All keys up to length 2 are the universe the model walks.
	var universe [][]byte
	for _, x := range alpha {
		universe = append(universe, []byte(x))
		for _, y := range alpha {
			universe = append(universe, []byte(x+y))
		}
	}
	randKey := func() []byte { return universe[rng.IntN(len(universe))] }
	randPerm := func() *authpb.Permission {
		p := &authpb.Permission{Key: randKey()}
		switch rng.IntN(3) {
		case 1:
			p.RangeEnd = []byte{0}
		case 2:
			p.RangeEnd = randKey()
		}
		return p
	}
	inIv := func(k []byte, iv interval) bool {
		return affineCmp(iv.begin, k) <= 0 && affineCmp(k, iv.end) < 0
	}
	for iter := 0; iter < 300; iter++ {
		var ivs []interval
		for range rng.IntN(4) {
			ivs = append(ivs, permInterval(randPerm()))
		}
		set := newRangeSet(ivs)
		for range 20 {
			key, end := randKey(), []byte(nil)
			switch rng.IntN(3) {
			case 1:
				end = []byte{0}
			case 2:
				end = randKey()
			}
			b, en := requestInterval(key, end)
			// Model, independent of merging: a gap in the union, if any
			// inside the request, starts at the request's begin or at
			// some permission's end. So the request is covered iff it is
			// non-empty and those points that fall inside it are covered.
			covered := func(k []byte) bool {
				for _, iv := range ivs {
					if inIv(k, iv) {
						return true
					}
				}
				return false
			}
			want := affineCmp(b, en) < 0 && covered(b)
			for _, iv := range ivs {
				if want && len(iv.end) > 0 && affineCmp(b, iv.end) < 0 && affineCmp(iv.end, en) < 0 {
					want = covered(iv.end)
				}
			}
			if got := set.covers(b, en); got != want {
				t.Fatalf("seed %d: perms %v request [%q,%q): covers=%v want %v", seed, ivs, b, en, got, want)
			}
		}
	}
}
