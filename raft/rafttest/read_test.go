package rafttest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/strata-db/strata/raft"
)

// TestReadIndexSurvivesLeaderChange: a ReadIndex asked of a leader that
// is then cut off, and one a follower forwarded to it, are lost by raft
// when that leader steps down (its pending reads are dropped; nobody
// answers the forwarded request). They must still be answered once the
// cluster has a leader again, as etcd re-sends an unanswered ReadIndex,
// instead of waiting out the caller's deadline.
func TestReadIndexSurvivesLeaderChange(t *testing.T) {
	c := NewCluster(t, Options{N: 3, Seed: 3, TickInterval: 10 * time.Millisecond, ElectionTicks: 20})
	first, err := c.ProposeAndWait([]byte("first"), 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	old := c.Leader()
	if old == nil {
		t.Fatal("no leader after a committed proposal")
	}
	var follower *Member
	for _, m := range c.Members {
		if m != old {
			follower = m
			break
		}
	}
	c.Net.Isolate(old.ID, c.IDs())

	type result struct {
		who   string
		index uint64
		err   error
	}
	results := make(chan result, 2)
	// The deadline only bounds a hang: the reads must be answered once
	// the partition heals, long before it.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	read := func(who string, m *Member) {
		for {
			changed := m.Node.LeaderChanged()
			idx, err := m.Node.ReadIndex(ctx)
			if errors.Is(err, raft.ErrNoLeader) {
				// As the server does: no leader to ask yet, ask again
				// once there is one.
				select {
				case <-changed:
					continue
				case <-ctx.Done():
					err = ctx.Err()
				}
			}
			results <- result{who, idx, err}
			return
		}
	}
	go read("the cut-off leader", old)
	go read("a follower", follower)

	// The others elect a new leader, and the old one steps down.
	deadline := time.Now().Add(20 * time.Second)
	for {
		newLead := c.Leader()
		if newLead != nil && newLead != old && !old.Node.IsLeader() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no new leader elected, or the old one did not step down")
		}
		var chans []<-chan struct{}
		for _, m := range c.Members {
			chans = append(chans, m.Node.LeaderChanged())
		}
		waitAny(chans, 100*time.Millisecond)
	}
	c.Net.Heal()
	for range 2 {
		r := <-results
		if r.err != nil {
			t.Fatalf("ReadIndex on %s: %v", r.who, r.err)
		}
		if r.index < first {
			t.Fatalf("ReadIndex on %s = %d, below the entry committed before it (%d)", r.who, r.index, first)
		}
	}
}
