package lease

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/strata-db/strata/mvcc"
)

// NoLease is the lease ID meaning "no lease". The server picks a random
// non-zero ID for a grant that names none, before proposing it.
const NoLease int64 = 0

// MaxLeaseTTL is the largest TTL, in seconds, a grant may ask for (etcd's).
const MaxLeaseTTL int64 = 9000000000

// Forever is the remaining time of a lease on a lessor that is not the
// primary: only the primary runs lease clocks.
const Forever = time.Duration(math.MaxInt64)

// Errors. Match them with errors.Is.
var (
	// ErrLeaseNotFound is the same value as mvcc.ErrLeaseNotFound, so the
	// server maps one error whichever layer found the lease missing.
	ErrLeaseNotFound = mvcc.ErrLeaseNotFound
	// ErrLeaseExists is returned by Grant for an ID already in use.
	ErrLeaseExists = errors.New("lease: lease already exists")
	// ErrLeaseTTLTooLarge is returned by Grant for a TTL above MaxLeaseTTL.
	ErrLeaseTTLTooLarge = errors.New("lease: too large lease TTL")
	// ErrNotPrimary is returned by the primary-only operations (Renew,
	// TimeToLive) on a lessor that is not, or stopped being, the primary.
	ErrNotPrimary = errors.New("lease: not a primary lessor")
)

// Checkpointer proposes a LeaseCheckpointRequest through raft and returns
// once it is applied (or failed). The lessor calls it from its own
// goroutine for due checkpoints and from Renew to clear a checkpointed
// remaining TTL, never while holding a lock.
type Checkpointer func(ctx context.Context, cps []*pb.LeaseCheckpoint) error

// KeyDeleter deletes a revoked lease's keys in one revision; *mvcc.Store
// implements it (see mvcc.Store.DeleteKeys).
type KeyDeleter interface {
	DeleteKeys(ci, term uint64, keys [][]byte, also func(*mvcc.WriteTx)) int64
}

// Config configures a Lessor. The zero value works: no minimum TTL beyond
// one second and etcd's defaults for everything else.
type Config struct {
	// MinTTL is the shortest TTL granted, in seconds: a grant asking for
	// less gets MinTTL, and leases recovered with less are raised to it.
	// etcd sets it from the election timeout so a lease cannot expire
	// during a leader election; use MinTTL(election, heartbeat). Values
	// below 1 mean 1.
	MinTTL int64

	// CheckpointInterval is how often the primary checkpoints the
	// remaining TTL of each lease longer than it (etcd's default, 5 min).
	// Checkpointing runs only once SetCheckpointer has been called.
	CheckpointInterval time.Duration

	// ExpiredRetryInterval is how long an expired lease waits before it is
	// sent on ExpiredLeasesC again if its revoke has not been applied by
	// then (etcd's default, 3 s).
	ExpiredRetryInterval time.Duration

	// RevokeRate caps the expired leases sent for revocation per second
	// (etcd's leaseRevokeRate, default 1000). Promote also spreads expiries
	// so no second has more than 3/4 of it.
	RevokeRate int

	// CheckpointRate caps the lease checkpoints proposed per second
	// (etcd's leaseCheckpointRate, default 1000), in batches of at most
	// 1000 per proposal.
	CheckpointRate int

	Logger *slog.Logger

	// Metrics receives grants, revokes and renewals; nil records nothing.
	Metrics *Metrics

	// Test knobs: the clock and the expiry/checkpoint check interval
	// (etcd's 500 ms).
	now  func() time.Time
	tick time.Duration
	// afterPass runs after each pass of the expiry/checkpoint loop;
	// renewWaits runs when Renew starts waiting for an expired lease's
	// revoke. Tests wait on them instead of sleeping.
	afterPass  func()
	renewWaits func(id int64)
}

// MinTTL returns etcd's minimum lease TTL for a raft election timeout and
// heartbeat: 1.5 election timeouts, counted in whole ticks as etcd does
// ((3*electionTicks)/2 heartbeats), rounded up to whole seconds.
func MinTTL(election, heartbeat time.Duration) int64 {
	if heartbeat <= 0 {
		return 1
	}
	ticks := int64(election / heartbeat)
	d := time.Duration((3*ticks)/2) * heartbeat
	return max(1, int64(math.Ceil(d.Seconds())))
}

func (c *Config) withDefaults() {
	c.MinTTL = max(c.MinTTL, 1)
	if c.CheckpointInterval <= 0 {
		c.CheckpointInterval = 5 * time.Minute
	}
	if c.ExpiredRetryInterval <= 0 {
		c.ExpiredRetryInterval = 3 * time.Second
	}
	if c.RevokeRate <= 0 {
		c.RevokeRate = 1000
	}
	if c.CheckpointRate <= 0 {
		c.CheckpointRate = 1000
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.tick <= 0 {
		c.tick = 500 * time.Millisecond
	}
}

// Lessor holds the leases: their TTLs, the keys attached to them and, on
// the primary (the raft leader), their expiry clocks.
//
// Callers and goroutines:
//   - the apply goroutine calls Grant, Revoke/RevokeAndDelete,
//     Checkpoint, and (through the mvcc store) Exists, Attach and Detach;
//   - the raft side calls Promote and Demote on leadership changes;
//   - RPC handlers call Renew, Lookup, TimeToLive and Leases;
//   - the lessor's own goroutine finds expired leases and due checkpoints.
type Lessor struct {
	be  *mvcc.Backend
	cfg Config
	log *slog.Logger

	// mu guards everything below, and every field of every lease. It is a
	// leaf lock: nothing is called while it is held (no backend write, no
	// Checkpointer, no channel send). The mvcc store calls Attach and
	// Detach while holding the backend's batch lock, so taking the batch
	// lock under mu would invert that order and deadlock.
	mu     sync.RWMutex
	leases map[int64]*lease
	// expiries has one entry per lease while primary, at the lease's
	// expiry, or later once the lease was reported expired (the retry);
	// empty when not primary.
	expiries *timeQueue
	// checkpoints holds due times of remaining-TTL checkpoints while
	// primary and a Checkpointer is set; entries of gone leases are
	// skipped when popped.
	checkpoints *timeQueue
	// demoted is non-nil exactly while this lessor is the primary, and is
	// closed when it stops being one, waking Renew calls that wait.
	demoted chan struct{}
	// promoted is closed by Promote and replaced by an open channel by
	// Demote, so a caller that needs the primary can wait for it (see
	// PromotedC). Guarded by mu.
	promoted chan struct{}
	cp       Checkpointer

	expiredC chan []int64
	ctx      context.Context // canceled by Stop; passed to the Checkpointer
	cancel   context.CancelFunc
	stopOnce sync.Once
	done     chan struct{}
}

// lease is one lease. Its fields are guarded by Lessor.mu.
type lease struct {
	id           int64
	ttl          int64 // granted TTL in seconds, after the MinTTL raise; immutable
	remainingTTL int64 // last checkpointed remaining TTL in seconds; 0 = unset
	expiry       time.Time
	keys         map[string]struct{}
	revoked      chan struct{} // closed when the lease is revoked
}

// effectiveTTL is what the lease's clock starts from: the checkpointed
// remaining TTL if there is one, so that a leader change or restart does
// not hand a long lease its full TTL again, else the granted TTL.
func (l *lease) effectiveTTL() int64 {
	if l.remainingTTL > 0 {
		return l.remainingTTL
	}
	return l.ttl
}

// remaining is the time left; Forever while no clock runs.
func (l *lease) remaining(now time.Time) time.Duration {
	if l.expiry.IsZero() {
		return Forever
	}
	return l.expiry.Sub(now)
}

func (l *lease) refresh(now time.Time, extend time.Duration) {
	l.expiry = now.Add(extend + time.Duration(l.effectiveTTL())*time.Second)
}

func (l *lease) sortedKeys() [][]byte {
	keys := make([][]byte, 0, len(l.keys))
	for k := range l.keys {
		keys = append(keys, []byte(k))
	}
	slices.SortFunc(keys, bytes.Compare)
	return keys
}

// Open loads the leases committed in be's page store and starts the
// expiry goroutine. The lessor starts as a non-primary: no lease expires
// until Promote. Open it before mvcc.OpenStore, and pass it as
// StoreConfig.Leases: the store attaches every leased key while it
// rebuilds its index. Stop it when done.
func Open(be *mvcc.Backend, cfg Config) (*Lessor, error) {
	cfg.withDefaults()
	db := be.DB()
	if err := createBucket(db); err != nil {
		return nil, fmt.Errorf("lease: create bucket: %w", err)
	}
	recs, err := loadRecords(db)
	if err != nil {
		return nil, fmt.Errorf("lease: load: %w", err)
	}
	le := &Lessor{
		be: be, cfg: cfg, log: cfg.Logger,
		leases:      make(map[int64]*lease, len(recs)),
		expiries:    newIndexedQueue(),
		checkpoints: newQueue(),
		// A small buffer so a busy server does not make the loop drop a
		// batch; a full channel drops it, and the leases are resent after
		// ExpiredRetryInterval.
		expiredC: make(chan []int64, 16),
		done:     make(chan struct{}),
		promoted: make(chan struct{}),
	}
	le.ctx, le.cancel = context.WithCancel(context.Background())
	for _, r := range recs {
		le.leases[r.ID] = &lease{
			id: r.ID, ttl: max(r.TTL, cfg.MinTTL), remainingTTL: r.RemainingTTL,
			keys: map[string]struct{}{}, revoked: make(chan struct{}),
		}
	}
	go le.run()
	return le, nil
}

// Stop stops the expiry goroutine and wakes Renew calls waiting on it.
// It does not touch the backend.
func (le *Lessor) Stop() {
	le.stopOnce.Do(func() {
		le.cancel()
		<-le.done
	})
}

// SetCheckpointer enables remaining-TTL checkpoints (etcd's LeaseCheckpoint
// feature). Leases are scheduled for checkpoints from the next Promote on,
// or when granted or checkpointed while primary.
func (le *Lessor) SetCheckpointer(cp Checkpointer) {
	le.mu.Lock()
	le.cp = cp
	le.mu.Unlock()
}

// Grant applies a LeaseGrant entry (raft index ci, term term): it creates
// lease id with ttl seconds, raised to MinTTL, and returns the TTL
// granted. The lease is persisted in the same backend commit as ci. On the
// primary its clock starts now; elsewhere it starts at Promote. ci is
// recorded even when the grant fails, as for every apply method here.
func (le *Lessor) Grant(ci, term uint64, id, ttl int64) (int64, error) {
	granted, err := le.grant(id, ttl)
	w := le.be.BeginWrite()
	if err == nil {
		putRecord(w, record{ID: id, TTL: granted})
		le.cfg.Metrics.granted(granted)
	}
	w.End(ci, term)
	return granted, err
}

func (le *Lessor) grant(id, ttl int64) (int64, error) {
	if id == NoLease {
		return 0, ErrLeaseNotFound
	}
	if ttl > MaxLeaseTTL {
		return 0, ErrLeaseTTLTooLarge
	}
	le.mu.Lock()
	defer le.mu.Unlock()
	if _, ok := le.leases[id]; ok {
		return 0, ErrLeaseExists
	}
	l := &lease{id: id, ttl: max(ttl, le.cfg.MinTTL), keys: map[string]struct{}{}, revoked: make(chan struct{})}
	le.leases[id] = l
	if le.demoted != nil {
		now := le.cfg.now()
		l.refresh(now, 0)
		le.expiries.set(id, l.expiry)
		le.scheduleCheckpoint(l, now)
	}
	return l.ttl, nil
}

// Revoke removes lease id from memory and returns its attached keys in
// byte order. It writes nothing: the caller must delete the keys and the
// lease's record in one write, with the revoke entry's index:
//
//	keys, err := lessor.Revoke(id)
//	rev := store.DeleteKeys(ci, term, keys, lease.DeleteRecord(id)) // or (ci, term, nil, nil) on error
//
// RevokeAndDelete does exactly that. Renew calls waiting on the lease
// return ErrLeaseNotFound.
func (le *Lessor) Revoke(id int64) ([][]byte, error) {
	le.mu.Lock()
	defer le.mu.Unlock()
	l, ok := le.leases[id]
	if !ok {
		return nil, ErrLeaseNotFound
	}
	delete(le.leases, id)
	le.expiries.remove(id)
	close(l.revoked)
	le.cfg.Metrics.revoked()
	return l.sortedKeys(), nil
}

// RevokeAndDelete applies a LeaseRevoke entry: it revokes lease id and
// deletes its keys and its record through kv (the mvcc store) in one
// revision and one backend write with ci. It returns the store revision
// after the write, for the response header; on ErrLeaseNotFound nothing
// changes but ci is still recorded.
func (le *Lessor) RevokeAndDelete(ci, term uint64, id int64, kv KeyDeleter) (int64, error) {
	keys, err := le.Revoke(id)
	if err != nil {
		return kv.DeleteKeys(ci, term, nil, nil), err
	}
	return kv.DeleteKeys(ci, term, keys, DeleteRecord(id)), nil
}

// Checkpoint applies a LeaseCheckpoint entry: each named lease that still
// exists gets its remaining TTL, persisted with ci, which Promote (on any
// member, after a restart too) will start its clock from. Unknown leases
// are skipped, as etcd does. A checkpoint of 0 clears the remaining TTL.
func (le *Lessor) Checkpoint(ci, term uint64, cps []*pb.LeaseCheckpoint) {
	var recs []record
	le.mu.Lock()
	now := le.cfg.now()
	for _, c := range cps {
		l, ok := le.leases[c.ID]
		if !ok {
			continue
		}
		l.remainingTTL = c.Remaining_TTL
		recs = append(recs, record{ID: l.id, TTL: l.ttl, RemainingTTL: l.remainingTTL})
		if le.demoted != nil {
			le.scheduleCheckpoint(l, now)
		}
	}
	le.mu.Unlock()
	w := le.be.BeginWrite()
	for _, r := range recs {
		putRecord(w, r)
	}
	w.End(ci, term)
}

// Exists reports whether lease id exists (mvcc.Leases).
func (le *Lessor) Exists(id int64) bool {
	le.mu.RLock()
	defer le.mu.RUnlock()
	_, ok := le.leases[id]
	return ok
}

// Attach records that key is attached to lease id (mvcc.Leases). The
// store calls it for puts with a lease and while it restores its index;
// a key whose lease is gone is logged and left unattached.
func (le *Lessor) Attach(id int64, key []byte) {
	le.mu.Lock()
	l, ok := le.leases[id]
	if ok {
		l.keys[string(key)] = struct{}{}
	}
	le.mu.Unlock()
	if !ok {
		le.log.Warn("key refers to a missing lease", "lease", fmt.Sprintf("%016x", id), "key", string(key))
	}
}

// Detach records that key no longer belongs to lease id (mvcc.Leases). A
// missing lease is not an error: the keys of a revoked lease are detached
// by the very deletion that follows the revoke.
func (le *Lessor) Detach(id int64, key []byte) {
	le.mu.Lock()
	if l, ok := le.leases[id]; ok {
		delete(l.keys, string(key))
	}
	le.mu.Unlock()
}

var _ mvcc.Leases = (*Lessor)(nil)

// Info describes one lease.
type Info struct {
	ID int64
	// TTL is the granted TTL in seconds (etcd's GrantedTTL).
	TTL int64
	// RemainingTTL is the last checkpointed remaining TTL, 0 if none.
	RemainingTTL int64
	// Remaining is the time until expiry; Forever when not primary.
	Remaining time.Duration
	// Keys are the attached keys in byte order (TimeToLive with keys only).
	Keys [][]byte
}

// TTLSeconds is the remaining time as etcd's LeaseTimeToLive reports it:
// whole seconds, truncated.
func (i Info) TTLSeconds() int64 { return int64(i.Remaining.Seconds()) }

// Lookup returns lease id's TTLs, without its keys.
func (le *Lessor) Lookup(id int64) (Info, bool) {
	le.mu.RLock()
	defer le.mu.RUnlock()
	l, ok := le.leases[id]
	if !ok {
		return Info{}, false
	}
	return Info{ID: id, TTL: l.ttl, RemainingTTL: l.remainingTTL, Remaining: l.remaining(le.cfg.now())}, true
}

// Keys returns the keys attached to lease id, in byte order (empty, not
// nil, for a lease without keys), and whether the lease exists. Unlike
// TimeToLive it answers on every member, primary or not: permission
// checks made at apply must see the same keys on every member and during
// replay, before any lessor is promoted.
func (le *Lessor) Keys(id int64) ([][]byte, bool) {
	le.mu.RLock()
	defer le.mu.RUnlock()
	l, ok := le.leases[id]
	if !ok {
		return nil, false
	}
	return l.sortedKeys(), true
}

// TimeToLive answers LeaseTimeToLive on the primary: ErrLeaseNotFound for
// an unknown lease (the RPC layer answers TTL -1), ErrNotPrimary when not
// the primary, since only the primary's clock is meaningful (etcd
// forwards to the leader, or fails with "leader changed" if it was
// demoted meanwhile).
func (le *Lessor) TimeToLive(id int64, withKeys bool) (Info, error) {
	le.mu.RLock()
	defer le.mu.RUnlock()
	l, ok := le.leases[id]
	if !ok {
		return Info{}, ErrLeaseNotFound
	}
	if le.demoted == nil {
		return Info{}, ErrNotPrimary
	}
	info := Info{ID: id, TTL: l.ttl, RemainingTTL: l.remainingTTL, Remaining: l.remaining(le.cfg.now())}
	if withKeys {
		info.Keys = l.sortedKeys()
	}
	return info, nil
}

// Leases returns the IDs of all leases, soonest expiry first (ties, and
// every lease on a non-primary, by ID), as etcd's LeaseLeases lists them.
func (le *Lessor) Leases() []int64 {
	le.mu.RLock()
	ls := make([]*lease, 0, len(le.leases))
	for _, l := range le.leases {
		ls = append(ls, l)
	}
	sortByExpiry(ls)
	le.mu.RUnlock()
	ids := make([]int64, len(ls))
	for i, l := range ls {
		ids[i] = l.id
	}
	return ids
}

// sortByExpiry orders leases by expiry, no-clock leases last, then by ID.
func sortByExpiry(ls []*lease) {
	sort.Slice(ls, func(i, j int) bool {
		a, b := ls[i], ls[j]
		switch {
		case a.expiry.IsZero() != b.expiry.IsZero():
			return b.expiry.IsZero()
		case !a.expiry.Equal(b.expiry):
			return a.expiry.Before(b.expiry)
		}
		return a.id < b.id
	})
}

// Recover replaces the leases with those committed in the backend's page
// store (a follower installing a leader's image). Leases that are gone
// are treated as revoked: Renew calls waiting on them return. A primary
// restarts the clocks of all leases, as Promote does; a non-primary has
// none running. Keys are attached again by the store's Restore, which
// must run after this.
func (le *Lessor) Recover() error {
	db := le.be.DB()
	if err := createBucket(db); err != nil {
		return fmt.Errorf("lease: create bucket: %w", err)
	}
	recs, err := loadRecords(db)
	if err != nil {
		return fmt.Errorf("lease: load: %w", err)
	}
	le.mu.Lock()
	defer le.mu.Unlock()
	kept := make(map[int64]*lease, len(recs))
	for _, r := range recs {
		kept[r.ID] = &lease{
			id: r.ID, ttl: max(r.TTL, le.cfg.MinTTL), remainingTTL: r.RemainingTTL,
			keys: map[string]struct{}{}, revoked: make(chan struct{}),
		}
	}
	for id, l := range le.leases {
		if _, ok := kept[id]; !ok {
			close(l.revoked)
		} else {
			kept[id].revoked = l.revoked
		}
	}
	le.leases = kept
	le.expiries = newIndexedQueue()
	le.checkpoints = newQueue()
	if le.demoted != nil {
		now := le.cfg.now()
		for _, l := range le.leases {
			l.refresh(now, 0)
			le.expiries.set(l.id, l.expiry)
			le.scheduleCheckpoint(l, now)
		}
	}
	return nil
}
