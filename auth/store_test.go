package auth

import (
	"bytes"
	"encoding/binary"
	"os"
	"slices"
	"testing"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/pagestore"
)

func TestUserOps(t *testing.T) {
	e := newEnv(t)
	s := e.s

	wantErr(t, e.userAdd("", "pw"), ErrUserEmpty, "etcdserver: user name is empty")
	e.must(e.userAdd("alice", "pw"))
	wantErr(t, e.userAdd("alice", "pw"), ErrUserAlreadyExist, "etcdserver: user name already exists")
	e.must(e.userAdd("bob", "pw"))

	list, err := s.UserList(&pb.AuthUserListRequest{})
	e.must(err)
	if !slices.Equal(list.Users, []string{"alice", "bob"}) {
		t.Fatalf("UserList = %v", list.Users)
	}

	_, err = s.UserGet(&pb.AuthUserGetRequest{Name: "nobody"})
	wantErr(t, err, ErrUserNotFound, "etcdserver: user name not found")

	// Grant: unknown user, unknown role, then the roles come back sorted.
	e.must(e.roleAdd("zeta"))
	e.must(e.roleAdd("alpha"))
	wantErr(t, e.grantRole("nobody", "alpha"), ErrUserNotFound, "etcdserver: user name not found")
	wantErr(t, e.grantRole("alice", "nope"), ErrRoleNotFound, "etcdserver: role name not found")
	e.must(e.grantRole("alice", "zeta"))
	e.must(e.grantRole("alice", "alpha"))
	rev := s.Revision()
	e.must(e.grantRole("alice", "alpha")) // duplicate: accepted, no change
	if s.Revision() != rev {
		t.Fatalf("duplicate grant moved the revision %d -> %d", rev, s.Revision())
	}
	got, err := s.UserGet(&pb.AuthUserGetRequest{Name: "alice"})
	e.must(err)
	if !slices.Equal(got.Roles, []string{"alpha", "zeta"}) {
		t.Fatalf("roles = %v", got.Roles)
	}
	if !s.HasRole("alice", "zeta") || s.HasRole("bob", "zeta") {
		t.Fatal("HasRole wrong")
	}

	// Revoke.
	wantErr(t, e.revokeRole("bob", "alpha"), ErrRoleNotGranted, "etcdserver: role is not granted to the user")
	wantErr(t, e.revokeRole("nobody", "alpha"), ErrUserNotFound, "etcdserver: user name not found")
	e.must(e.revokeRole("alice", "zeta"))
	got, _ = s.UserGet(&pb.AuthUserGetRequest{Name: "alice"})
	if !slices.Equal(got.Roles, []string{"alpha"}) {
		t.Fatalf("roles after revoke = %v", got.Roles)
	}

	// Change password: unknown user; then the new one works and the old not.
	err = e.apply(func(w Writer) error {
		_, err := s.UserChangePassword(w, &pb.AuthUserChangePasswordRequest{Name: "nobody", HashedPassword: "x"})
		return err
	})
	wantErr(t, err, ErrUserNotFound, "etcdserver: user name not found")
	cp := &pb.AuthUserChangePasswordRequest{Name: "alice", Password: "new"}
	e.must(s.PrepareUserChangePassword(cp))
	if cp.Password != "" || cp.HashedPassword == "" {
		t.Fatal("PrepareUserChangePassword left plaintext or no hash")
	}
	e.must(e.apply(func(w Writer) error { _, err := s.UserChangePassword(w, cp); return err }))
	e.setupRoot()
	e.must(e.enable())
	if _, err := s.CheckPassword("alice", "pw"); err != ErrAuthFailed {
		t.Fatalf("old password: %v", err)
	}
	if _, err := s.CheckPassword("alice", "new"); err != nil {
		t.Fatalf("new password: %v", err)
	}
	e.must(e.disable())

	// Delete.
	del := func(name string) error {
		return e.apply(func(w Writer) error { _, err := s.UserDelete(w, &pb.AuthUserDeleteRequest{Name: name}); return err })
	}
	wantErr(t, del("nobody"), ErrUserNotFound, "etcdserver: user name not found")
	e.must(del("bob"))
	list, _ = s.UserList(&pb.AuthUserListRequest{})
	if !slices.Equal(list.Users, []string{"alice", "root"}) {
		t.Fatalf("UserList = %v", list.Users)
	}

	// A bad hashed_password is etcd's ErrNoPasswordUser.
	err = e.apply(func(w Writer) error {
		_, err := s.UserAdd(w, &pb.AuthUserAddRequest{Name: "carol", HashedPassword: "!!not base64"})
		return err
	})
	wantErr(t, err, ErrNoPasswordUser, "auth: authentication failed, password was given for no password user")
}

func TestRoleOps(t *testing.T) {
	e := newEnv(t)
	s := e.s
	wantErr(t, e.roleAdd(""), ErrRoleEmpty, "etcdserver: role name is empty")
	e.must(e.roleAdd("r"))
	wantErr(t, e.roleAdd("r"), ErrRoleAlreadyExist, "etcdserver: role name already exists")
	e.must(e.roleAdd("q"))
	rl, _ := s.RoleList(&pb.AuthRoleListRequest{})
	if !slices.Equal(rl.Roles, []string{"q", "r"}) {
		t.Fatalf("RoleList = %v", rl.Roles)
	}

	err := e.apply(func(w Writer) error {
		_, err := s.RoleGrantPermission(w, &pb.AuthRoleGrantPermissionRequest{Name: "r"})
		return err
	})
	wantErr(t, err, ErrPermissionNotGiven, "etcdserver: permission not given")
	wantErr(t, e.grantPerm("nope", authpb.Permission_READ, "a", ""), ErrRoleNotFound, "etcdserver: role name not found")
	wantErr(t, e.grantPerm("r", authpb.Permission_READ, "", ""), ErrInvalidAuthMgmt, "etcdserver: invalid auth management")
	wantErr(t, e.grantPerm("r", authpb.Permission_READ, "b", "a"), ErrInvalidAuthMgmt, "etcdserver: invalid auth management")

	e.must(e.grantPerm("r", authpb.Permission_READ, "m", "n"))
	e.must(e.grantPerm("r", authpb.Permission_WRITE, "a", ""))
	e.must(e.grantPerm("r", authpb.Permission_READ, "z", "\x00"))
	e.must(e.grantPerm("r", authpb.Permission_READWRITE, "m", "n")) // same range: type updated
	g, err := s.RoleGet(&pb.AuthRoleGetRequest{Role: "r"})
	e.must(err)
	want := []*authpb.Permission{
		{PermType: authpb.Permission_WRITE, Key: []byte("a")},
		{PermType: authpb.Permission_READWRITE, Key: []byte("m"), RangeEnd: []byte("n")},
		{PermType: authpb.Permission_READ, Key: []byte("z"), RangeEnd: []byte{0}},
	}
	if len(g.Perm) != len(want) {
		t.Fatalf("perms = %v", g.Perm)
	}
	for i := range want {
		if g.Perm[i].PermType != want[i].PermType || !bytes.Equal(g.Perm[i].Key, want[i].Key) || !bytes.Equal(g.Perm[i].RangeEnd, want[i].RangeEnd) {
			t.Fatalf("perm %d = %v, want %v", i, g.Perm[i], want[i])
		}
	}
	_, err = s.RoleGet(&pb.AuthRoleGetRequest{Role: "nope"})
	wantErr(t, err, ErrRoleNotFound, "etcdserver: role name not found")

	wantErr(t, e.revokePerm("r", "x", ""), ErrPermissionNotGranted, "etcdserver: permission is not granted to the role")
	wantErr(t, e.revokePerm("r", "m", ""), ErrPermissionNotGranted, "etcdserver: permission is not granted to the role")
	wantErr(t, e.revokePerm("nope", "m", "n"), ErrRoleNotFound, "etcdserver: role name not found")
	e.must(e.revokePerm("r", "m", "n"))
	g, _ = s.RoleGet(&pb.AuthRoleGetRequest{Role: "r"})
	if len(g.Perm) != 2 {
		t.Fatalf("perms after revoke = %v", g.Perm)
	}

	// RoleDelete takes the role from its users.
	e.must(e.userAdd("u", "pw"))
	e.must(e.grantRole("u", "r"))
	e.must(e.grantRole("u", "q"))
	delRole := func(name string) error {
		return e.apply(func(w Writer) error { _, err := s.RoleDelete(w, &pb.AuthRoleDeleteRequest{Role: name}); return err })
	}
	wantErr(t, delRole("nope"), ErrRoleNotFound, "etcdserver: role name not found")
	e.must(delRole("r"))
	u, _ := s.UserGet(&pb.AuthUserGetRequest{Name: "u"})
	if !slices.Equal(u.Roles, []string{"q"}) {
		t.Fatalf("roles after RoleDelete = %v", u.Roles)
	}

	// The root role reports readwrite on everything.
	e.must(e.roleAdd("root"))
	g, _ = s.RoleGet(&pb.AuthRoleGetRequest{Role: "root"})
	if len(g.Perm) != 1 || g.Perm[0].PermType != authpb.Permission_READWRITE || len(g.Perm[0].Key) != 0 || !bytes.Equal(g.Perm[0].RangeEnd, []byte{0}) {
		t.Fatalf("root perms = %v", g.Perm)
	}
}

func TestRootRules(t *testing.T) {
	e := newEnv(t)
	s := e.s
	wantErr(t, e.enable(), ErrRootUserNotExist, "etcdserver: root user does not exist")
	e.must(e.userAdd("root", "pw"))
	wantErr(t, e.enable(), ErrRootRoleNotExist, "etcdserver: root user does not have root role")
	// The root role can be granted before it exists as a role.
	e.must(e.grantRole("root", "root"))
	rev := s.Revision()
	e.must(e.enable())
	e.must(e.enable()) // again: no-op
	if !s.IsAuthEnabled() || s.Revision() != rev {
		t.Fatalf("enabled=%v revision %d -> %d (enable must not move it)", s.IsAuthEnabled(), rev, s.Revision())
	}
	st, _ := s.AuthStatus()
	if !st.Enabled || st.AuthRevision != rev {
		t.Fatalf("AuthStatus = %v", st)
	}

	e.must(e.roleAdd("root"))
	wantErr(t, e.revokeRole("root", "root"), ErrInvalidAuthMgmt, "etcdserver: invalid auth management")
	err := e.apply(func(w Writer) error { _, err := s.UserDelete(w, &pb.AuthUserDeleteRequest{Name: "root"}); return err })
	wantErr(t, err, ErrInvalidAuthMgmt, "etcdserver: invalid auth management")
	err = e.apply(func(w Writer) error { _, err := s.RoleDelete(w, &pb.AuthRoleDeleteRequest{Role: "root"}); return err })
	wantErr(t, err, ErrInvalidAuthMgmt, "etcdserver: invalid auth management")

	// Disable moves the revision; then root may lose its role.
	e.must(e.disable())
	if s.IsAuthEnabled() || s.Revision() != rev+2 {
		t.Fatalf("after disable: enabled=%v revision=%d want %d", s.IsAuthEnabled(), s.Revision(), rev+2)
	}
	e.must(e.disable()) // no-op
	if s.Revision() != rev+2 {
		t.Fatal("second disable moved the revision")
	}
	e.must(e.revokeRole("root", "root"))
	wantErr(t, e.enable(), ErrRootRoleNotExist, "etcdserver: root user does not have root role")
}

func TestAuthRevision(t *testing.T) {
	e := newEnv(t)
	s := e.s
	if s.Revision() != 1 {
		t.Fatalf("fresh store revision = %d, want 1", s.Revision())
	}
	steps := []func() error{
		func() error { return e.userAdd("u", "pw") },
		func() error { return e.roleAdd("r") },
		func() error { return e.grantRole("u", "r") },
		func() error { return e.grantPerm("r", authpb.Permission_READ, "k", "") },
		func() error { return e.revokePerm("r", "k", "") },
		func() error { return e.revokeRole("u", "r") },
	}
	for i, step := range steps {
		before := s.Revision()
		e.must(step())
		if s.Revision() != before+1 {
			t.Fatalf("step %d: revision %d -> %d", i, before, s.Revision())
		}
	}
	// Failed requests do not move it.
	before := s.Revision()
	_ = e.userAdd("u", "pw")
	_ = e.revokeRole("u", "r")
	if s.Revision() != before {
		t.Fatal("a failed request moved the revision")
	}

	e.setupRoot()
	e.must(e.roleAdd("reader"))
	e.must(e.grantPerm("reader", authpb.Permission_READ, "k", ""))
	e.must(e.grantRole("u", "reader"))
	e.must(e.enable())
	cur := s.Revision()
	wantErr(t, s.IsRangePermitted(&AuthInfo{Username: "u", Revision: cur}, []byte("k"), nil), nil, "")
	wantErr(t, s.IsRangePermitted(&AuthInfo{Username: "u", Revision: cur - 1}, []byte("k"), nil),
		ErrAuthOldRevision, "etcdserver: revision of auth store is old")
	wantErr(t, s.IsRangePermitted(&AuthInfo{}, []byte("k"), nil), ErrUserEmpty, "etcdserver: user name is empty")
	wantErr(t, s.IsRangePermitted(nil, []byte("k"), nil), ErrUserEmpty, "etcdserver: user name is empty")
	// A request proposed before a change and applied after it is stale.
	e.must(e.roleAdd("other"))
	wantErr(t, s.IsPutPermitted(&AuthInfo{Username: "root", Revision: cur}, []byte("k")),
		ErrAuthOldRevision, "etcdserver: revision of auth store is old")
}

func TestPersistenceAcrossReopen(t *testing.T) {
	e := newEnv(t)
	e.setupRoot()
	e.must(e.userAdd("u", "pw"))
	e.must(e.roleAdd("r"))
	e.must(e.grantPerm("r", authpb.Permission_READ, "a", "c"))
	e.must(e.grantRole("u", "r"))
	e.must(e.enable())
	rev := e.s.Revision()

	e2 := e.reopen()
	s := e2.s
	if !s.IsAuthEnabled() || s.Revision() != rev {
		t.Fatalf("after reopen: enabled=%v rev=%d want %d", s.IsAuthEnabled(), s.Revision(), rev)
	}
	u, err := s.UserGet(&pb.AuthUserGetRequest{Name: "u"})
	e2.must(err)
	if !slices.Equal(u.Roles, []string{"r"}) {
		t.Fatalf("roles = %v", u.Roles)
	}
	ai := &AuthInfo{Username: "u", Revision: rev}
	wantErr(t, s.IsRangePermitted(ai, []byte("b"), nil), nil, "")
	wantErr(t, s.IsRangePermitted(ai, []byte("d"), nil), ErrPermissionDenied, "etcdserver: permission denied")
	if _, err := s.CheckPassword("u", "pw"); err != nil {
		t.Fatalf("password after reopen: %v", err)
	}
	// The stored records are etcd's authpb encoding under etcd's names.
	e2.must(e2.db.View(func(tx *pagestore.Tx) error {
		ab, err := tx.Bucket([]byte("auth"))
		if err != nil {
			return err
		}
		en, _ := ab.Get([]byte("authEnabled"))
		rv, _ := ab.Get([]byte("authRevision"))
		if !bytes.Equal(en, []byte{1}) || len(rv) != 8 || binary.BigEndian.Uint64(rv) != rev {
			t.Errorf("auth bucket: authEnabled=%x authRevision=%x", en, rv)
		}
		ub, err := tx.Bucket([]byte("authUsers"))
		if err != nil {
			return err
		}
		raw, err := ub.Get([]byte("u"))
		if err != nil {
			return err
		}
		var u authpb.User
		if err := proto.Unmarshal(raw, &u); err != nil {
			return err
		}
		if string(u.Name) != "u" || !slices.Equal(u.Roles, []string{"r"}) || !bytes.HasPrefix(u.Password, []byte("$2a$04$")) || u.Options == nil {
			t.Errorf("stored user = %v", &u)
		}
		rb, err := tx.Bucket([]byte("authRoles"))
		if err != nil {
			return err
		}
		raw, err = rb.Get([]byte("r"))
		if err != nil {
			return err
		}
		var r authpb.Role
		if err := proto.Unmarshal(raw, &r); err != nil {
			return err
		}
		if len(r.KeyPermission) != 1 || string(r.KeyPermission[0].Key) != "a" || string(r.KeyPermission[0].RangeEnd) != "c" {
			t.Errorf("stored role = %v", &r)
		}
		return nil
	}))
}

func TestNoPlaintextPasswordOnDisk(t *testing.T) {
	e := newEnv(t)
	const secret = "Tr0ub4dor&3-correct-horse-battery"
	e.must(e.userAdd("alice", secret))
	cp := &pb.AuthUserChangePasswordRequest{Name: "alice", Password: secret + "-v2"}
	e.must(e.s.PrepareUserChangePassword(cp))
	e.must(e.apply(func(w Writer) error { _, err := e.s.UserChangePassword(w, cp); return err }))
	e.must(e.be.ForceCommit())
	path := e.path
	e.close()
	raw, err := os.ReadFile(path)
	e.must(err)
	if !bytes.Contains(raw, []byte("alice")) {
		t.Fatal("the user record is not in the file; the test would prove nothing")
	}
	if n := bytes.Count(raw, []byte(secret)); n != 0 {
		t.Fatalf("password found %d times in the page-store file", n)
	}
}

func TestToGRPCError(t *testing.T) {
	cases := []struct {
		err  error
		code codes.Code
	}{
		{ErrUserEmpty, codes.InvalidArgument},
		{ErrPermissionDenied, codes.PermissionDenied},
		{ErrInvalidAuthToken, codes.Unauthenticated},
		{ErrAuthFailed, codes.InvalidArgument},
		{ErrAuthOldRevision, codes.InvalidArgument},
		{ErrUserNotFound, codes.FailedPrecondition},
		{ErrAuthNotEnabled, codes.FailedPrecondition},
		{ErrRootUserNotExist, codes.FailedPrecondition},
		{ErrNoPasswordUser, codes.Unknown},
	}
	for _, c := range cases {
		st, ok := status.FromError(ToGRPCError(c.err))
		if !ok || st.Code() != c.code || st.Message() != c.err.Error() {
			t.Errorf("%v -> %v %q, want %v", c.err, st.Code(), st.Message(), c.code)
		}
	}
	if ToGRPCError(nil) != nil {
		t.Error("nil must stay nil")
	}
}

// TestUnpreparedPasswordIsHashedAtApply covers log entries from a proposer
// that skipped PrepareUserAdd (etcd < 3.5): apply hashes, so the page
// store still never holds the plaintext.
func TestUnpreparedPasswordIsHashedAtApply(t *testing.T) {
	e := newEnv(t)
	s := e.s
	e.must(e.apply(func(w Writer) error {
		_, err := s.UserAdd(w, &pb.AuthUserAddRequest{Name: "root", Password: "plain-old"})
		return err
	}))
	e.must(e.grantRole("root", "root"))
	e.must(e.apply(func(w Writer) error {
		_, err := s.UserAdd(w, &pb.AuthUserAddRequest{Name: "nopw", Options: &authpb.UserAddOptions{NoPassword: true}})
		return err
	}))
	e.must(e.enable())
	if _, err := s.CheckPassword("root", "plain-old"); err != nil {
		t.Fatal(err)
	}
	if u := s.load().users["root"]; bytes.Contains(u.Password, []byte("plain-old")) {
		t.Fatal("plaintext stored")
	}
	if u := s.load().users["nopw"]; u.Password != nil || !u.Options.NoPassword {
		t.Fatalf("no-password user = %v", u)
	}
	// A no-password user stays so across a password change.
	e.must(e.apply(func(w Writer) error {
		_, err := s.UserChangePassword(w, &pb.AuthUserChangePasswordRequest{Name: "nopw", HashedPassword: "aGFzaA=="})
		return err
	}))
	if u := s.load().users["nopw"]; u.Password != nil {
		t.Fatal("no-password user got a password")
	}
}
