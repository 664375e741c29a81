package auth

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"golang.org/x/crypto/bcrypt"
	"google.golang.org/grpc/status"

	"github.com/strata-db/strata/mvcc"
	"github.com/strata-db/strata/pagestore"
)

// env is a store on a real page store and backend, with the apply loop's
// write protocol: one WriteTx per entry, ended with the entry's index.
type env struct {
	t     testing.TB
	path  string
	db    *pagestore.DB
	be    *mvcc.Backend
	s     *Store
	index uint64
	clock *fakeClock
}

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func newEnv(t testing.TB) *env {
	t.Helper()
	return openEnv(t, filepath.Join(t.TempDir(), "db"), nil)
}

// openEnv opens (or reopens) the page store at path. tokens nil means
// simple tokens on the env's fake clock.
func openEnv(t testing.TB, path string, tokens func(*fakeClock) TokenProvider) *env {
	t.Helper()
	db, err := pagestore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	be, err := mvcc.NewBackend(db, mvcc.BackendConfig{BatchInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, path: path, db: db, be: be, clock: &fakeClock{t: time.Unix(1_700_000_000, 0)}}
	var tp TokenProvider
	if tokens != nil {
		tp = tokens(e.clock)
	} else {
		tp = NewSimpleTokenProvider(SimpleTokenOptions{TTL: 10 * time.Second, Now: e.clock.now})
	}
	e.s, err = New(db, Config{BcryptCost: bcrypt.MinCost, Tokens: tp})
	if err != nil {
		t.Fatal(err)
	}
	e.index = be.ConsistentIndex()
	t.Cleanup(e.close)
	return e
}

func (e *env) close() {
	if e.be == nil {
		return
	}
	e.s.Close()
	if err := e.be.Close(); err != nil {
		e.t.Error(err)
	}
	if err := e.db.Close(); err != nil {
		e.t.Error(err)
	}
	e.be = nil
}

// reopen closes everything and opens the same file again.
func (e *env) reopen() *env {
	e.t.Helper()
	e.close()
	return openEnv(e.t, e.path, nil)
}

// apply runs fn as the apply of one raft entry.
func (e *env) apply(fn func(w Writer) error) error {
	e.index++
	w := e.be.BeginWrite()
	err := fn(w)
	w.End(e.index, 1)
	return err
}

// must fails the test on err.
func (e *env) must(err error) {
	e.t.Helper()
	if err != nil {
		e.t.Fatal(err)
	}
}

// Shorthands for the common requests, each one apply.

func (e *env) userAdd(name, password string) error {
	r := &pb.AuthUserAddRequest{Name: name, Password: password}
	if err := e.s.PrepareUserAdd(r); err != nil {
		return err
	}
	return e.apply(func(w Writer) error { _, err := e.s.UserAdd(w, r); return err })
}

func (e *env) roleAdd(name string) error {
	return e.apply(func(w Writer) error { _, err := e.s.RoleAdd(w, &pb.AuthRoleAddRequest{Name: name}); return err })
}

func (e *env) grantRole(user, role string) error {
	return e.apply(func(w Writer) error {
		_, err := e.s.UserGrantRole(w, &pb.AuthUserGrantRoleRequest{User: user, Role: role})
		return err
	})
}

func (e *env) revokeRole(user, role string) error {
	return e.apply(func(w Writer) error {
		_, err := e.s.UserRevokeRole(w, &pb.AuthUserRevokeRoleRequest{Name: user, Role: role})
		return err
	})
}

func (e *env) grantPerm(role string, typ authpb.Permission_Type, key, end string) error {
	p := &authpb.Permission{PermType: typ, Key: []byte(key)}
	if end != "" {
		p.RangeEnd = []byte(end)
	}
	return e.apply(func(w Writer) error {
		_, err := e.s.RoleGrantPermission(w, &pb.AuthRoleGrantPermissionRequest{Name: role, Perm: p})
		return err
	})
}

func (e *env) revokePerm(role, key, end string) error {
	r := &pb.AuthRoleRevokePermissionRequest{Role: role, Key: []byte(key)}
	if end != "" {
		r.RangeEnd = []byte(end)
	}
	return e.apply(func(w Writer) error { _, err := e.s.RoleRevokePermission(w, r); return err })
}

func (e *env) enable() error {
	return e.apply(func(w Writer) error { _, err := e.s.AuthEnable(w); return err })
}

func (e *env) disable() error {
	return e.apply(func(w Writer) error { _, err := e.s.AuthDisable(w); return err })
}

// setupRoot adds root with the root role.
func (e *env) setupRoot() {
	e.t.Helper()
	e.must(e.userAdd("root", "rootpw"))
	e.must(e.grantRole("root", "root"))
}

// login runs the server's Authenticate flow: password check outside raft,
// token prefix, then the apply.
func (e *env) login(user, password string) (string, error) {
	if _, err := e.s.CheckPassword(user, password); err != nil {
		return "", err
	}
	prefix, err := e.s.GenTokenPrefix()
	if err != nil {
		return "", err
	}
	var tok string
	err = e.apply(func(Writer) error {
		resp, err := e.s.Authenticate(&pb.InternalAuthenticateRequest{Name: user, SimpleToken: prefix}, e.index)
		if resp != nil {
			tok = resp.Token
		}
		return err
	})
	return tok, err
}

// wantErr checks errors.Is and the exact client-visible message.
func wantErr(t testing.TB, got, want error, msg string) {
	t.Helper()
	if !errors.Is(got, want) {
		t.Fatalf("error = %v, want %v", got, want)
	}
	if want == nil {
		return
	}
	if got.Error() != msg {
		t.Fatalf("message = %q, want %q", got.Error(), msg)
	}
	st, _ := status.FromError(ToGRPCError(got))
	if st.Message() != msg {
		t.Fatalf("gRPC message = %q, want %q", st.Message(), msg)
	}
}
