package load

import (
	"context"
	"sync"
	"time"
)

// limiter spaces requests to at most rate a second, letting up to burst
// through at once after an idle spell. A nil limiter does not limit.
type limiter struct {
	mu       sync.Mutex
	interval time.Duration
	burst    int
	tat      time.Time // theoretical arrival time of the next request
}

// newLimiter returns nil (no limit) for rate 0.
func newLimiter(rate, burst int) *limiter {
	if rate <= 0 {
		return nil
	}
	if burst < 1 {
		burst = 1
	}
	return &limiter{interval: time.Second / time.Duration(rate), burst: burst}
}

// wait blocks until the next request may go, or ctx ends.
func (l *limiter) wait(ctx context.Context) error {
	if l == nil {
		return ctx.Err()
	}
	l.mu.Lock()
	now := time.Now()
	if l.tat.Before(now) {
		l.tat = now
	}
	at := l.tat.Add(-time.Duration(l.burst-1) * l.interval)
	l.tat = l.tat.Add(l.interval)
	l.mu.Unlock()
	d := time.Until(at)
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
