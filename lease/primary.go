package lease

import (
	"context"
	"math"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// This file holds what only the primary does: run lease clocks, renew,
// report expired leases and checkpoint remaining TTLs.

// maxCheckpointBatch caps the checkpoints in one proposal (etcd's).
const maxCheckpointBatch = 1000

// Promote makes this lessor the primary, when its member becomes leader
// and has applied every entry of earlier terms. Every lease's clock
// restarts from its full TTL (or its checkpointed remaining TTL) plus
// extend, which etcd sets to the election timeout, so no lease expires
// merely because the leadership moved. When there are at least RevokeRate
// leases, expiries that would pile up in the same second are spread out so
// no second holds more than 3/4 of RevokeRate.
func (le *Lessor) Promote(extend time.Duration) {
	le.mu.Lock()
	defer le.mu.Unlock()
	if le.demoted == nil {
		le.demoted = make(chan struct{})
		close(le.promoted)
	}
	now := le.cfg.now()
	le.checkpoints = newQueue()
	ls := make([]*lease, 0, len(le.leases))
	for _, l := range le.leases {
		l.refresh(now, extend)
		le.expiries.set(l.id, l.expiry)
		le.scheduleCheckpoint(l, now)
		ls = append(ls, l)
	}
	if len(ls) < le.cfg.RevokeRate {
		return // fewer leases than a second's revoke budget cannot pile up
	}
	le.spreadExpiries(ls)
}

// spreadExpiries pushes back leases that would expire in a crowded
// second. Walking leases by expiry, a window opens at the first expiry
// and counts the leases in it; past target, each further lease is moved
// to window start + count/target seconds, which also stretches the
// window, so a crowd drains at target per second. Called with mu held.
func (le *Lessor) spreadExpiries(ls []*lease) {
	sortByExpiry(ls)
	target := max(1, 3*le.cfg.RevokeRate/4)
	var start, end time.Time
	count := 0
	for _, l := range ls {
		if count == 0 || l.expiry.After(end) {
			start, end, count = l.expiry, l.expiry.Add(time.Second), 1
			continue
		}
		count++
		if count <= target {
			continue
		}
		at := start.Add(time.Duration(float64(time.Second) * float64(count) / float64(target)))
		if at.After(l.expiry) {
			l.expiry = at
			le.expiries.set(l.id, at)
		}
		if l.expiry.After(end) {
			end = l.expiry
		}
	}
}

// Demote stops this lessor being the primary: no lease expires any more,
// pending checkpoints are dropped, and Renew calls waiting for an expired
// lease's revoke return ErrNotPrimary.
func (le *Lessor) Demote() {
	le.mu.Lock()
	defer le.mu.Unlock()
	for _, l := range le.leases {
		l.expiry = time.Time{}
	}
	le.expiries = newIndexedQueue()
	le.checkpoints = newQueue()
	if le.demoted != nil {
		close(le.demoted)
		le.demoted = nil
		le.promoted = make(chan struct{})
	}
}

// IsPrimary reports whether Promote was called more recently than Demote.
func (le *Lessor) IsPrimary() bool {
	le.mu.RLock()
	defer le.mu.RUnlock()
	return le.demoted != nil
}

// PromotedC returns a channel that is closed once this lessor is the
// primary (already closed if it is). A member that has just become leader
// promotes its lessor a moment later; lease RPCs that need the primary's
// clocks wait on it rather than fail in that gap.
func (le *Lessor) PromotedC() <-chan struct{} {
	le.mu.RLock()
	defer le.mu.RUnlock()
	return le.promoted
}

// Renew answers a keep-alive on the primary: it restarts lease id's clock
// from its full TTL and returns that TTL. Renewals are not proposed
// through raft, as in etcd: a new leader restarts every clock anyway.
//
// A lease that has already expired is not renewed: Renew waits until its
// revoke is applied (ErrLeaseNotFound), this lessor is demoted
// (ErrNotPrimary), the lessor stops (ErrNotPrimary) or ctx ends. If the
// lease carries a checkpointed remaining TTL and a Checkpointer is set,
// Renew first proposes a checkpoint clearing it, so that a later leader
// does not restart the lease from the stale remaining TTL.
func (le *Lessor) Renew(ctx context.Context, id int64) (int64, error) {
	le.mu.RLock()
	demoted := le.demoted
	if demoted == nil {
		le.mu.RUnlock()
		return -1, ErrNotPrimary
	}
	l, ok := le.leases[id]
	if !ok {
		le.mu.RUnlock()
		return -1, ErrLeaseNotFound
	}
	cp := le.cp
	clearRemaining := cp != nil && l.remainingTTL > 0
	expired := l.remaining(le.cfg.now()) <= 0
	le.mu.RUnlock()

	if expired {
		if le.cfg.renewWaits != nil {
			le.cfg.renewWaits(id)
		}
		select {
		case <-l.revoked:
			return -1, ErrLeaseNotFound
		case <-demoted:
			return -1, ErrNotPrimary
		case <-le.ctx.Done():
			return -1, ErrNotPrimary
		case <-ctx.Done():
			return -1, ctx.Err()
		}
	}
	if clearRemaining {
		if err := cp(ctx, []*pb.LeaseCheckpoint{{ID: id, Remaining_TTL: 0}}); err != nil {
			return -1, err
		}
	}

	le.mu.Lock()
	defer le.mu.Unlock()
	// The lease may have been revoked, or this lessor demoted, while the
	// lock was released: a demoted lessor must not start a clock.
	if l, ok = le.leases[id]; !ok {
		return -1, ErrLeaseNotFound
	}
	if le.demoted != demoted {
		return -1, ErrNotPrimary
	}
	l.refresh(le.cfg.now(), 0)
	le.expiries.set(id, l.expiry)
	le.cfg.Metrics.renewed()
	return l.ttl, nil
}

// ExpiredLeasesC delivers batches of expired lease IDs while this lessor
// is the primary. The server proposes a LeaseRevoke for each; the lessor
// never revokes on its own, so every member deletes the keys at the same
// revision. A lease whose revoke has not been applied after
// ExpiredRetryInterval is delivered again. At most RevokeRate IDs are
// delivered per second.
func (le *Lessor) ExpiredLeasesC() <-chan []int64 { return le.expiredC }

// run checks for expired leases and due checkpoints every tick.
func (le *Lessor) run() {
	defer close(le.done)
	t := time.NewTicker(le.cfg.tick)
	defer t.Stop()
	for {
		le.sendExpired()
		le.proposeCheckpoints()
		if le.cfg.afterPass != nil {
			le.cfg.afterPass()
		}
		select {
		case <-t.C:
		case <-le.ctx.Done():
			return
		}
	}
}

// perTick is how much of a per-second rate one tick may use.
func (le *Lessor) perTick(rate int) int {
	return max(1, int(float64(rate)*le.cfg.tick.Seconds()))
}

func (le *Lessor) sendExpired() {
	le.mu.Lock()
	var ids []int64
	if le.demoted != nil {
		ids = le.findExpired(le.perTick(le.cfg.RevokeRate))
	}
	le.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	select {
	case le.expiredC <- ids:
	case <-le.ctx.Done():
	default:
		// The server is busy; these leases come up again after
		// ExpiredRetryInterval, like any whose revoke is slow.
	}
}

// findExpired pops up to limit expired leases, pushing each back by
// ExpiredRetryInterval so it is reported again if its revoke never comes.
// Called with mu held.
func (le *Lessor) findExpired(limit int) []int64 {
	now := le.cfg.now()
	var ids []int64
	for len(ids) < limit {
		it := le.expiries.peek()
		if it == nil || now.Before(it.at) {
			break
		}
		l, ok := le.leases[it.id]
		if !ok {
			le.expiries.pop()
			continue
		}
		if l.expiry.IsZero() {
			le.expiries.pop() // no clock runs for it: nothing to expire
			continue
		}
		if now.Before(l.expiry) {
			le.expiries.set(l.id, l.expiry) // the queue entry was stale
			continue
		}
		le.expiries.set(l.id, now.Add(le.cfg.ExpiredRetryInterval))
		ids = append(ids, l.id)
	}
	return ids
}

// scheduleCheckpoint queues a checkpoint of l one interval from now, if
// checkpointing is on and l outlives the interval. Called with mu held.
func (le *Lessor) scheduleCheckpoint(l *lease, now time.Time) {
	if le.cp == nil || le.demoted == nil {
		return
	}
	if l.effectiveTTL() > int64(le.cfg.CheckpointInterval.Seconds()) {
		le.checkpoints.add(l.id, now.Add(le.cfg.CheckpointInterval))
	}
}

// proposeCheckpoints proposes the due checkpoints, at most a tick's share
// of CheckpointRate, in batches, stopping at the first failed proposal.
func (le *Lessor) proposeCheckpoints() {
	budget := le.perTick(le.cfg.CheckpointRate)
	for budget > 0 {
		le.mu.Lock()
		var cps []*pb.LeaseCheckpoint
		cp := le.cp
		if le.demoted != nil && cp != nil {
			cps = le.dueCheckpoints(min(budget, maxCheckpointBatch))
		}
		le.mu.Unlock()
		if len(cps) == 0 {
			return
		}
		if err := cp(le.ctx, cps); err != nil {
			le.log.Warn("lease checkpoint proposal failed", "leases", len(cps), "error", err)
			return
		}
		budget -= len(cps)
	}
}

// dueCheckpoints pops up to limit due checkpoints. A lease that is gone,
// expired, or still at its full TTL needs none (etcd's rules): the last
// because restarting from the full TTL is what would happen anyway.
// Called with mu held.
func (le *Lessor) dueCheckpoints(limit int) []*pb.LeaseCheckpoint {
	now := le.cfg.now()
	var cps []*pb.LeaseCheckpoint
	for len(cps) < limit {
		it := le.checkpoints.peek()
		if it == nil || now.Before(it.at) {
			break
		}
		le.checkpoints.pop()
		l, ok := le.leases[it.id]
		if !ok || l.expiry.IsZero() || !now.Before(l.expiry) {
			continue
		}
		left := int64(math.Ceil(l.expiry.Sub(now).Seconds()))
		if left >= l.ttl {
			continue
		}
		cps = append(cps, &pb.LeaseCheckpoint{ID: l.id, Remaining_TTL: left})
	}
	return cps
}
