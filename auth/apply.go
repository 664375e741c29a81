package auth

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
)

// AuthEnable turns authentication on. It needs a root user that holds
// the root role. Enabling twice is a no-op; enabling does not move the
// auth revision (etcd's behaviour: the revision only records changes that
// can invalidate a token's view).
func (s *Store) AuthEnable(w Writer) (*pb.AuthEnableResponse, error) {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	cur := s.load()
	if cur.enabled {
		s.log.Info("authentication is already enabled; ignored auth enable request")
		return &pb.AuthEnableResponse{}, nil
	}
	u := cur.users[rootUser]
	if u == nil {
		return nil, ErrRootUserNotExist
	}
	if !hasRootRole(u.Roles) {
		return nil, ErrRootRoleNotExist
	}
	next := cur.clone()
	next.enabled = true
	saveEnabled(w, true)
	s.publish(next)
	s.tokens.enable()
	s.log.Info("enabled authentication")
	return &pb.AuthEnableResponse{}, nil
}

// AuthDisable turns authentication off and drops every simple token.
func (s *Store) AuthDisable(w Writer) (*pb.AuthDisableResponse, error) {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	cur := s.load()
	if !cur.enabled {
		return &pb.AuthDisableResponse{}, nil
	}
	next := cur.clone()
	next.enabled = false
	saveEnabled(w, false)
	s.commit(w, next)
	s.tokens.disable()
	s.log.Info("disabled authentication")
	return &pb.AuthDisableResponse{}, nil
}

// AuthStatus reports whether auth is enabled and the auth revision.
func (s *Store) AuthStatus() (*pb.AuthStatusResponse, error) {
	st := s.load()
	return &pb.AuthStatusResponse{Enabled: st.enabled, AuthRevision: st.revision}, nil
}

// Authenticate issues a token for a user whose password the server has
// already checked with CheckPassword, outside raft. It runs at apply so
// every member learns a simple token at the same log position: index is
// the raft index of this entry, and the token is r.SimpleToken (from
// GenTokenPrefix, chosen before proposing) + "." + index. For JWT the
// token is signed here with the current auth revision.
func (s *Store) Authenticate(r *pb.InternalAuthenticateRequest, index uint64) (*pb.AuthenticateResponse, error) {
	st := s.load()
	if !st.enabled {
		return nil, ErrAuthNotEnabled
	}
	u := st.users[r.Name]
	if u == nil {
		return nil, ErrAuthFailed
	}
	if u.Options != nil && u.Options.NoPassword {
		return nil, ErrAuthFailed
	}
	tok, err := s.tokens.assign(r.Name, st.revision, r.SimpleToken, index)
	if err != nil {
		return nil, err
	}
	s.log.Debug("authenticated a user", "user-name", r.Name, "token-fingerprint", fingerprint(tok))
	return &pb.AuthenticateResponse{Token: tok}, nil
}

// Apply runs the auth request in r, if it holds one, after the apply-time
// permission check etcd makes: r.Header carries the proposer's user name
// and auth revision. handled is false when r is not an auth request.
// index is the entry's raft index (for simple tokens). The caller begins
// w before and ends it after, with the entry's index and term, whatever
// the outcome.
func (s *Store) Apply(w Writer, index uint64, r *pb.InternalRaftRequest) (resp proto.Message, handled bool, err error) {
	var ai AuthInfo
	if r.Header != nil {
		ai = AuthInfo{Username: r.Header.Username, Revision: r.Header.AuthRevision}
	}
	var req proto.Message
	switch {
	case r.AuthEnable != nil:
		req = r.AuthEnable
	case r.AuthDisable != nil:
		req = r.AuthDisable
	case r.AuthStatus != nil:
		req = r.AuthStatus
	case r.Authenticate != nil:
		req = r.Authenticate
	case r.AuthUserAdd != nil:
		req = r.AuthUserAdd
	case r.AuthUserDelete != nil:
		req = r.AuthUserDelete
	case r.AuthUserChangePassword != nil:
		req = r.AuthUserChangePassword
	case r.AuthUserGrantRole != nil:
		req = r.AuthUserGrantRole
	case r.AuthUserRevokeRole != nil:
		req = r.AuthUserRevokeRole
	case r.AuthUserGet != nil:
		req = r.AuthUserGet
	case r.AuthUserList != nil:
		req = r.AuthUserList
	case r.AuthRoleAdd != nil:
		req = r.AuthRoleAdd
	case r.AuthRoleDelete != nil:
		req = r.AuthRoleDelete
	case r.AuthRoleGrantPermission != nil:
		req = r.AuthRoleGrantPermission
	case r.AuthRoleRevokePermission != nil:
		req = r.AuthRoleRevokePermission
	case r.AuthRoleGet != nil:
		req = r.AuthRoleGet
	case r.AuthRoleList != nil:
		req = r.AuthRoleList
	default:
		return nil, false, nil
	}
	if err := s.IsAuthRequestPermitted(&ai, req); err != nil {
		return nil, true, err
	}
	resp, err = s.applyOne(w, index, req)
	return resp, true, err
}

// applyOne dispatches one auth request without any permission check.
func (s *Store) applyOne(w Writer, index uint64, req proto.Message) (proto.Message, error) {
	// The typed nil results of the operations must not become non-nil
	// proto.Message interfaces, so each case returns through ret.
	switch q := req.(type) {
	case *pb.AuthEnableRequest:
		return ret(s.AuthEnable(w))
	case *pb.AuthDisableRequest:
		return ret(s.AuthDisable(w))
	case *pb.AuthStatusRequest:
		return ret(s.AuthStatus())
	case *pb.InternalAuthenticateRequest:
		return ret(s.Authenticate(q, index))
	case *pb.AuthUserAddRequest:
		return ret(s.UserAdd(w, q))
	case *pb.AuthUserDeleteRequest:
		return ret(s.UserDelete(w, q))
	case *pb.AuthUserChangePasswordRequest:
		return ret(s.UserChangePassword(w, q))
	case *pb.AuthUserGrantRoleRequest:
		return ret(s.UserGrantRole(w, q))
	case *pb.AuthUserRevokeRoleRequest:
		return ret(s.UserRevokeRole(w, q))
	case *pb.AuthUserGetRequest:
		return ret(s.UserGet(q))
	case *pb.AuthUserListRequest:
		return ret(s.UserList(q))
	case *pb.AuthRoleAddRequest:
		return ret(s.RoleAdd(w, q))
	case *pb.AuthRoleDeleteRequest:
		return ret(s.RoleDelete(w, q))
	case *pb.AuthRoleGrantPermissionRequest:
		return ret(s.RoleGrantPermission(w, q))
	case *pb.AuthRoleRevokePermissionRequest:
		return ret(s.RoleRevokePermission(w, q))
	case *pb.AuthRoleGetRequest:
		return ret(s.RoleGet(q))
	case *pb.AuthRoleListRequest:
		return ret(s.RoleList(q))
	}
	return nil, ErrInvalidAuthMgmt
}

func ret[T proto.Message](m T, err error) (proto.Message, error) {
	if err != nil {
		return nil, err
	}
	return m, nil
}
