package server

import (
	"context"
	"errors"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/strata-db/strata/auth"
)

// Auth: every RPC identifies its caller (token in the "token" metadata or
// the gateway's Authorization header, else the client certificate's CN
// with --client-cert-auth) and checks permissions before proposing; writes
// carry the caller's name and auth revision in the request header and are
// checked again at apply, so a permission revoked in between denies them
// with "revision of auth store is old".

func (s *Server) openAuth() error {
	opts, err := s.cfg.AuthTokenOptions()
	if err != nil {
		return err
	}
	tp, err := auth.NewTokenProvider(auth.TokenOptions(opts), auth.SimpleTokenOptions{
		TTL:         time.Duration(s.cfg.AuthTokenTTL) * time.Second,
		IndexWaiter: s.indexWaiter,
		Logger:      s.lg,
	}, s.lg)
	if err != nil {
		return err
	}
	s.auth, err = auth.New(s.be.DB(), auth.Config{BcryptCost: int(s.cfg.BcryptCost), Tokens: tp, Logger: s.lg})
	return err
}

// indexWaiter returns a channel closed once index is applied.
func (s *Server) indexWaiter(index uint64) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.requestTimeout())
		defer cancel()
		s.node.WaitApplied(ctx, index)
		close(ch)
	}()
	return ch
}

// noAuthInfo is the empty identity, shared by every call; nothing
// changes an AuthInfo once made.
var noAuthInfo = &auth.AuthInfo{}

// authInfo identifies the caller of an RPC; with auth disabled it is the
// empty identity, which every check lets through.
func (s *Server) authInfo(ctx context.Context) (*auth.AuthInfo, error) {
	if !s.auth.IsAuthEnabled() {
		return noAuthInfo, nil
	}
	ai, err := s.auth.AuthInfoFromContext(ctx, s.cfg.ClientSecurity.ClientCertAuth)
	if err != nil {
		return nil, auth.ToGRPCError(err)
	}
	if ai == nil {
		ai = &auth.AuthInfo{}
	}
	return ai, nil
}

// leaseKeys is the auth store's view of a lease: its attached keys, or
// nil when it does not exist. It answers on every member (not only the
// primary lessor), so the checks made at apply agree everywhere.
func (s *Server) leaseKeys(id int64) [][]byte {
	keys, ok := s.lessor.Keys(id)
	if !ok {
		return nil
	}
	return keys
}

// checkAdmin lets only root through when auth is enabled.
func (s *Server) checkAdmin(ctx context.Context) error {
	ai, err := s.authInfo(ctx)
	if err != nil {
		return err
	}
	return auth.ToGRPCError(s.auth.IsAdminPermitted(ai))
}

// applyAuthCheck re-checks a write at apply with the identity it was
// proposed with.
func (s *Server) applyAuthCheck(req *pb.InternalRaftRequest) error {
	h := req.GetHeader()
	if !s.auth.IsAuthEnabled() || h == nil {
		return nil
	}
	ai := &auth.AuthInfo{Username: h.Username, Revision: h.AuthRevision}
	switch {
	case req.Put != nil:
		return s.auth.IsPutRequestPermitted(ai, req.Put, s.leaseKeys)
	case req.DeleteRange != nil:
		return s.auth.IsDeleteRangeRequestPermitted(ai, req.DeleteRange)
	case req.Txn != nil:
		return s.auth.IsTxnPermitted(ai, req.Txn, s.leaseKeys)
	case req.LeaseRevoke != nil:
		// The leader revokes an expired lease as root (see
		// revokeExpired), as etcd's leader does: etcd members check the
		// revoke of a Strata leader, and Strata members an etcd
		// leader's, the same way.
		return s.auth.IsLeaseKeysPermitted(ai, s.leaseKeys(req.LeaseRevoke.ID))
	}
	// A Compaction is not checked at apply, as in etcd: the Compact RPC
	// checks the caller is an admin before proposing, and the automatic
	// compactors (etcd's and Strata's) propose with no user. Checking it
	// here would refuse their compactions on this member alone.
	return nil
}

// authServer serves the Auth service. As in etcd, every call, reads
// included, goes through raft, so all members answer the same.
type authServer struct {
	pb.UnimplementedAuthServer
	s *Server
}

// authPropose checks the caller may make the auth request, proposes it,
// and returns the applied response with its header filled.
func (a *authServer) authPropose(ctx context.Context, req *pb.InternalRaftRequest, msg proto.Message) (proto.Message, error) {
	s := a.s
	ai, err := s.authInfo(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.auth.IsAuthRequestPermitted(ai, msg); err != nil {
		return nil, auth.ToGRPCError(err)
	}
	res, err := s.proposeAs(ctx, req, ai)
	if err == nil {
		err = res.err
	}
	if err != nil {
		if ge := auth.ToGRPCError(err); ge != nil && !errors.Is(ge, err) {
			return nil, ge
		}
		return nil, toGRPCError(err)
	}
	return res.resp, nil
}

func (a *authServer) AuthEnable(ctx context.Context, r *pb.AuthEnableRequest) (*pb.AuthEnableResponse, error) {
	m, err := a.authPropose(ctx, &pb.InternalRaftRequest{AuthEnable: r}, r)
	return fillAuth[*pb.AuthEnableResponse](a.s, m, err)
}

func (a *authServer) AuthDisable(ctx context.Context, r *pb.AuthDisableRequest) (*pb.AuthDisableResponse, error) {
	m, err := a.authPropose(ctx, &pb.InternalRaftRequest{AuthDisable: r}, r)
	return fillAuth[*pb.AuthDisableResponse](a.s, m, err)
}

func (a *authServer) AuthStatus(ctx context.Context, r *pb.AuthStatusRequest) (*pb.AuthStatusResponse, error) {
	m, err := a.authPropose(ctx, &pb.InternalRaftRequest{AuthStatus: r}, r)
	return fillAuth[*pb.AuthStatusResponse](a.s, m, err)
}

// Authenticate checks the password outside raft (bcrypt is slow), then
// proposes the token's creation; if the password changed meanwhile
// (the auth revision moved) it tries again.
func (a *authServer) Authenticate(ctx context.Context, r *pb.AuthenticateRequest) (*pb.AuthenticateResponse, error) {
	s := a.s
	for {
		rev, err := s.auth.CheckPassword(r.Name, r.Password)
		if err != nil {
			return nil, auth.ToGRPCError(err)
		}
		prefix, err := s.auth.GenTokenPrefix()
		if err != nil {
			return nil, toGRPCError(err)
		}
		res, err := s.propose(ctx, &pb.InternalRaftRequest{Authenticate: &pb.InternalAuthenticateRequest{Name: r.Name, SimpleToken: prefix}})
		if err == nil {
			err = res.err
		}
		if err != nil {
			return nil, auth.ToGRPCError(err)
		}
		if rev == s.auth.Revision() {
			resp := res.resp.(*pb.AuthenticateResponse)
			resp.Header = s.header(0)
			return resp, nil
		}
	}
}

func (a *authServer) UserAdd(ctx context.Context, r *pb.AuthUserAddRequest) (*pb.AuthUserAddResponse, error) {
	if err := a.s.auth.PrepareUserAdd(r); err != nil {
		return nil, auth.ToGRPCError(err)
	}
	m, err := a.authPropose(ctx, &pb.InternalRaftRequest{AuthUserAdd: r}, r)
	return fillAuth[*pb.AuthUserAddResponse](a.s, m, err)
}

func (a *authServer) UserGet(ctx context.Context, r *pb.AuthUserGetRequest) (*pb.AuthUserGetResponse, error) {
	m, err := a.authPropose(ctx, &pb.InternalRaftRequest{AuthUserGet: r}, r)
	return fillAuth[*pb.AuthUserGetResponse](a.s, m, err)
}

func (a *authServer) UserList(ctx context.Context, r *pb.AuthUserListRequest) (*pb.AuthUserListResponse, error) {
	m, err := a.authPropose(ctx, &pb.InternalRaftRequest{AuthUserList: r}, r)
	return fillAuth[*pb.AuthUserListResponse](a.s, m, err)
}

func (a *authServer) UserDelete(ctx context.Context, r *pb.AuthUserDeleteRequest) (*pb.AuthUserDeleteResponse, error) {
	m, err := a.authPropose(ctx, &pb.InternalRaftRequest{AuthUserDelete: r}, r)
	return fillAuth[*pb.AuthUserDeleteResponse](a.s, m, err)
}

func (a *authServer) UserChangePassword(ctx context.Context, r *pb.AuthUserChangePasswordRequest) (*pb.AuthUserChangePasswordResponse, error) {
	if err := a.s.auth.PrepareUserChangePassword(r); err != nil {
		return nil, auth.ToGRPCError(err)
	}
	m, err := a.authPropose(ctx, &pb.InternalRaftRequest{AuthUserChangePassword: r}, r)
	return fillAuth[*pb.AuthUserChangePasswordResponse](a.s, m, err)
}

func (a *authServer) UserGrantRole(ctx context.Context, r *pb.AuthUserGrantRoleRequest) (*pb.AuthUserGrantRoleResponse, error) {
	m, err := a.authPropose(ctx, &pb.InternalRaftRequest{AuthUserGrantRole: r}, r)
	return fillAuth[*pb.AuthUserGrantRoleResponse](a.s, m, err)
}

func (a *authServer) UserRevokeRole(ctx context.Context, r *pb.AuthUserRevokeRoleRequest) (*pb.AuthUserRevokeRoleResponse, error) {
	m, err := a.authPropose(ctx, &pb.InternalRaftRequest{AuthUserRevokeRole: r}, r)
	return fillAuth[*pb.AuthUserRevokeRoleResponse](a.s, m, err)
}

func (a *authServer) RoleAdd(ctx context.Context, r *pb.AuthRoleAddRequest) (*pb.AuthRoleAddResponse, error) {
	m, err := a.authPropose(ctx, &pb.InternalRaftRequest{AuthRoleAdd: r}, r)
	return fillAuth[*pb.AuthRoleAddResponse](a.s, m, err)
}

func (a *authServer) RoleGet(ctx context.Context, r *pb.AuthRoleGetRequest) (*pb.AuthRoleGetResponse, error) {
	m, err := a.authPropose(ctx, &pb.InternalRaftRequest{AuthRoleGet: r}, r)
	return fillAuth[*pb.AuthRoleGetResponse](a.s, m, err)
}

func (a *authServer) RoleList(ctx context.Context, r *pb.AuthRoleListRequest) (*pb.AuthRoleListResponse, error) {
	m, err := a.authPropose(ctx, &pb.InternalRaftRequest{AuthRoleList: r}, r)
	return fillAuth[*pb.AuthRoleListResponse](a.s, m, err)
}

func (a *authServer) RoleDelete(ctx context.Context, r *pb.AuthRoleDeleteRequest) (*pb.AuthRoleDeleteResponse, error) {
	m, err := a.authPropose(ctx, &pb.InternalRaftRequest{AuthRoleDelete: r}, r)
	return fillAuth[*pb.AuthRoleDeleteResponse](a.s, m, err)
}

func (a *authServer) RoleGrantPermission(ctx context.Context, r *pb.AuthRoleGrantPermissionRequest) (*pb.AuthRoleGrantPermissionResponse, error) {
	m, err := a.authPropose(ctx, &pb.InternalRaftRequest{AuthRoleGrantPermission: r}, r)
	return fillAuth[*pb.AuthRoleGrantPermissionResponse](a.s, m, err)
}

func (a *authServer) RoleRevokePermission(ctx context.Context, r *pb.AuthRoleRevokePermissionRequest) (*pb.AuthRoleRevokePermissionResponse, error) {
	m, err := a.authPropose(ctx, &pb.InternalRaftRequest{AuthRoleRevokePermission: r}, r)
	return fillAuth[*pb.AuthRoleRevokePermissionResponse](a.s, m, err)
}

// headered is an auth response with a header to fill.
type headered interface {
	proto.Message
	GetHeader() *pb.ResponseHeader
}

func fillAuth[T headered](s *Server, m proto.Message, err error) (T, error) {
	var zero T
	if err != nil {
		return zero, err
	}
	resp, ok := m.(T)
	if !ok {
		return zero, toGRPCError(errors.New("unexpected auth response"))
	}
	setHeader(resp, s.header(0))
	return resp, nil
}

// setHeader sets the Header field of an auth response.
func setHeader(m proto.Message, h *pb.ResponseHeader) {
	fd := m.ProtoReflect().Descriptor().Fields().ByName("header")
	if fd == nil {
		return
	}
	m.ProtoReflect().Set(fd, protoValueOf(h))
}

func protoValueOf(h *pb.ResponseHeader) protoreflect.Value {
	return protoreflect.ValueOfMessage(h.ProtoReflect())
}

// Methods a caller without a user name may call while auth is enabled.
var anonymousOK = map[string]bool{
	"/etcdserverpb.Auth/Authenticate": true,
	"/etcdserverpb.Auth/AuthStatus":   true,
	// Watch answers a refused create with a canceled response instead.
	"/etcdserverpb.Watch/Watch": true,
}

// requireIdentity is etcd's rule for every RPC while auth is enabled: a
// token, if given, must be valid, and a user name is required except for
// the methods above. Per-method permission checks come after it.
func (s *Server) requireIdentity(ctx context.Context, method string) error {
	if !s.auth.IsAuthEnabled() || method == "/etcdserverpb.Auth/Authenticate" {
		return nil // Authenticate ignores any token it is sent, as etcd
	}
	if strings.HasPrefix(method, "/v3lockpb.") || strings.HasPrefix(method, "/v3electionpb.") {
		// Lock and election are clients of KV and Lease: their calls
		// identify the caller, and fail as a client's calls do.
		return nil
	}
	ai, err := s.authInfo(ctx)
	if err != nil {
		if anonymousOK[method] && method == "/etcdserverpb.Watch/Watch" {
			return nil
		}
		return err
	}
	if ai.Username == "" && !anonymousOK[method] {
		return auth.ToGRPCError(auth.ErrUserEmpty)
	}
	return nil
}

func (s *Server) authStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := s.requireIdentity(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return h(srv, ss)
}
