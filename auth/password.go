package auth

import (
	"encoding/base64"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"golang.org/x/crypto/bcrypt"
)

// HashPassword returns the bcrypt hash of password at the store's cost.
// bcrypt is slow on purpose (~50 ms at cost 10), so the server calls it
// in the RPC handler, before proposing, never in the apply loop.
func (s *Store) HashPassword(password string) ([]byte, error) {
	return bcrypt.GenerateFromPassword([]byte(password), s.bcryptCost)
}

// PrepareUserAdd is the server's pre-propose step for UserAdd: unless the
// user is a no-password user, it hashes r.Password into r.HashedPassword
// (base64, etcd's encoding) and clears r.Password, so the plaintext never
// reaches the WAL, a peer, or the page store.
func (s *Store) PrepareUserAdd(r *pb.AuthUserAddRequest) error {
	if r.Options != nil && r.Options.NoPassword {
		r.Password = ""
		return nil
	}
	return s.hashInto(&r.Password, &r.HashedPassword)
}

// PrepareUserChangePassword is PrepareUserAdd for UserChangePassword.
func (s *Store) PrepareUserChangePassword(r *pb.AuthUserChangePasswordRequest) error {
	if r.Password == "" {
		return nil
	}
	return s.hashInto(&r.Password, &r.HashedPassword)
}

func (s *Store) hashInto(password, hashed *string) error {
	h, err := s.HashPassword(*password)
	if err != nil {
		return err
	}
	*hashed = base64.StdEncoding.EncodeToString(h)
	*password = ""
	return nil
}

// CheckPassword verifies a user's password, outside raft, and returns the
// auth revision it was checked at. The server proposes Authenticate only
// when it succeeds, and retries the whole step when the store's revision
// moved meanwhile (the password may have changed).
func (s *Store) CheckPassword(username, password string) (uint64, error) {
	st := s.load()
	if !st.enabled {
		return 0, ErrAuthNotEnabled
	}
	u := st.users[username]
	if u == nil {
		// Spend the same time as a wrong password so the answer's timing
		// does not tell which user names exist.
		_ = bcrypt.CompareHashAndPassword(s.dummyHash(), []byte(password))
		return 0, ErrAuthFailed
	}
	if u.Options != nil && u.Options.NoPassword {
		return 0, ErrNoPasswordUser
	}
	if bcrypt.CompareHashAndPassword(u.Password, []byte(password)) != nil {
		s.log.Info("invalid password", "user-name", username)
		return 0, ErrAuthFailed
	}
	return st.revision, nil
}

// GenTokenPrefix returns the random part of a simple token, chosen before
// proposing Authenticate and sent in InternalAuthenticateRequest's
// simple_token; JWT returns "".
func (s *Store) GenTokenPrefix() (string, error) { return s.tokens.genTokenPrefix() }

// dummyHash is a fixed hash at the store's cost, computed on first use.
func (s *Store) dummyHash() []byte {
	s.dummyOnce.Do(func() {
		s.dummy, _ = bcrypt.GenerateFromPassword([]byte("strata-no-such-user"), s.bcryptCost)
	})
	return s.dummy
}
