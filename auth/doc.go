// Package auth is Strata's auth store: etcd 3.7's users, roles, key-range
// permissions, the root user and role, the auth revision, and simple and
// JWT tokens, with etcd's rules and etcd's client-visible errors.
//
// # State and storage
//
// The whole auth state (enabled flag, revision, users, roles, and every
// user's merged permissions) lives in memory as one immutable snapshot
// behind an atomic pointer. Readers (every RPC's permission check, token
// resolution, CheckPassword, Get/List) load it without locks. The apply
// functions, serialized by one mutex and called from the apply goroutine,
// build the next snapshot, hand their bucket writes to the caller's
// Writer (an *mvcc.WriteTx), and publish the snapshot before returning,
// so the next request checked sees the change: a revoked permission
// denies the very next Range, Put or Watch creation.
//
// The page store holds the durable copy in etcd's buckets and encoding,
// so a snapshot converts to and from etcd's snapshot.db unchanged:
//
//	bucket "auth"       "authEnabled"  -> 0x01 | 0x00
//	                    "authRevision" -> uint64 big-endian
//	bucket "authUsers"  name -> authpb.User (proto; password = bcrypt hash)
//	bucket "authRoles"  name -> authpb.Role (proto; permissions sorted by key)
//
// These writes ride in the same backend batch as the consistent index, so
// after a crash the buckets match the index and replaying the WAL from it
// rebuilds the rest; New reads the buckets once at start (Recover after a
// snapshot is installed).
//
// # Permissions
//
// A permission is READ, WRITE or READWRITE on one key (empty range_end),
// a range [key, range_end), or everything from key on (range_end "\x00").
// Each user's permissions from all its roles are merged into two sorted
// lists of disjoint intervals (read, write), rebuilt on every change. A
// request's [key, range_end) is allowed when one merged interval covers
// it entirely, so adjacent grants add up, as in etcd's interval tree. The
// root role allows everything. Checks go, as in etcd: auth disabled
// allows; then no user (revision 0) is ErrUserEmpty; a request's auth
// revision below the store's is ErrAuthOldRevision; an unknown user or
// an uncovered range is ErrPermissionDenied.
//
// # Passwords
//
// Passwords are hashed with bcrypt (--bcrypt-cost) in the RPC handler,
// before proposing: PrepareUserAdd and PrepareUserChangePassword replace
// the plaintext with hashed_password (base64), so the plaintext reaches
// neither the WAL, nor a peer, nor the page store. Authenticate does the
// slow bcrypt comparison outside raft with CheckPassword and proposes
// only the user name and a random token prefix.
//
// # Tokens
//
// simple: "<16 random letters>.<raft index of the Authenticate entry>".
// The proposer picks the letters (GenTokenPrefix); every member records
// the token when it applies the entry. A token expires --auth-token-ttl
// after its last use; changing a user's password or deleting the user
// drops its tokens; AuthDisable drops all. They resolve to the store's
// current revision, so they never go stale, only away.
//
// jwt: signed with golang-jwt (RS*, PS*, ES*, HS*, EdDSA), claims
// "username", "revision", "exp". The algorithm is pinned to the
// configured one. A JWT carries the revision it was issued at, so any
// auth change makes older JWTs fail with ErrAuthOldRevision, on which
// clientv3 authenticates again.
//
// # How the server uses it
//
// Startup:
//
//	opts, _ := cfg.AuthTokenOptions()
//	tp, err := auth.NewTokenProvider(auth.TokenOptions(opts),
//		auth.SimpleTokenOptions{TTL: time.Duration(cfg.AuthTokenTTL) * time.Second,
//			IndexWaiter: applyWait}, log)
//	as, err := auth.New(be.DB(), auth.Config{BcryptCost: int(cfg.BcryptCost), Tokens: tp, Logger: log})
//
// Per RPC (outside raft): identify the caller, then check.
//
//	ai, err := as.AuthInfoFromContext(ctx, cfg.ClientSecurity.ClientCertAuth) // "token" / "authorization" metadata, else cert CN
//	if err != nil { return auth.ToGRPCError(err) }
//	if ai == nil { ai = &auth.AuthInfo{} }
//
//	Range, Watch create           as.IsRangePermitted(ai, key, rangeEnd)
//	Put                           as.IsPutRequestPermitted(ai, r, lessor keys)
//	DeleteRange                   as.IsDeleteRangeRequestPermitted(ai, r)
//	Txn                           as.IsTxnPermitted(ai, r, lessor keys)
//	LeaseRevoke                   as.IsLeaseKeysPermitted(ai, keys)
//	Compact, Defragment, Snapshot, Hash, HashKV, Alarm (not GET),
//	MoveLeader, Downgrade, Member* as.IsAdminPermitted(ai)
//	Status, Alarm GET             as.RequireUser(ai)
//
// Writes are proposed with RequestHeader{Username: ai.Username,
// AuthRevision: ai.Revision} and checked again at apply with the same
// functions, so a permission revoked between propose and apply denies
// the write (ErrAuthOldRevision).
//
// Auth RPCs: UserAdd and UserChangePassword call Prepare* first.
// Authenticate is
//
//	for {
//		rev, err := as.CheckPassword(name, password) // outside raft
//		prefix, _ := as.GenTokenPrefix()
//		resp := propose(&pb.InternalRaftRequest{Authenticate: &pb.InternalAuthenticateRequest{Name: name, SimpleToken: prefix}})
//		if rev == as.Revision() { return resp }      // else the password may have changed: retry
//	}
//
// Apply: for every entry, begin the backend write, let the store handle
// auth requests, end with the entry's index and term:
//
//	w := be.BeginWrite()
//	resp, handled, err := as.Apply(w, index, req) // checks admin rights from req.Header
//	w.End(index, term)
//
// Responses carry no header; the server fills it. Errors convert with
// ToGRPCError to etcd's exact codes and messages.
package auth
