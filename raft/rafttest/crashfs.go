package rafttest

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/strata-db/strata/vfs"
)

// CrashFS is a member's file system: the real one, under a vfs.FaultFS
// that can stop every I/O at once (Crash), as killing the process would.
// It also remembers which bytes of the WAL's segments were written since
// their last fdatasync, and LoseUnsynced overwrites them with zeros
// afterwards: what a power loss may do to the WAL. The page store keeps
// whatever it wrote (it is only ever trusted up to its last synced meta
// page, so keeping more only makes the check stricter), and so do files
// written through the os package directly (received snapshot payloads,
// fsync'd before use).
type CrashFS struct {
	*vfs.FaultFS

	mu sync.Mutex
	// unsynced: WAL segment path -> ranges written since its last sync.
	unsynced map[string][][2]int64
	// crashAfter counts operations down to a crash (0: none armed).
	crashAfter int
	ops        int
	crashedAt  vfs.Event
	// seq, seqPos and seqCrash arm a crash at the seqCrash-th step of a
	// sequence of operations (CrashAtStep).
	seq      []Match
	seqPos   int
	seqCrash int
	// SyncDelay, if set, makes each WAL fdatasync take a random time up
	// to that long (drawn from delay), so followers' acknowledgements
	// can overtake the leader's own write.
	syncDelay func() time.Duration
}

// NewCrashFS returns a CrashFS over the OS file system.
func NewCrashFS() *CrashFS {
	c := &CrashFS{unsynced: map[string][][2]int64{}}
	c.FaultFS = vfs.NewFaultFS(vfs.Default, c.hook)
	return c
}

func isWAL(path string) bool { return strings.HasSuffix(path, ".wal") }

// hook runs before every operation, with the FaultFS's lock held.
func (c *CrashFS) hook(ev vfs.Event) *vfs.Fault {
	c.mu.Lock()
	c.ops++
	crash := c.crashAfter > 0 && c.ops >= c.crashAfter
	if c.seqPos < len(c.seq) && c.seq[c.seqPos].matches(ev) {
		c.seqPos++
		if c.seqPos == c.seqCrash {
			crash = true
			c.crashedAt = ev
		}
	}
	delay := c.syncDelay
	if !crash && isWAL(ev.Path) {
		switch ev.Op {
		case vfs.OpWrite:
			c.unsynced[ev.Path] = append(c.unsynced[ev.Path], [2]int64{ev.Off, ev.Off + int64(ev.Len)})
		case vfs.OpSync:
			delete(c.unsynced, ev.Path)
		case vfs.OpRename, vfs.OpRemove:
			delete(c.unsynced, ev.Path)
		}
	}
	c.mu.Unlock()
	if crash {
		return &vfs.Fault{Crash: true}
	}
	if delay != nil && ev.Op == vfs.OpSync && isWAL(ev.Path) {
		if d := delay(); d > 0 {
			time.Sleep(d) // a slow disk: the hook runs in the syncing goroutine
		}
	}
	return nil
}

// SetSyncDelay makes WAL fdatasyncs slow (nil: full speed).
func (c *CrashFS) SetSyncDelay(d func() time.Duration) {
	c.mu.Lock()
	c.syncDelay = d
	c.mu.Unlock()
}

// CrashAfter arms a crash at the n-th operation from now (n >= 1): that
// operation and every later one fail, and nothing more reaches the disk.
func (c *CrashFS) CrashAfter(n int) {
	c.mu.Lock()
	c.crashAfter = c.ops + max(n, 1)
	c.mu.Unlock()
}

// Match selects file operations: Op, and a path ending in Suffix ("" for
// any path). AnyOp matches every operation.
type Match struct {
	Op     vfs.Op
	Suffix string
}

// AnyOp in a Match matches any operation.
const AnyOp vfs.Op = -1

func (m Match) matches(ev vfs.Event) bool {
	return (m.Op == AnyOp || m.Op == ev.Op) && strings.HasSuffix(ev.Path, m.Suffix)
}

// CrashAtStep arms a crash at an operation picked by a sequence: the
// operations matching seq[0], seq[1], ... are found in that order, and
// the one matching seq[k-1] is the first to fail.
func (c *CrashFS) CrashAtStep(seq []Match, k int) {
	c.mu.Lock()
	c.seq, c.seqPos, c.seqCrash = seq, 0, k
	c.mu.Unlock()
}

// CrashedAt is the operation a CrashAtStep crash fired at.
func (c *CrashFS) CrashedAt() vfs.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.crashedAt
}

// Disarm cancels a crash armed by CrashAfter that has not fired.
func (c *CrashFS) Disarm() {
	c.mu.Lock()
	c.crashAfter = 0
	c.seq = nil
	c.mu.Unlock()
}

// Ops is the number of operations seen so far.
func (c *CrashFS) Ops() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ops
}

// CrashNow crashes at the next operation, which is the same as crashing
// now: nothing happens between.
func (c *CrashFS) CrashNow() { c.CrashAfter(1) }

// LoseUnsynced zeroes the WAL bytes written since their file's last
// fdatasync. Call it once the member's goroutines have stopped.
func (c *CrashFS) LoseUnsynced() (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var lost int64
	for path, ranges := range c.unsynced {
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return lost, err
		}
		for _, r := range ranges {
			z := make([]byte, r[1]-r[0])
			if _, err := f.WriteAt(z, r[0]); err != nil {
				f.Close()
				return lost, fmt.Errorf("rafttest: zeroing %s at %d: %w", path, r[0], err)
			}
			lost += int64(len(z))
		}
		if err := f.Close(); err != nil {
			return lost, err
		}
	}
	clear(c.unsynced)
	return lost, nil
}
