package auth

import (
	"encoding/base64"
	"maps"
	"slices"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"golang.org/x/crypto/bcrypt"
)

// The user operations. Mutating ones run in the apply goroutine with the
// request as committed by raft; the password arrives already hashed
// (PrepareUserAdd / PrepareUserChangePassword). Responses carry no
// header: the server fills it, as etcd's applier does.

// passwordHash returns the bcrypt hash to store for a request. The hash
// travels base64-encoded in hashed_password. A request with only a
// plaintext password comes from a proposer that skipped the pre-propose
// step (etcd < 3.5 log entries); etcd hashes it at apply and so do we,
// so the page store still holds only a hash.
func (s *Store) passwordHash(password, hashed string) ([]byte, error) {
	if password != "" && hashed == "" {
		return bcrypt.GenerateFromPassword([]byte(password), s.bcryptCost)
	}
	h, err := base64.StdEncoding.DecodeString(hashed)
	if err != nil {
		return nil, ErrNoPasswordUser
	}
	return h, nil
}

// UserAdd adds a user.
func (s *Store) UserAdd(w Writer, r *pb.AuthUserAddRequest) (*pb.AuthUserAddResponse, error) {
	if r.Name == "" {
		return nil, ErrUserEmpty
	}
	err := s.update(w, func(cur *state) (*state, error) {
		if cur.users[r.Name] != nil {
			return nil, ErrUserAlreadyExist
		}
		opts := r.Options
		if opts == nil {
			opts = &authpb.UserAddOptions{}
		} else {
			opts = &authpb.UserAddOptions{NoPassword: opts.NoPassword}
		}
		u := &authpb.User{Name: []byte(r.Name), Options: opts}
		if !opts.NoPassword {
			h, err := s.passwordHash(r.Password, r.HashedPassword)
			if err != nil {
				return nil, err
			}
			u.Password = h
		}
		return cur.withUser(w, u), nil
	})
	if err != nil {
		return nil, err
	}
	s.log.Info("added a user", "user-name", r.Name)
	return &pb.AuthUserAddResponse{}, nil
}

// UserDelete deletes a user and invalidates its simple tokens. root
// cannot be deleted while auth is enabled.
func (s *Store) UserDelete(w Writer, r *pb.AuthUserDeleteRequest) (*pb.AuthUserDeleteResponse, error) {
	err := s.update(w, func(cur *state) (*state, error) {
		if cur.enabled && r.Name == rootUser {
			return nil, ErrInvalidAuthMgmt
		}
		if cur.users[r.Name] == nil {
			return nil, ErrUserNotFound
		}
		next := cur.clone()
		delete(next.users, r.Name)
		w.Delete(BucketAuthUsers, []byte(r.Name))
		// Under applyMu, so no token of the user outlives the apply.
		s.tokens.invalidateUser(r.Name)
		return next, nil
	})
	if err != nil {
		return nil, err
	}
	s.log.Info("deleted a user", "user-name", r.Name)
	return &pb.AuthUserDeleteResponse{}, nil
}

// UserChangePassword replaces a user's password hash and invalidates its
// simple tokens. A no-password user stays without a password.
func (s *Store) UserChangePassword(w Writer, r *pb.AuthUserChangePasswordRequest) (*pb.AuthUserChangePasswordResponse, error) {
	err := s.update(w, func(cur *state) (*state, error) {
		old := cur.users[r.Name]
		if old == nil {
			return nil, ErrUserNotFound
		}
		u := &authpb.User{Name: old.Name, Roles: old.Roles, Options: old.Options}
		if old.Options == nil || !old.Options.NoPassword {
			h, err := s.passwordHash(r.Password, r.HashedPassword)
			if err != nil {
				return nil, err
			}
			u.Password = h
		}
		s.tokens.invalidateUser(r.Name)
		return cur.withUser(w, u), nil
	})
	if err != nil {
		return nil, err
	}
	s.log.Info("changed a password of a user", "user-name", r.Name)
	return &pb.AuthUserChangePasswordResponse{}, nil
}

// UserGrantRole grants a role to a user. The root role may be granted
// before it exists as a role, as in etcd; granting a role twice is a
// no-op that does not move the revision.
func (s *Store) UserGrantRole(w Writer, r *pb.AuthUserGrantRoleRequest) (*pb.AuthUserGrantRoleResponse, error) {
	err := s.update(w, func(cur *state) (*state, error) {
		old := cur.users[r.User]
		if old == nil {
			return nil, ErrUserNotFound
		}
		if r.Role != rootRole && cur.roles[r.Role] == nil {
			return nil, ErrRoleNotFound
		}
		i, found := slices.BinarySearch(old.Roles, r.Role)
		if found {
			s.log.Warn("ignored grant of an already granted role", "user-name", r.User, "role-name", r.Role)
			return nil, nil
		}
		// Roles stay sorted: hasRole and etcd's readers binary-search them.
		u := &authpb.User{Name: old.Name, Password: old.Password, Options: old.Options,
			Roles: slices.Insert(slices.Clone(old.Roles), i, r.Role)}
		s.log.Info("granted a role to a user", "user-name", r.User, "role-name", r.Role)
		return cur.withUser(w, u), nil
	})
	if err != nil {
		return nil, err
	}
	return &pb.AuthUserGrantRoleResponse{}, nil
}

// UserRevokeRole revokes a role from a user. root keeps the root role
// while auth is enabled.
func (s *Store) UserRevokeRole(w Writer, r *pb.AuthUserRevokeRoleRequest) (*pb.AuthUserRevokeRoleResponse, error) {
	err := s.update(w, func(cur *state) (*state, error) {
		if cur.enabled && r.Name == rootUser && r.Role == rootRole {
			return nil, ErrInvalidAuthMgmt
		}
		old := cur.users[r.Name]
		if old == nil {
			return nil, ErrUserNotFound
		}
		roles := slices.DeleteFunc(slices.Clone(old.Roles), func(x string) bool { return x == r.Role })
		if len(roles) == len(old.Roles) {
			return nil, ErrRoleNotGranted
		}
		if len(roles) == 0 {
			roles = nil
		}
		u := &authpb.User{Name: old.Name, Password: old.Password, Options: old.Options, Roles: roles}
		return cur.withUser(w, u), nil
	})
	if err != nil {
		return nil, err
	}
	s.log.Info("revoked a role from a user", "user-name", r.Name, "role-name", r.Role)
	return &pb.AuthUserRevokeRoleResponse{}, nil
}

// UserGet returns a user's roles. Whether the caller may ask is
// IsAuthRequestPermitted's business (root, or the user itself).
func (s *Store) UserGet(r *pb.AuthUserGetRequest) (*pb.AuthUserGetResponse, error) {
	u := s.load().users[r.Name]
	if u == nil {
		return nil, ErrUserNotFound
	}
	return &pb.AuthUserGetResponse{Roles: slices.Clone(u.Roles)}, nil
}

// UserList lists all user names in byte order (the bucket's order).
func (s *Store) UserList(*pb.AuthUserListRequest) (*pb.AuthUserListResponse, error) {
	st := s.load()
	names := slices.Sorted(maps.Keys(st.users))
	return &pb.AuthUserListResponse{Users: names}, nil
}

// HasRole reports whether user has been granted role.
func (s *Store) HasRole(user, role string) bool {
	u := s.load().users[user]
	return u != nil && slices.Contains(u.Roles, role)
}
