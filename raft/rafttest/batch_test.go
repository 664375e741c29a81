package rafttest

import (
	"bytes"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// TestFollowerBatchesQueuedAppends: appends that reach a follower while it
// is busy with a WAL fdatasync are persisted together by its next write,
// not one fdatasync each. One sync per MsgApp made a follower's disk the
// cluster's bottleneck (two entries per sync under 1000 clients).
func TestFollowerBatchesQueuedAppends(t *testing.T) {
	const backlog = 40 // below the cluster's MaxInflightMsgs (64)
	c, _, f := startWithFollower(t, 3)
	// Hold f's next WAL fdatasync until gate opens, counting every sync.
	gate := make(chan struct{})
	blocked := make(chan struct{}, 1)
	var syncs atomic.Int64
	f.FS.SetSyncDelay(func() time.Duration {
		syncs.Add(1)
		select {
		case blocked <- struct{}{}:
		default:
		}
		<-gate
		return 0
	})
	var last uint64
	for i := 0; i < backlog; i++ {
		// The leader and the other follower commit each entry; f queues
		// one MsgApp per entry behind its held sync.
		idx, err := c.ProposeAndWait([]byte(fmt.Sprintf("e%d", i)), 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		last = idx
		if i == 0 {
			select {
			case <-blocked:
			case <-time.After(20 * time.Second):
				t.Fatal("the follower never synced the first entry")
			}
		}
	}
	held := syncs.Load()
	close(gate)
	if err := c.WaitApplied(last, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	after := syncs.Load() - held
	t.Logf("%d appends queued behind one held fdatasync were persisted with %d more", backlog-1, after)
	if after > 4 {
		t.Fatalf("the follower made %d fdatasyncs for %d queued appends; want them batched (at most 4)", after, backlog-1)
	}
	if err := c.CheckConverged(last); err != nil {
		t.Fatal(err)
	}
}

// startWithFollower starts 3 members, commits a first entry, and returns
// the cluster, its leader and one follower.
func startWithFollower(t *testing.T, seed uint64) (c *Cluster, lead, f *Member) {
	t.Helper()
	c = NewCluster(t, Options{N: 3, Seed: seed})
	if _, err := c.ProposeAndWait([]byte("first"), 20*time.Second); err != nil {
		t.Fatal(err)
	}
	lead = c.Leader()
	for _, m := range c.Members {
		if m != lead {
			return c, lead, m
		}
	}
	t.Fatal("no follower")
	return
}

// TestLeaderBatchesQueuedProposals: proposals that queue up while the
// leader writes its WAL go to raft as one MsgProp, so each follower gets
// them in one MsgApp instead of one MsgApp per proposal (raft answers each
// MsgProp with an append to every follower).
func TestLeaderBatchesQueuedProposals(t *testing.T) {
	const backlog = 40
	// A long election timeout: the leader's raft goroutine is held in an
	// fdatasync below, and its followers must not elect another leader
	// meanwhile on a slow machine.
	c := NewCluster(t, Options{N: 3, Seed: 7, ElectionTicks: 200})
	if _, err := c.ProposeAndWait([]byte("first"), 20*time.Second); err != nil {
		t.Fatal(err)
	}
	lead := c.Leader()
	if lead == nil {
		t.Fatal("no leader")
	}
	var mu sync.Mutex
	apps := map[uint64]int{} // follower id -> MsgApps carrying queued entries
	c.Net.SetObserver(func(from uint64, m *raftpb.Message) {
		if from != lead.ID || m.GetType() != raftpb.MsgApp {
			return
		}
		for _, e := range m.GetEntries() {
			if bytes.HasPrefix(e.GetData(), []byte("q")) {
				mu.Lock()
				apps[m.GetTo()]++
				mu.Unlock()
				return
			}
		}
	})
	defer c.Net.SetObserver(nil)
	gate := make(chan struct{})
	blocked := make(chan struct{}, 1)
	lead.FS.SetSyncDelay(func() time.Duration {
		select {
		case blocked <- struct{}{}:
			<-gate
		default:
		}
		return 0
	})
	if err := c.ProposeAsync(lead, []byte("hold")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-blocked:
	case <-time.After(20 * time.Second):
		t.Fatal("the leader never synced the held entry")
	}
	// The raft goroutine waits in the fdatasync; these queue behind it
	// (ProposeAsync returns once a proposal is queued).
	for i := 0; i < backlog; i++ {
		if err := c.ProposeAsync(lead, []byte(fmt.Sprintf("q%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	lead.FS.SetSyncDelay(nil)
	close(gate)
	last, err := c.ProposeAndWait([]byte("last"), 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WaitApplied(last, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("MsgApps per follower carrying the %d queued proposals: %v", backlog, apps)
	if len(apps) != 2 {
		t.Fatalf("queued proposals reached %d followers, want 2", len(apps))
	}
	for id, n := range apps {
		if n > 4 {
			t.Fatalf("the leader sent follower %x %d MsgApps for %d queued proposals; want them in one (at most 4)", id, n, backlog)
		}
	}
	if err := c.CheckConverged(last); err != nil {
		t.Fatal(err)
	}
}
