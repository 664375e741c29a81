package mvcc

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/strata-db/strata/pagestore"
)

// Failing commits (a full page-store disk, an I/O error) leave every
// acknowledged write in memory: it is safe in the WAL, and the commit is
// retried until it succeeds. This file keeps that state visible and cheap:
//
//   - The first failure is logged at once, then at most once per
//     failLogEvery while commits keep failing (never once per attempt),
//     and the recovery once, with how long it failed and what it flushed.
//   - Retries back off from BatchInterval, doubling to retryMax, and
//     ignore early-commit kicks: each attempt rebuilds the whole backlog
//     into one transaction, so a hot retry loop would burn CPU and
//     allocate for nothing.
//   - OnCommitHealth tells the owner when commits start failing and when
//     they recover, so the server can raise and clear its alarm and bound
//     the backlog (PendingBytes) it admits.

const (
	failLogEvery = time.Minute
	retryMax     = 2 * time.Second
)

// commitHealth is the backend's commit-failure state. Fields are guarded
// by Backend.commitMu (every commit holds it); failing, failures and
// nextRetry are atomics so the committer loop and metrics read them
// without it.
type commitHealth struct {
	onChange func(error)

	failing   atomic.Bool
	failures  atomic.Uint64 // failed commits since the backend opened
	nextRetry atomic.Int64  // unix nanos before which the loop does not retry

	since     time.Time     // first failure of the current streak
	streak    uint64        // failures in the current streak
	lastLog   time.Time     // last failure log line
	backoff   time.Duration // wait before the next retry
	lastError error
}

// retryDue reports whether the committer should commit now: always while
// commits succeed, and after the backoff while they fail.
func (b *Backend) retryDue(now time.Time) bool {
	h := &b.health
	return !h.failing.Load() || now.UnixNano() >= h.nextRetry.Load()
}

// noteFailure records a failed commit. Called with commitMu held.
func (b *Backend) noteFailure(err error, now time.Time) {
	h := &b.health
	h.failures.Add(1)
	h.streak++
	h.lastError = err
	if !h.failing.Load() {
		h.failing.Store(true)
		h.since, h.lastLog = now, now
		h.backoff = b.interval
		b.log.Error("backend commit failed; acknowledged writes stay in memory (they are safe in the WAL) "+
			"and the commit is retried; free space on the data disk",
			"error", err, "backlog-bytes", b.PendingBytes())
		if h.onChange != nil {
			h.onChange(err)
		}
	} else {
		if h.onChange != nil && errors.Is(err, pagestore.ErrFailed) {
			// The page store failed for good during the streak (a failed
			// meta restore): the owner must hear it, or it would wait for
			// a recovery that retrying can never bring.
			h.onChange(err)
		}
		h.backoff = min(2*h.backoff, max(retryMax, b.interval))
		if now.Sub(h.lastLog) >= failLogEvery {
			h.lastLog = now
			b.log.Warn("backend commits still failing; acknowledged writes stay in memory",
				"error", err, "failing-for", now.Sub(h.since).Round(time.Second).String(),
				"failed-commits", h.streak, "backlog-bytes", b.PendingBytes())
		}
	}
	h.nextRetry.Store(now.Add(h.backoff).UnixNano())
}

// noteSuccess records a successful commit. Called with commitMu held.
func (b *Backend) noteSuccess(now time.Time, flushed int64) {
	h := &b.health
	if !h.failing.Load() {
		return
	}
	h.failing.Store(false)
	b.log.Info("backend commits succeed again; the writes held in memory are in the page store",
		"failed-for", now.Sub(h.since).Round(time.Millisecond).String(), "failed-commits", h.streak,
		"flushed-bytes", flushed, "backlog-bytes", b.PendingBytes())
	h.streak, h.lastError = 0, nil
	if h.onChange != nil {
		h.onChange(nil)
	}
}

// CommitFailing reports whether the latest commit failed.
func (b *Backend) CommitFailing() bool { return b.health.failing.Load() }

// CommitFailures is the number of failed commits since the backend opened.
func (b *Backend) CommitFailures() uint64 { return b.health.failures.Load() }
