package lease

import (
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/strata-db/strata/internal/poll"
	"github.com/strata-db/strata/mvcc"
	"github.com/strata-db/strata/pagestore"
)

// fakeClock is a settable clock for the lessor's now knob. Tests that
// exercise the real expiry goroutine use the wall clock instead.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// passCounter counts the passes of the lessor's expiry/checkpoint loop
// (Config.afterPass), so a test can wait until a whole pass has run
// after it changed something, instead of sleeping.
type passCounter struct {
	mu sync.Mutex
	n  int
}

// countPasses installs a pass counter in cfg.
func countPasses(cfg *Config) *passCounter {
	p := &passCounter{}
	cfg.afterPass = func() {
		p.mu.Lock()
		p.n++
		p.mu.Unlock()
	}
	return p
}

func (p *passCounter) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// waitFullPass waits until a pass that started after the call has ended
// (two passes end: the one under way, if any, and the next).
func (p *passCounter) waitFullPass(t testing.TB) {
	t.Helper()
	target := p.count() + 2
	poll.Until(t, "a whole pass of the lessor's loop", func() bool { return p.count() >= target })
}

// env is a real page store file, backend, lessor and mvcc store, opened in
// the order the server opens them.
type env struct {
	t     testing.TB
	path  string
	cfg   Config
	db    *pagestore.DB
	be    *mvcc.Backend
	le    *Lessor
	store *mvcc.Store
	ci    uint64 // last raft index applied
}

func newEnv(t testing.TB, cfg Config) *env {
	t.Helper()
	e := &env{t: t, path: filepath.Join(t.TempDir(), "db"), cfg: cfg}
	e.open()
	t.Cleanup(e.close)
	return e
}

func (e *env) open() {
	e.t.Helper()
	db, err := pagestore.Open(e.path, &pagestore.Options{NoSync: true})
	if err != nil {
		e.t.Fatal(err)
	}
	be, err := mvcc.NewBackend(db, mvcc.BackendConfig{BatchInterval: time.Hour})
	if err != nil {
		e.t.Fatal(err)
	}
	le, err := Open(be, e.cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	st, err := mvcc.OpenStore(be, mvcc.StoreConfig{Leases: le})
	if err != nil {
		e.t.Fatal(err)
	}
	e.db, e.be, e.le, e.store = db, be, le, st
	e.ci = be.ConsistentIndex()
}

// close commits what was applied and closes everything; reopen after it
// sees exactly the committed state.
func (e *env) close() {
	if e.db == nil {
		return
	}
	e.le.Stop()
	if err := e.store.Close(); err != nil {
		e.t.Error(err)
	}
	if err := e.be.Close(); err != nil {
		e.t.Error(err)
	}
	if err := e.db.Close(); err != nil {
		e.t.Error(err)
	}
	e.db = nil
}

func (e *env) reopen() {
	e.t.Helper()
	e.close()
	e.open()
}

// next returns the raft index of the next entry to apply.
func (e *env) next() uint64 {
	e.ci++
	return e.ci
}

func (e *env) grant(id, ttl int64) int64 {
	e.t.Helper()
	got, err := e.le.Grant(e.next(), 1, id, ttl)
	if err != nil {
		e.t.Fatalf("grant %d ttl %d: %v", id, ttl, err)
	}
	return got
}
