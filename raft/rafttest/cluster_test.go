package rafttest

import (
	"fmt"
	"testing"
	"time"

	"github.com/strata-db/strata/internal/poll"
)

// TestLeaderChangeNotifies: every member's LeaderChanged fires when the
// leader is cut off: the followers elect a new one, and the old leader
// steps down when it loses its quorum (CheckQuorum).
func TestLeaderChangeNotifies(t *testing.T) {
	c := NewCluster(t, Options{N: 3, Seed: 1})
	if _, err := c.ProposeAndWait([]byte("first"), 20*time.Second); err != nil {
		t.Fatal(err)
	}
	old := c.Leader()
	if old == nil {
		t.Fatal("no leader after a committed proposal")
	}
	chans := map[uint64]<-chan struct{}{}
	for _, m := range c.Members {
		chans[m.ID] = m.Node.LeaderChanged()
	}
	c.Net.Isolate(old.ID, c.IDs())
	for id, ch := range chans {
		select {
		case <-ch:
		case <-time.After(20 * time.Second):
			t.Fatalf("member %d: no leader change announced within 20 s of cutting off leader %d", id, old.ID)
		}
	}
	// The two others elect one of themselves.
	deadline := time.Now().Add(20 * time.Second)
	for {
		var nl uint64
		for _, m := range c.Members {
			if m != old && m.Node.IsLeader() {
				nl = m.ID
			}
		}
		if nl != 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the majority elected no new leader")
		}
		var chs []<-chan struct{}
		for _, m := range c.Members {
			if m != old {
				chs = append(chs, m.Node.LeaderChanged())
			}
		}
		waitAny(chs, time.Until(deadline))
	}
	if old.Node.IsLeader() {
		t.Fatalf("the cut-off leader %d still believes it leads", old.ID)
	}
	c.Net.Heal()
	if _, err := c.ProposeAndWait([]byte("after"), 20*time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestSnapshotCatchUp: a member down while the others compact their logs
// comes back through a snapshot carrying the state (the page-store image),
// and ends with the same contents as the others.
func TestSnapshotCatchUp(t *testing.T) {
	c := NewCluster(t, Options{N: 3, Seed: 2, SnapshotCount: 10, CatchUpEntries: 5})
	if _, err := c.ProposeAndWait([]byte("first"), 20*time.Second); err != nil {
		t.Fatal(err)
	}
	lagger := c.Members[2]
	if lagger == c.Leader() {
		lagger = c.Members[1]
	}
	if err := c.Crash(lagger); err != nil {
		t.Fatal(err)
	}
	var last uint64
	for i := 0; i < 60; i++ {
		idx, err := c.ProposeAndWait([]byte(fmt.Sprintf("v%d", i)), 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		last = idx
	}
	if err := c.Restart(lagger); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitApplied(last, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := lagger.Installs(); n == 0 {
		t.Fatalf("member %d caught up without installing a snapshot (the test needs one)", lagger.ID)
	}
	if err := c.CheckConverged(last); err != nil {
		t.Fatal(err)
	}
	// The sender counts a transfer done after the receiver has the
	// message, so the install can come first.
	poll.Until(t, "a snapshot transfer reported done", func() bool { return c.Net.SnapsDone.Load() > 0 })
	t.Logf("member %d installed %d snapshot(s); %d sent, %d done, %d failed", lagger.ID, lagger.Installs(),
		c.Net.SnapsSent.Load(), c.Net.SnapsDone.Load(), c.Net.SnapsFailed.Load())
}
