package auth

import (
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
)

// AuthInfo is who makes a request: a user name and the auth revision the
// credential was checked at. Revision 0 means no user. The server puts it
// in the proposed entry's RequestHeader (username, auth_revision) so the
// apply-time check sees the proposer's view.
type AuthInfo struct {
	Username string
	Revision uint64
}

// LeaseKeysFunc returns the keys attached to a lease, or nil when the
// lease does not exist. The server passes its lessor's lookup.
type LeaseKeysFunc func(leaseID int64) [][]byte

func hasRootRole(roles []string) bool {
	_, ok := slices.BinarySearch(roles, rootRole)
	return ok
}

// permKind says which of a user's range sets a check consults.
type permKind int

const (
	permRead permKind = iota
	permWrite
)

// isOpPermitted is the one key-permission check, in etcd's order: auth
// off allows everything; then no user, then a stale auth revision, then
// an unknown user, then root, then the user's merged ranges.
func (s *Store) isOpPermitted(ai *AuthInfo, key, rangeEnd []byte, kind permKind) error {
	st := s.load()
	if !st.enabled {
		return nil
	}
	if ai == nil || ai.Revision == 0 {
		return ErrUserEmpty
	}
	if ai.Revision < st.revision {
		return ErrAuthOldRevision
	}
	up := st.perms[ai.Username]
	if up == nil {
		return ErrPermissionDenied
	}
	if up.root {
		return nil
	}
	set := up.read
	if kind == permWrite {
		set = up.write
	}
	if set.covers(requestInterval(key, rangeEnd)) {
		return nil
	}
	return ErrPermissionDenied
}

// IsRangePermitted checks read access to [key, rangeEnd) (one key when
// rangeEnd is empty, from key on when it is "\x00"). Use it for Range,
// Watch creation, Txn compares and prev_kv.
func (s *Store) IsRangePermitted(ai *AuthInfo, key, rangeEnd []byte) error {
	return s.isOpPermitted(ai, key, rangeEnd, permRead)
}

// IsPutPermitted checks write access to one key.
func (s *Store) IsPutPermitted(ai *AuthInfo, key []byte) error {
	return s.isOpPermitted(ai, key, nil, permWrite)
}

// IsDeleteRangePermitted checks write access to [key, rangeEnd).
func (s *Store) IsDeleteRangePermitted(ai *AuthInfo, key, rangeEnd []byte) error {
	return s.isOpPermitted(ai, key, rangeEnd, permWrite)
}

// IsAdminPermitted checks that the user holds the root role, as etcd
// requires for auth management and for the maintenance (Defragment,
// Alarm, Snapshot, Hash, HashKV, MoveLeader, Downgrade) and membership
// RPCs. Like etcd it does not check the auth revision.
func (s *Store) IsAdminPermitted(ai *AuthInfo) error {
	st := s.load()
	if !st.enabled {
		return nil
	}
	if ai == nil || ai.Username == "" {
		return ErrUserEmpty
	}
	u := st.users[ai.Username]
	if u == nil {
		return ErrUserNotFound
	}
	if !hasRootRole(u.Roles) {
		return ErrPermissionDenied
	}
	return nil
}

// IsAuthRequestPermitted is etcd's apply-time check for auth requests:
// management and the two lists need root; UserGet is also allowed for the
// user itself and RoleGet for a holder of the role; AuthStatus and
// Authenticate are open to everyone.
func (s *Store) IsAuthRequestPermitted(ai *AuthInfo, req proto.Message) error {
	switch q := req.(type) {
	case *pb.AuthStatusRequest, *pb.InternalAuthenticateRequest, *pb.AuthenticateRequest:
		return nil
	case *pb.AuthUserGetRequest:
		if err := s.IsAdminPermitted(ai); err != nil && (ai == nil || q.Name != ai.Username) {
			return err
		}
		return nil
	case *pb.AuthRoleGetRequest:
		if err := s.IsAdminPermitted(ai); err != nil && (ai == nil || !s.HasRole(ai.Username, q.Role)) {
			return err
		}
		return nil
	}
	return s.IsAdminPermitted(ai)
}

// IsPutRequestPermitted checks a Put: write on the key, read on it when
// prev_kv is asked, and write on every key already attached to the lease
// (whoever can attach a key to a lease can revoke the lease, deleting
// them).
func (s *Store) IsPutRequestPermitted(ai *AuthInfo, r *pb.PutRequest, leaseKeys LeaseKeysFunc) error {
	if err := s.IsPutPermitted(ai, r.Key); err != nil {
		return err
	}
	// The lease's keys are asked for only when a check needs them: the
	// list is a sorted copy of every key on the lease, and a put to a
	// lease holding many keys (Kubernetes' events) would otherwise pay
	// for it with auth off or as root.
	if r.Lease != 0 && leaseKeys != nil && s.IsAdminPermitted(ai) != nil {
		if err := s.IsLeaseKeysPermitted(ai, leaseKeys(r.Lease)); err != nil {
			return err
		}
	}
	if r.PrevKv {
		return s.IsRangePermitted(ai, r.Key, nil)
	}
	return nil
}

// IsDeleteRangeRequestPermitted checks a DeleteRange, with read access
// too when prev_kv is asked.
func (s *Store) IsDeleteRangeRequestPermitted(ai *AuthInfo, r *pb.DeleteRangeRequest) error {
	if err := s.IsDeleteRangePermitted(ai, r.Key, r.RangeEnd); err != nil {
		return err
	}
	if r.PrevKv {
		return s.IsRangePermitted(ai, r.Key, r.RangeEnd)
	}
	return nil
}

// IsLeaseKeysPermitted checks LeaseRevoke, LeaseKeepAlive and lease reuse
// by Put: root, or write access to every attached key.
func (s *Store) IsLeaseKeysPermitted(ai *AuthInfo, keys [][]byte) error {
	if s.IsAdminPermitted(ai) == nil {
		return nil
	}
	for _, k := range keys {
		if err := s.IsPutPermitted(ai, k); err != nil {
			return err
		}
	}
	return nil
}

// IsLeaseKeysReadPermitted is etcd's check for LeaseTimeToLive with keys
// and for LeaseLeases: root, or read access to every key attached to the
// lease (to every lease, for LeaseLeases). A lease without keys passes.
func (s *Store) IsLeaseKeysReadPermitted(ai *AuthInfo, keys [][]byte) error {
	if s.IsAdminPermitted(ai) == nil {
		return nil
	}
	for _, k := range keys {
		if err := s.IsRangePermitted(ai, k, nil); err != nil {
			return err
		}
	}
	return nil
}

// IsTxnPermitted checks a Txn: read on every compare, and every op of
// both branches, nested txns included, whichever branch will run.
func (s *Store) IsTxnPermitted(ai *AuthInfo, rt *pb.TxnRequest, leaseKeys LeaseKeysFunc) error {
	for _, c := range rt.Compare {
		if err := s.IsRangePermitted(ai, c.Key, c.RangeEnd); err != nil {
			return err
		}
	}
	for _, ops := range [][]*pb.RequestOp{rt.Success, rt.Failure} {
		for _, op := range ops {
			var err error
			switch v := op.Request.(type) {
			case *pb.RequestOp_RequestRange:
				if v.RequestRange != nil {
					err = s.IsRangePermitted(ai, v.RequestRange.Key, v.RequestRange.RangeEnd)
				}
			case *pb.RequestOp_RequestPut:
				if v.RequestPut != nil {
					err = s.IsPutRequestPermitted(ai, v.RequestPut, leaseKeys)
				}
			case *pb.RequestOp_RequestDeleteRange:
				if v.RequestDeleteRange != nil {
					err = s.IsDeleteRangeRequestPermitted(ai, v.RequestDeleteRange)
				}
			case *pb.RequestOp_RequestTxn:
				if v.RequestTxn != nil {
					err = s.IsTxnPermitted(ai, v.RequestTxn, leaseKeys)
				}
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// RequireUser is etcd's check for Status and Alarm GET: any identified
// caller will do while auth is enabled.
func (s *Store) RequireUser(ai *AuthInfo) error {
	if !s.IsAuthEnabled() {
		return nil
	}
	if ai == nil || ai.Username == "" {
		return ErrUserEmpty
	}
	return nil
}
