package auth

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"

	"go.etcd.io/etcd/api/v3/authpb"
	"golang.org/x/crypto/bcrypt"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/schema"
)

// Bucket and key names: etcd's, so a Strata page store converts to and
// from an etcd snapshot.db without translating auth state. Wire format,
// never change.
var (
	BucketAuth      = schema.Auth      // authEnabled, authRevision
	BucketAuthUsers = schema.AuthUsers // user name -> authpb.User
	BucketAuthRoles = schema.AuthRoles // role name -> authpb.Role

	keyAuthEnabled  = []byte("authEnabled")  // 1 byte: 1 enabled, 0 disabled
	keyAuthRevision = []byte("authRevision") // 8 bytes, big-endian
)

const (
	rootUser = "root"
	rootRole = "root"
)

// Writer receives the bucket writes of one applied auth request.
// *mvcc.WriteTx implements it; the caller begins the write transaction
// and ends it with the entry's index and term, so the auth writes commit
// in the same page-store transaction as the consistent index. Slices
// handed to Writer are never modified afterwards.
type Writer interface {
	Put(bucket, key, value []byte)
	Delete(bucket, key []byte)
}

// Config configures a Store.
type Config struct {
	// BcryptCost is the cost for password hashes (--bcrypt-cost). Out of
	// range [4, 31] or zero means bcrypt.DefaultCost (10), as in etcd.
	BcryptCost int
	// Tokens issues and resolves tokens; build it with NewTokenProvider
	// from --auth-token. nil means simple tokens with the default TTL.
	Tokens TokenProvider
	// Logger receives auth events. Passwords and tokens are never logged;
	// a token appears only as a short SHA-256 fingerprint.
	Logger *slog.Logger
}

// Store is the auth store: users, roles, the enabled flag and the auth
// revision, plus the token provider.
//
// Ownership and locks:
//   - st is the readers' view: an immutable snapshot of all auth state and
//     of every user's merged permissions. Readers (permission checks,
//     CheckPassword, Get/List) load it atomically and never lock, so a
//     permission check costs one atomic load and a binary search.
//   - applyMu serializes the mutating apply functions. Each builds a new
//     state from the current one (copying the maps and replacing, never
//     editing, the users and roles it changes), hands the writes to the
//     caller's Writer, and publishes the new state before returning. A
//     request checked after an apply returns therefore sees its effect:
//     a revoked permission denies the very next request.
//   - The in-memory state is authoritative; the page store is its
//     durable copy, written in the same batch as the consistent index.
type Store struct {
	log        *slog.Logger
	bcryptCost int
	tokens     TokenProvider

	dummyOnce sync.Once
	dummy     []byte // see dummyHash

	applyMu sync.Mutex
	st      atomic.Pointer[state]
}

// state is one immutable version of the auth store.
type state struct {
	enabled  bool
	revision uint64
	users    map[string]*authpb.User
	roles    map[string]*authpb.Role
	perms    map[string]*userPerms // user name -> merged permissions
}

// New loads the auth state from the page store's committed auth buckets
// (missing buckets mean an empty store) and returns the store. Call it
// before the apply loop starts, after the backend has committed all it
// holds (so the buckets reflect the consistent index).
func New(db *pagestore.DB, cfg Config) (*Store, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.BcryptCost < bcrypt.MinCost || cfg.BcryptCost > bcrypt.MaxCost {
		if cfg.BcryptCost != 0 {
			cfg.Logger.Warn("invalid bcrypt cost; using the default", "given-cost", cfg.BcryptCost, "default-cost", bcrypt.DefaultCost)
		}
		cfg.BcryptCost = bcrypt.DefaultCost
	}
	if cfg.Tokens == nil {
		cfg.Tokens = NewSimpleTokenProvider(SimpleTokenOptions{})
	}
	s := &Store{log: cfg.Logger, bcryptCost: cfg.BcryptCost, tokens: cfg.Tokens}
	if err := s.Recover(db); err != nil {
		return nil, err
	}
	return s, nil
}

// Recover replaces the in-memory state with the page store's, as after a
// snapshot is installed. Tokens are all invalidated when auth ends up
// disabled.
func (s *Store) Recover(db *pagestore.DB) error {
	st, err := load(db)
	if err != nil {
		return err
	}
	// Revision 0 is reserved for "no user" in AuthInfo, so a fresh store
	// starts at 1, as etcd's does. It is persisted with the first change.
	if st.revision == 0 {
		st.revision = 1
	}
	st.rebuildPerms()
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	s.st.Store(st)
	if st.enabled {
		s.tokens.enable()
	} else {
		s.tokens.disable()
	}
	return nil
}

// Close stops the token provider.
func (s *Store) Close() error {
	s.tokens.disable()
	return nil
}

func (s *Store) load() *state { return s.st.Load() }

// IsAuthEnabled reports whether authentication is enabled.
func (s *Store) IsAuthEnabled() bool { return s.load().enabled }

// Revision is the auth revision: it increases with every change of users,
// roles, permissions or the enabled flag (except AuthEnable, as in etcd).
func (s *Store) Revision() uint64 { return s.load().revision }

// BcryptCost is the cost HashPassword uses.
func (s *Store) BcryptCost() int { return s.bcryptCost }

// load reads the auth buckets from the committed page store.
func load(db *pagestore.DB) (*state, error) {
	st := &state{
		users: map[string]*authpb.User{},
		roles: map[string]*authpb.Role{},
	}
	err := db.View(func(tx *pagestore.Tx) error {
		if b, err := bucket(tx, BucketAuth); err != nil {
			return err
		} else if b != nil {
			v, err := b.Get(keyAuthEnabled)
			if err != nil {
				return err
			}
			st.enabled = len(v) == 1 && v[0] == 1
			if v, err = b.Get(keyAuthRevision); err != nil {
				return err
			}
			if len(v) == 8 {
				st.revision = binary.BigEndian.Uint64(v)
			}
		}
		if b, err := bucket(tx, BucketAuthUsers); err != nil {
			return err
		} else if b != nil {
			if err := b.ForEach(func(k, v []byte) error {
				u := &authpb.User{}
				if err := proto.Unmarshal(v, u); err != nil {
					return fmt.Errorf("auth: decode user %q: %w", k, err)
				}
				st.users[string(u.Name)] = u
				return nil
			}); err != nil {
				return err
			}
		}
		if b, err := bucket(tx, BucketAuthRoles); err != nil {
			return err
		} else if b != nil {
			return b.ForEach(func(k, v []byte) error {
				r := &authpb.Role{}
				if err := proto.Unmarshal(v, r); err != nil {
					return fmt.Errorf("auth: decode role %q: %w", k, err)
				}
				st.roles[string(r.Name)] = r
				return nil
			})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return st, nil
}

// bucket returns the named bucket, or nil when it does not exist yet.
func bucket(tx *pagestore.Tx, name []byte) (*pagestore.Bucket, error) {
	b, err := tx.Bucket(name)
	if errors.Is(err, pagestore.ErrBucketNotFound) {
		return nil, nil
	}
	return b, err
}

// clone starts the next version of the state: new maps, shared values.
// Values are never edited in place, so sharing them is safe.
func (st *state) clone() *state {
	return &state{
		enabled:  st.enabled,
		revision: st.revision,
		users:    maps.Clone(st.users),
		roles:    maps.Clone(st.roles),
	}
}

// withUser is the next state with u stored (replacing the user of its
// name); its write is staged in w.
func (st *state) withUser(w Writer, u *authpb.User) *state {
	next := st.clone()
	next.users[string(u.Name)] = u
	putUser(w, u)
	return next
}

// withRole is the next state with r stored (replacing the role of its
// name); its write is staged in w.
func (st *state) withRole(w Writer, r *authpb.Role) *state {
	next := st.clone()
	next.roles[string(r.Name)] = r
	putRole(w, r)
	return next
}

// rebuildPerms recomputes every user's merged permissions. etcd rebuilds
// its whole cache on every change too; auth changes are rare, and a full
// rebuild keeps the cache trivially consistent with users and roles.
func (st *state) rebuildPerms() {
	st.perms = make(map[string]*userPerms, len(st.users))
	for name, u := range st.users {
		up := &userPerms{}
		var read, write []interval
		for _, rn := range u.Roles {
			if rn == rootRole {
				up.root = true
			}
			r := st.roles[rn]
			if r == nil {
				continue
			}
			for _, p := range r.KeyPermission {
				iv := permInterval(p)
				switch p.PermType {
				case authpb.Permission_READ:
					read = append(read, iv)
				case authpb.Permission_WRITE:
					write = append(write, iv)
				case authpb.Permission_READWRITE:
					read = append(read, iv)
					write = append(write, iv)
				}
			}
		}
		up.read, up.write = newRangeSet(read), newRangeSet(write)
		st.perms[name] = up
	}
}

// update is the sequence of every apply that changes users, roles or
// the enabled flag: under applyMu, change reads the current state,
// stages its writes in w and returns the next state (cur.clone(),
// changed; cur.withUser and cur.withRole do both), which update commits
// before it returns. change returns a
// nil state for a request that changes nothing (the revision does not
// move), or an error that refuses the request; then nothing is
// committed, so change stages its writes only once it has accepted the
// request.
func (s *Store) update(w Writer, change func(cur *state) (*state, error)) error {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	next, err := change(s.load())
	if err == nil && next != nil {
		s.commit(w, next)
	}
	return err
}

// commit finishes a mutating apply: bumps and persists the revision,
// rebuilds the permission cache and publishes next. Called with applyMu.
func (s *Store) commit(w Writer, next *state) {
	next.revision++
	w.Put(BucketAuth, keyAuthRevision, binary.BigEndian.AppendUint64(nil, next.revision))
	s.publish(next)
}

func (s *Store) publish(next *state) {
	next.rebuildPerms()
	s.st.Store(next)
}

func putUser(w Writer, u *authpb.User) {
	v, err := proto.Marshal(u)
	if err != nil {
		// Marshal fails only on invalid UTF-8 in string fields (role
		// names), which the caller's request would already have failed
		// to decode with; a panic here means a programming error.
		panic(fmt.Sprintf("auth: marshal user %q: %v", u.Name, err))
	}
	w.Put(BucketAuthUsers, append([]byte(nil), u.Name...), v)
}

func putRole(w Writer, r *authpb.Role) {
	v, err := proto.Marshal(r)
	if err != nil {
		panic(fmt.Sprintf("auth: marshal role %q: %v", r.Name, err))
	}
	w.Put(BucketAuthRoles, append([]byte(nil), r.Name...), v)
}

func saveEnabled(w Writer, on bool) {
	v := []byte{0}
	if on {
		v[0] = 1
	}
	w.Put(BucketAuth, keyAuthEnabled, v)
}
