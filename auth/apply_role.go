package auth

import (
	"bytes"
	"maps"
	"slices"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// rootPerm is what RoleGet reports for the root role: readwrite on every
// key, whatever permissions were granted to it.
func rootPerm() *authpb.Permission {
	return &authpb.Permission{PermType: authpb.Permission_READWRITE, Key: []byte{}, RangeEnd: []byte{0}}
}

// RoleAdd adds a role with no permissions.
func (s *Store) RoleAdd(w Writer, r *pb.AuthRoleAddRequest) (*pb.AuthRoleAddResponse, error) {
	if r.Name == "" {
		return nil, ErrRoleEmpty
	}
	err := s.update(w, func(cur *state) (*state, error) {
		if cur.roles[r.Name] != nil {
			return nil, ErrRoleAlreadyExist
		}
		role := &authpb.Role{Name: []byte(r.Name)}
		return cur.withRole(w, role), nil
	})
	if err != nil {
		return nil, err
	}
	s.log.Info("created a role", "role-name", r.Name)
	return &pb.AuthRoleAddResponse{}, nil
}

// RoleDelete deletes a role and takes it from every user that had it.
// The root role cannot be deleted while auth is enabled.
func (s *Store) RoleDelete(w Writer, r *pb.AuthRoleDeleteRequest) (*pb.AuthRoleDeleteResponse, error) {
	err := s.update(w, func(cur *state) (*state, error) {
		if cur.enabled && r.Role == rootRole {
			return nil, ErrInvalidAuthMgmt
		}
		if cur.roles[r.Role] == nil {
			return nil, ErrRoleNotFound
		}
		next := cur.clone()
		delete(next.roles, r.Role)
		w.Delete(BucketAuthRoles, []byte(r.Role))
		// Users are rewritten in name order so the batch is deterministic.
		for _, name := range slices.Sorted(maps.Keys(cur.users)) {
			u := cur.users[name]
			if !slices.Contains(u.Roles, r.Role) {
				continue
			}
			roles := slices.DeleteFunc(slices.Clone(u.Roles), func(x string) bool { return x == r.Role })
			if len(roles) == 0 {
				roles = nil
			}
			nu := &authpb.User{Name: u.Name, Password: u.Password, Options: u.Options, Roles: roles}
			next.users[name] = nu
			putUser(w, nu)
		}
		return next, nil
	})
	if err != nil {
		return nil, err
	}
	s.log.Info("deleted a role", "role-name", r.Role)
	return &pb.AuthRoleDeleteResponse{}, nil
}

// RoleGrantPermission grants a permission to a role, or changes the type
// of a permission with the same key and range_end. Permissions stay sorted
// by key.
func (s *Store) RoleGrantPermission(w Writer, r *pb.AuthRoleGrantPermissionRequest) (*pb.AuthRoleGrantPermissionResponse, error) {
	if r.Perm == nil {
		return nil, ErrPermissionNotGiven
	}
	if !isValidPermissionRange(r.Perm.Key, r.Perm.RangeEnd) {
		return nil, ErrInvalidAuthMgmt
	}
	err := s.update(w, func(cur *state) (*state, error) {
		old := cur.roles[r.Name]
		if old == nil {
			return nil, ErrRoleNotFound
		}
		perms := slices.Clone(old.KeyPermission)
		i := slices.IndexFunc(perms, func(p *authpb.Permission) bool {
			return bytes.Equal(p.Key, r.Perm.Key) && bytes.Equal(p.RangeEnd, r.Perm.RangeEnd)
		})
		np := &authpb.Permission{
			PermType: r.Perm.PermType,
			Key:      bytes.Clone(r.Perm.Key),
			RangeEnd: bytes.Clone(r.Perm.RangeEnd),
		}
		if i >= 0 {
			np.Key, np.RangeEnd = perms[i].Key, perms[i].RangeEnd
			perms[i] = np
		} else {
			perms = append(perms, np)
			slices.SortStableFunc(perms, func(a, b *authpb.Permission) int { return bytes.Compare(a.Key, b.Key) })
		}
		role := &authpb.Role{Name: old.Name, KeyPermission: perms}
		return cur.withRole(w, role), nil
	})
	if err != nil {
		return nil, err
	}
	s.log.Info("granted/updated a permission to a role", "role-name", r.Name,
		"permission", r.Perm.PermType.String(), "key", string(r.Perm.Key), "range-end", string(r.Perm.RangeEnd))
	return &pb.AuthRoleGrantPermissionResponse{}, nil
}

// RoleRevokePermission removes the role's permissions with exactly this
// key and range_end.
func (s *Store) RoleRevokePermission(w Writer, r *pb.AuthRoleRevokePermissionRequest) (*pb.AuthRoleRevokePermissionResponse, error) {
	err := s.update(w, func(cur *state) (*state, error) {
		old := cur.roles[r.Role]
		if old == nil {
			return nil, ErrRoleNotFound
		}
		perms := slices.DeleteFunc(slices.Clone(old.KeyPermission), func(p *authpb.Permission) bool {
			return bytes.Equal(p.Key, r.Key) && bytes.Equal(p.RangeEnd, r.RangeEnd)
		})
		if len(perms) == len(old.KeyPermission) {
			return nil, ErrPermissionNotGranted
		}
		if len(perms) == 0 {
			perms = nil
		}
		role := &authpb.Role{Name: old.Name, KeyPermission: perms}
		return cur.withRole(w, role), nil
	})
	if err != nil {
		return nil, err
	}
	s.log.Info("revoked a permission on range", "role-name", r.Role, "key", string(r.Key), "range-end", string(r.RangeEnd))
	return &pb.AuthRoleRevokePermissionResponse{}, nil
}

// RoleGet returns a role's permissions; the root role reports readwrite
// on all keys.
func (s *Store) RoleGet(r *pb.AuthRoleGetRequest) (*pb.AuthRoleGetResponse, error) {
	role := s.load().roles[r.Role]
	if role == nil {
		return nil, ErrRoleNotFound
	}
	if r.Role == rootRole {
		return &pb.AuthRoleGetResponse{Perm: []*authpb.Permission{rootPerm()}}, nil
	}
	resp := &pb.AuthRoleGetResponse{}
	for _, p := range role.KeyPermission {
		resp.Perm = append(resp.Perm, &authpb.Permission{PermType: p.PermType, Key: bytes.Clone(p.Key), RangeEnd: bytes.Clone(p.RangeEnd)})
	}
	return resp, nil
}

// RoleList lists all role names in byte order.
func (s *Store) RoleList(*pb.AuthRoleListRequest) (*pb.AuthRoleListResponse, error) {
	return &pb.AuthRoleListResponse{Roles: slices.Sorted(maps.Keys(s.load().roles))}, nil
}
