package lease

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/strata-db/strata/internal/poll"
)

// raftCheckpointer stands in for the server: it "proposes" a checkpoint by
// applying it at the next raft index, under a lock shared with the test's
// own applies, and remembers what it applied.
type raftCheckpointer struct {
	e     *env
	apply *sync.Mutex
	mu    sync.Mutex
	seen  [][]*pb.LeaseCheckpoint
}

func (c *raftCheckpointer) propose(_ context.Context, cps []*pb.LeaseCheckpoint) error {
	c.apply.Lock()
	c.e.le.Checkpoint(c.e.next(), 1, cps)
	c.apply.Unlock()
	c.mu.Lock()
	c.seen = append(c.seen, cps)
	c.mu.Unlock()
	return nil
}

func (c *raftCheckpointer) calls() [][]*pb.LeaseCheckpoint {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([][]*pb.LeaseCheckpoint(nil), c.seen...)
}

// waitCalls waits until n checkpoint proposals were made.
func (c *raftCheckpointer) waitCalls(t *testing.T, n int) [][]*pb.LeaseCheckpoint {
	t.Helper()
	poll.Until(t, fmt.Sprintf("%d checkpoint proposals", n), func() bool { return len(c.calls()) >= n })
	return c.calls()
}

func TestCheckpointSurvivesRestart(t *testing.T) {
	clk := newFakeClock()
	var apply sync.Mutex
	cfg := Config{now: clk.now, tick: 5 * time.Millisecond, CheckpointInterval: 10 * time.Second}
	passes := countPasses(&cfg)
	e := newEnv(t, cfg)
	cp := &raftCheckpointer{e: e, apply: &apply}
	e.le.SetCheckpointer(cp.propose)
	apply.Lock()
	e.grant(1, 100)
	e.grant(2, 5) // not longer than the interval: never checkpointed
	apply.Unlock()
	e.le.Promote(0)

	clk.advance(10 * time.Second)
	calls := cp.waitCalls(t, 1)
	if len(calls[0]) != 1 || calls[0][0].ID != 1 || calls[0][0].Remaining_TTL != 90 {
		t.Fatalf("first checkpoint %v, want lease 1 at 90", calls[0])
	}
	if info, _ := e.le.Lookup(1); info.RemainingTTL != 90 {
		t.Fatalf("remaining TTL after checkpoint %d, want 90", info.RemainingTTL)
	}
	clk.advance(10 * time.Second) // applying a checkpoint schedules the next
	calls = cp.waitCalls(t, 2)
	if calls[1][0].Remaining_TTL != 80 {
		t.Fatalf("second checkpoint %v, want 80", calls[1])
	}

	// The checkpoint is persisted: after a restart the new leader starts
	// the lease from 80 s, not from its full 100 s.
	apply.Lock()
	e.reopen()
	apply.Unlock()
	info, _ := e.le.Lookup(1)
	if info.TTL != 100 || info.RemainingTTL != 80 {
		t.Fatalf("after restart %+v, want TTL 100, remaining TTL 80", info)
	}
	e.le.Promote(0)
	if info, _ := e.le.Lookup(1); info.Remaining != 80*time.Second {
		t.Fatalf("after restart and promote: remaining %v, want 80s", info.Remaining)
	}

	// Without a Checkpointer nothing is proposed.
	clk.advance(time.Minute)
	passes.waitFullPass(t) // a pass that saw the minute go by
	if n := len(cp.calls()); n != 2 {
		t.Fatalf("%d proposals with no checkpointer set, want still 2", n)
	}

	// A renew clears the checkpointed remaining TTL through raft first,
	// so the lease gets its full TTL now and after the next restart.
	cp2 := &raftCheckpointer{e: e, apply: &apply}
	e.le.SetCheckpointer(cp2.propose)
	ttl, err := e.le.Renew(context.Background(), 1)
	if err != nil || ttl != 100 {
		t.Fatalf("Renew = %d, %v; want 100", ttl, err)
	}
	if calls := cp2.calls(); len(calls) == 0 || calls[0][0].ID != 1 || calls[0][0].Remaining_TTL != 0 {
		t.Fatalf("renew proposed %v, want a checkpoint clearing lease 1", calls)
	}
	if info, _ := e.le.Lookup(1); info.Remaining != 100*time.Second || info.RemainingTTL != 0 {
		t.Fatalf("after renew %+v, want 100s left and no remaining TTL", info)
	}
	apply.Lock()
	e.reopen()
	apply.Unlock()
	if info, _ := e.le.Lookup(1); info.RemainingTTL != 0 {
		t.Fatalf("after restart remaining TTL %d, want the cleared 0", info.RemainingTTL)
	}
}

// A checkpoint of an unknown lease is skipped; the entry is still applied.
func TestCheckpointUnknownLease(t *testing.T) {
	e := newEnv(t, Config{})
	e.grant(1, 60)
	e.le.Checkpoint(e.next(), 1, []*pb.LeaseCheckpoint{{ID: 9, Remaining_TTL: 5}, {ID: 1, Remaining_TTL: 30}})
	if _, ok := e.le.Lookup(9); ok {
		t.Fatal("a checkpoint created a lease")
	}
	e.reopen()
	if info, _ := e.le.Lookup(1); info.RemainingTTL != 30 {
		t.Fatalf("remaining TTL %d, want 30", info.RemainingTTL)
	}
	if e.be.ConsistentIndex() != e.ci {
		t.Fatalf("consistent index %d, want %d", e.be.ConsistentIndex(), e.ci)
	}
}

// A lease whose clock still shows its full TTL (here: extended by Promote)
// needs no checkpoint: restarting it from the full TTL loses nothing.
func TestCheckpointSkipsFullTTL(t *testing.T) {
	clk := newFakeClock()
	var apply sync.Mutex
	cfg := Config{now: clk.now, tick: 5 * time.Millisecond, CheckpointInterval: 10 * time.Second}
	passes := countPasses(&cfg)
	e := newEnv(t, cfg)
	cp := &raftCheckpointer{e: e, apply: &apply}
	e.le.SetCheckpointer(cp.propose)
	apply.Lock()
	e.grant(1, 100)
	apply.Unlock()
	e.le.Promote(10 * time.Second) // lease 1: 110 s left
	apply.Lock()
	e.grant(2, 100) // granted on the primary: 100 s left
	apply.Unlock()
	clk.advance(10 * time.Second)
	cp.waitCalls(t, 1)
	passes.waitFullPass(t) // and lease 1 had a whole pass to show up in
	calls := cp.calls()
	if len(calls) != 1 || len(calls[0]) != 1 || calls[0][0].ID != 2 || calls[0][0].Remaining_TTL != 90 {
		t.Fatalf("checkpoints %v, want only lease 2 at 90", calls)
	}
}
