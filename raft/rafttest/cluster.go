package rafttest

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	etcdraft "go.etcd.io/raft/v3"

	"github.com/strata-db/strata/mvcc"
	"github.com/strata-db/strata/raft"
	"github.com/strata-db/strata/wal"
)

// Options configures a Cluster.
type Options struct {
	// N is the number of members (ids 1..N).
	N int
	// Seed seeds the network's fault decisions.
	Seed uint64
	// TickInterval is one raft tick (default 5 ms); ElectionTicks
	// (default 10) and HeartbeatTicks (1) are in ticks.
	TickInterval  time.Duration
	ElectionTicks int
	// SnapshotCount and CatchUpEntries are the raft settings of the same
	// names; small values make followers need snapshots.
	SnapshotCount, CatchUpEntries uint64
	// Logger receives the members' logs (default: discarded).
	Logger *slog.Logger
	// WALSyncDelay, if set, makes each WAL fdatasync take a random time
	// up to it: followers' acknowledgements then often reach the leader
	// before its own write is done.
	WALSyncDelay time.Duration
}

// Member is one member of a Cluster: its directory holds wal/, snap/ and
// snap/db, as a server's member directory does.
type Member struct {
	ID  uint64
	Dir string

	// Set while the member runs (nil after Crash).
	FS   *CrashFS
	SM   *PageSM
	Node *raft.Node

	Crashes, Restarts int
	// SnapshotCount, if set, replaces the cluster's for this member.
	SnapshotCount uint64
	// BeforeStart, if set, runs on the member's new file system before
	// each start (to arm a crash, say).
	BeforeStart func(fs *CrashFS)
	// early counts entries applied ahead of the local WAL by the
	// member's earlier runs (see PageSM.EarlyFollower).
	earlyFollower, earlyLeader int64
	installs                   int
}

// retire stops counting the current run.
func (m *Member) retire() {
	m.earlyFollower += m.SM.EarlyFollower.Load()
	m.earlyLeader += m.SM.EarlyLeader.Load()
	m.installs += m.SM.Restores()
	m.FS, m.SM, m.Node = nil, nil, nil
}

// Installs counts the snapshots the member installed, over all its runs.
func (m *Member) Installs() int {
	n := m.installs
	if m.Running() {
		n += m.SM.Restores()
	}
	return n
}

// Early returns, over every run of every member, how many entries were
// applied before the local WAL held them, on followers and on leaders.
func (c *Cluster) Early() (follower, leader int64) {
	for _, m := range c.Members {
		follower += m.earlyFollower
		leader += m.earlyLeader
		if m.Running() {
			follower += m.SM.EarlyFollower.Load()
			leader += m.SM.EarlyLeader.Load()
		}
	}
	return follower, leader
}

// WALDir, SnapDir and DBPath are the member's paths.
func (m *Member) WALDir() string  { return filepath.Join(m.Dir, "wal") }
func (m *Member) SnapDir() string { return filepath.Join(m.Dir, "snap") }
func (m *Member) DBPath() string  { return filepath.Join(m.SnapDir(), "db") }

// Running reports whether the member is up.
func (m *Member) Running() bool { return m.Node != nil }

// Cluster is N raft members in one process, each with its own real WAL
// and page store on disk, talking over a Network.
type Cluster struct {
	t       testing.TB
	opts    Options
	Net     *Network
	Members []*Member

	mu sync.Mutex
}

// NewCluster starts a new cluster of opts.N members in t's temporary
// directory.
func NewCluster(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.TickInterval == 0 {
		opts.TickInterval = 5 * time.Millisecond
	}
	if opts.ElectionTicks == 0 {
		opts.ElectionTicks = 10
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Cluster{t: t, opts: opts, Net: NewNetwork(opts.Seed)}
	root := t.TempDir()
	for i := 1; i <= opts.N; i++ {
		m := &Member{ID: uint64(i), Dir: filepath.Join(root, fmt.Sprintf("m%d", i))}
		if err := os.MkdirAll(m.SnapDir(), 0o700); err != nil {
			t.Fatal(err)
		}
		c.Members = append(c.Members, m)
	}
	for _, m := range c.Members {
		if err := c.start(m); err != nil {
			t.Fatalf("start member %d: %v", m.ID, err)
		}
	}
	t.Cleanup(c.Stop)
	return c
}

// IDs returns the member ids.
func (c *Cluster) IDs() []uint64 {
	ids := make([]uint64, len(c.Members))
	for i, m := range c.Members {
		ids[i] = m.ID
	}
	return ids
}

func (c *Cluster) start(m *Member) error {
	fs := NewCrashFS()
	if d := c.opts.WALSyncDelay; d > 0 {
		var mu sync.Mutex
		rng := rand.New(rand.NewPCG(c.opts.Seed, m.ID<<16|uint64(m.Restarts)))
		fs.SetSyncDelay(func() time.Duration {
			mu.Lock()
			defer mu.Unlock()
			return time.Duration(rng.Int64N(int64(d)))
		})
	}
	if m.BeforeStart != nil {
		m.BeforeStart(fs)
	}
	sm, err := OpenPageSM(m.DBPath(), fs)
	if err != nil {
		return err
	}
	snapCount := c.opts.SnapshotCount
	if m.SnapshotCount != 0 {
		snapCount = m.SnapshotCount
	}
	var peers []etcdraft.Peer
	for _, o := range c.Members {
		peers = append(peers, etcdraft.Peer{ID: o.ID})
	}
	n, err := raft.Start(raft.Config{
		ID: m.ID, ClusterID: 0x5157, Peers: peers,
		WALDir: m.WALDir(), StatePath: m.DBPath(), SnapshotDir: m.SnapDir(),
		WAL:          &wal.Options{FS: fs, SegmentSize: 256 << 10, NoZeroFill: true},
		TickInterval: c.opts.TickInterval, ElectionTicks: c.opts.ElectionTicks, HeartbeatTicks: 1,
		SnapshotCount: snapCount, CatchUpEntries: c.opts.CatchUpEntries,
		MaxSizePerMsg: 64 << 10, MaxInflightMsgs: 64,
		PreVote: true, StateMachine: sm, Transport: c.Net.Transport(m.ID),
		Logger: c.opts.Logger.With("member", m.ID),
	})
	if err != nil {
		sm.Close()
		return err
	}
	m.FS, m.SM, m.Node = fs, sm, n
	sm.SetLeaderCheck(n.IsLeader)
	sm.SetPersistedCheck(func() uint64 { return n.Status().Persisted })
	c.Net.Attach(m.ID, n)
	return nil
}

// Crash stops member m as a crash would: its file systems fail every
// operation from now on (or from the operation CrashAfter armed, if that
// already fired), its goroutines stop, and the WAL then loses the bytes it
// had not fdatasync'd. The disk is then checked (CheckDisk).
func (c *Cluster) Crash(m *Member) error {
	if !m.Running() {
		return nil
	}
	c.Net.Detach(m.ID)
	m.FS.CrashNow()
	_ = m.Node.Stop()
	_ = m.SM.Close()
	if _, err := m.FS.LoseUnsynced(); err != nil {
		return err
	}
	m.retire()
	m.Crashes++
	return CheckDisk(m)
}

// Restart starts a stopped member from its disk. Start refuses a WAL
// behind the page store, so an error here is a broken invariant.
func (c *Cluster) Restart(m *Member) error {
	if m.Running() {
		return nil
	}
	if err := c.start(m); err != nil {
		return fmt.Errorf("restart of member %d after %d crashes: %w", m.ID, m.Crashes, err)
	}
	m.Restarts++
	return nil
}

// Stop stops every running member cleanly and the network.
func (c *Cluster) Stop() {
	for _, m := range c.Members {
		if m.Running() {
			c.Net.Detach(m.ID)
			_ = m.Node.Stop()
			_ = m.SM.Close()
			m.retire()
		}
	}
	c.Net.Close()
}

// Running returns the running members.
func (c *Cluster) Running() []*Member {
	var out []*Member
	for _, m := range c.Members {
		if m.Running() {
			out = append(out, m)
		}
	}
	return out
}

// Leader returns the running member that is leader, if any.
func (c *Cluster) Leader() *Member {
	for _, m := range c.Running() {
		if m.Node.IsLeader() {
			return m
		}
	}
	return nil
}

// Propose proposes data through member m and returns once raft took or
// refused it.
func (c *Cluster) Propose(m *Member, data []byte, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return m.Node.Propose(ctx, data)
}

// ProposeAsync queues data for raft through member m without waiting
// for raft to take it.
func (c *Cluster) ProposeAsync(m *Member, data []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return m.Node.ProposeAsync(ctx, nil, data, nil)
}

// ProposeAndWait proposes data until some member applies it, through
// whichever member leads, and returns the index it was applied at on the
// member that proposed it.
func (c *Cluster) ProposeAndWait(data []byte, timeout time.Duration) (uint64, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		l := c.Leader()
		if l == nil {
			if err := c.waitLeader(time.Until(deadline)); err != nil {
				return 0, err
			}
			continue
		}
		if err := c.Propose(l, data, time.Until(deadline)); err != nil {
			continue
		}
		// Applied here, or the leader changed and the entry may be lost:
		// then propose again.
		for l.Running() {
			applied := l.SM.AppliedChanged()
			if idx, ok := l.SM.Find(data); ok {
				return idx, nil
			}
			changed := l.Node.LeaderChanged()
			if !l.Node.IsLeader() {
				break
			}
			if !waitAny([]<-chan struct{}{applied, changed}, time.Until(deadline)) {
				break
			}
		}
	}
	return 0, fmt.Errorf("rafttest: %q not applied within %v", data, timeout)
}

// waitLeader waits until some running member leads.
func (c *Cluster) waitLeader(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if c.Leader() != nil {
			return nil
		}
		var chans []<-chan struct{}
		for _, m := range c.Running() {
			chans = append(chans, m.Node.LeaderChanged())
		}
		if c.Leader() != nil {
			return nil
		}
		waitAny(chans, time.Until(deadline))
	}
	return fmt.Errorf("rafttest: no leader within %v", timeout)
}

// waitAny returns true when one of chans is closed, false after d.
func waitAny(chans []<-chan struct{}, d time.Duration) bool {
	done := make(chan struct{})
	var once sync.Once
	for _, ch := range chans {
		go func(ch <-chan struct{}) {
			select {
			case <-ch:
				once.Do(func() { close(done) })
			case <-done:
			}
		}(ch)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		once.Do(func() { close(done) })
		return false
	}
}

// WaitApplied waits until every running member has applied index.
func (c *Cluster) WaitApplied(index uint64, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for _, m := range c.Running() {
		if err := m.Node.WaitApplied(ctx, index); err != nil {
			return fmt.Errorf("member %d applied %d, not %d: %w", m.ID, m.Node.Status().Applied, index, err)
		}
	}
	return nil
}

// CheckConverged compares the running members' contents up to index.
func (c *Cluster) CheckConverged(index uint64) error {
	var first *Member
	var want string
	for _, m := range c.Running() {
		d, n := m.SM.Digest(index)
		if first == nil {
			first, want = m, d
			continue
		}
		if d != want {
			wd, wn := first.SM.Digest(index)
			return fmt.Errorf("member %d's contents up to %d differ from member %d's: digest %s (%d entries) vs %s (%d entries)",
				m.ID, index, first.ID, d, n, wd, wn)
		}
	}
	for _, m := range c.Running() {
		if d := m.SM.Dups(); d != 0 {
			return fmt.Errorf("member %d was handed %d entries twice", m.ID, d)
		}
	}
	return nil
}

// CheckLive checks, on every running member, that the page store has
// made nothing durable past what the local WAL holds.
func (c *Cluster) CheckLive() error {
	for _, m := range c.Running() {
		if err := m.SM.Violation(); err != nil {
			return fmt.Errorf("member %d: %w", m.ID, err)
		}
		ci := m.SM.ConsistentIndex()
		p := m.Node.Status().Persisted // read after ci: it only grows past a committed ci
		if ci > p {
			return fmt.Errorf("member %d: the page store's consistent index %d is past the WAL's persisted index %d", m.ID, ci, p)
		}
	}
	return nil
}

// CheckDisk checks a stopped member's files: the page store's consistent
// index is not past the WAL's last entry (unless the WAL records a
// snapshot whose image install a crash interrupted), and every snapshot
// marker the WAL holds either follows its own entry in the log (a local
// snapshot: the log held it first) or stands for an installed or
// installable received image.
func CheckDisk(m *Member) error {
	snap, err := wal.LastSnapshot(nil, m.WALDir())
	if err != nil {
		return fmt.Errorf("member %d: reading the WAL: %w", m.ID, err)
	}
	w, err := wal.Open(m.WALDir(), snap, nil)
	if err != nil {
		return fmt.Errorf("member %d: opening the WAL at snapshot %d: %w", m.ID, snap.Index, err)
	}
	_, _, ents, err := w.ReadAll()
	w.Close()
	if err != nil {
		return fmt.Errorf("member %d: reading the WAL: %w", m.ID, err)
	}
	walLast := snap.Index
	if len(ents) > 0 {
		walLast = max(walLast, ents[len(ents)-1].GetIndex())
	}
	ci, err := mvcc.ImageIndex(m.DBPath())
	if err != nil {
		return fmt.Errorf("member %d: reading the page store: %w", m.ID, err)
	}
	if ci > walLast {
		return fmt.Errorf("member %d: the page store is at index %d, past the WAL's last index %d", m.ID, ci, walLast)
	}
	if ci < snap.Index {
		if _, err := os.Stat(raft.ImagePath(m.SnapDir(), snap.Index)); err != nil {
			return fmt.Errorf("member %d: the page store is at %d, behind the WAL's snapshot at %d, with no image to install: %v", m.ID, ci, snap.Index, err)
		}
	}
	// Every marker: its entry came first, or it is a received snapshot.
	seen := map[uint64]uint64{} // entry index -> term, in file order
	var bad error
	_, err = wal.Iterate(nil, m.WALDir(), func(pos wal.Position, rec wal.Record) error {
		switch rec.Type {
		case wal.TypeEntry:
			e, err := wal.DecodeEntry(rec)
			if err != nil {
				return err
			}
			seen[e.GetIndex()] = e.GetTerm()
		case wal.TypeSnapshot:
			s, err := wal.DecodeSnapshot(rec)
			if err != nil {
				return err
			}
			if s.Index == 0 {
				return nil
			}
			if term, ok := seen[s.Index]; ok && term == s.Term {
				return nil
			}
			if ci >= s.Index || fileExists(raft.ImagePath(m.SnapDir(), s.Index)) {
				return nil // a received snapshot, installed or to install
			}
			if purgedBefore(m.WALDir(), s.Index) {
				return nil
			}
			if bad == nil {
				bad = fmt.Errorf("member %d: the WAL has a snapshot marker at %d (%s offset %d) without entry %d before it", m.ID, s.Index, pos.File, pos.Offset, s.Index)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("member %d: iterating the WAL: %w", m.ID, err)
	}
	return bad
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// purgedBefore reports whether entry index may have been in a purged
// segment: the oldest segment left starts after it.
func purgedBefore(walDir string, index uint64) bool {
	ents, err := os.ReadDir(walDir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		var seq, first uint64
		if _, err := fmt.Sscanf(e.Name(), "%016x-%016x.wal", &seq, &first); err == nil {
			return first > index
		}
	}
	return false
}
