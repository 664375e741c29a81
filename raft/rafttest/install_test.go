package rafttest

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/strata-db/strata/mvcc"
	"github.com/strata-db/strata/raft"
	"github.com/strata-db/strata/vfs"
	"github.com/strata-db/strata/wal"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of the transcripts in testdata")

// installSteps are the file operations of installing a received snapshot
// on a follower, in order (raft's package doc, "Installing a leader's
// snapshot"); crash-install crashes at one of them.
var installSteps = []struct {
	name string
	m    Match
}{
	{"image-rename", Match{vfs.OpRename, raft.ImagePartSuffix}}, // payload -> <index>.snap.db
	{"image-dirsync", Match{vfs.OpSyncDir, "snap"}},
	{"marker-write", Match{vfs.OpWrite, ".wal"}}, // the snapshot marker
	{"marker-sync", Match{vfs.OpSync, ".wal"}},
	// The hard state, which only moves the commit index to the
	// snapshot's: raft.MustSync says no fdatasync (a restart derives the
	// commit index from the marker).
	{"hardstate-write", Match{vfs.OpWrite, ".wal"}},
	{"db-rename", Match{vfs.OpRename, ".snap.db"}}, // the image over the page store
	{"db-dirsync", Match{vfs.OpSyncDir, "snap"}},
	{"db-reopen", Match{vfs.OpOpen, "db"}},
	{"after-install", Match{AnyOp, ""}}, // the next operation after the reopen
}

// TestInstallCrashPoints runs testdata/install_crash.txt: each block is a
// command, "----", and what it must print, ended by a blank line;
// -rewrite regenerates the outputs. The command
//
//	crash-install at=STEP
//
// starts three members, stops one, writes until the others have compacted
// their logs past it, and restarts it with a crash armed at STEP of the
// install of the snapshot it then receives. It prints what the crash left
// on disk, whether the restart finished the install from the waiting
// image, and how the member then caught up. The checks that must hold at
// every step (CheckDisk after the crash, a restart Start accepts, the same
// contents as the leader afterwards) fail the test directly.
func TestInstallCrashPoints(t *testing.T) {
	path := filepath.Join("testdata", "install_crash.txt")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	lines := strings.Split(string(data), "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			if i < len(lines)-1 || line != "" {
				out.WriteString(line + "\n")
			}
			continue
		}
		if i+1 >= len(lines) || lines[i+1] != "----" {
			t.Fatalf("%s:%d: command without ----", path, i+1)
		}
		start := i + 1
		i += 2
		var want []string
		for ; i < len(lines) && lines[i] != ""; i++ {
			want = append(want, lines[i])
		}
		got := runInstallCommand(t, line)
		out.WriteString(line + "\n----\n" + got + "\n")
		if i < len(lines) {
			out.WriteString("\n")
		}
		if !*rewrite && got != strings.Join(want, "\n") {
			t.Errorf("%s:%d: %s\n got:\n%s\nwant:\n%s", path, start, line, got, strings.Join(want, "\n"))
		}
	}
	if *rewrite {
		if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func runInstallCommand(t *testing.T, line string) string {
	t.Helper()
	f := strings.Fields(line)
	if len(f) != 2 || f[0] != "crash-install" || !strings.HasPrefix(f[1], "at=") {
		t.Fatalf("unknown command %q (want crash-install at=STEP)", line)
	}
	step := -1
	for i, s := range installSteps {
		if s.name == strings.TrimPrefix(f[1], "at=") {
			step = i + 1
		}
	}
	if step < 0 {
		t.Fatalf("%q: no such install step", line)
	}
	var out []string
	t.Run(strings.TrimPrefix(f[1], "at="), func(t *testing.T) {
		out = crashInstall(t, step)
	})
	return strings.Join(out, "\n")
}

// crashInstall is one crash-install command.
func crashInstall(t *testing.T, step int) []string {
	c := NewCluster(t, Options{N: 3, Seed: uint64(step), SnapshotCount: 10, CatchUpEntries: 5})
	if _, err := c.ProposeAndWait([]byte("first"), 20*time.Second); err != nil {
		t.Fatal(err)
	}
	lagger := c.Members[2]
	if lagger == c.Leader() {
		lagger = c.Members[1]
	}
	// The lagger takes no snapshot of its own, so the only WAL writes
	// during the install are the install's.
	lagger.SnapshotCount = 1 << 40
	if err := c.Crash(lagger); err != nil {
		t.Fatal(err)
	}
	before, err := wal.LastSnapshot(nil, lagger.WALDir())
	if err != nil {
		t.Fatal(err)
	}
	var last uint64
	for i := 0; i < 40; i++ {
		if last, err = c.ProposeAndWait([]byte(fmt.Sprintf("v%d", i)), 20*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	seq := make([]Match, len(installSteps))
	for i, s := range installSteps {
		seq[i] = s.m
	}
	lagger.BeforeStart = func(fs *CrashFS) { fs.CrashAtStep(seq, step) }
	if err := c.Restart(lagger); err != nil {
		t.Fatal(err)
	}
	lagger.BeforeStart = nil
	// Wait for the armed crash; later writes give the last step (any
	// operation after the install) an operation to fail.
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; !lagger.FS.Crashed(); i++ {
		if time.Now().After(deadline) {
			t.Fatalf("the member never reached install step %d (%s)", step, installSteps[step-1].name)
		}
		if l := c.Leader(); l != nil && lagger.SM.Restores() > 0 {
			_ = c.ProposeAsync(l, []byte(fmt.Sprintf("w%d", i)))
		}
		waitAny([]<-chan struct{}{c.Net.Delivery()}, 5*time.Millisecond)
	}
	ev := lagger.FS.CrashedAt()
	out := []string{fmt.Sprintf("crashed at: %s (%s %s)", installSteps[step-1].name, ev.Op, kindOf(ev.Path))}
	if err := c.Crash(lagger); err != nil {
		t.Fatal(err)
	}
	after, err := wal.LastSnapshot(nil, lagger.WALDir())
	if err != nil {
		t.Fatal(err)
	}
	ci, err := mvcc.ImageIndex(lagger.DBPath())
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case after.Index == before.Index:
		out = append(out, "after the crash: the WAL has no marker for the snapshot; the page store is the old state")
	case ci == after.Index:
		out = append(out, "after the crash: the WAL has the snapshot's marker; the page store is at the snapshot")
	case ci < after.Index:
		_, statErr := os.Stat(raft.ImagePath(lagger.SnapDir(), after.Index))
		out = append(out, fmt.Sprintf("after the crash: the WAL has the snapshot's marker; the page store is behind it; image waiting: %v", statErr == nil))
	default:
		t.Fatalf("page store at %d past the WAL's snapshot %d", ci, after.Index)
	}
	if err := c.Restart(lagger); err != nil {
		t.Fatal(err)
	}
	out = append(out, fmt.Sprintf("restart: ok; install finished at start: %v", lagger.SM.Restores() > 0))
	atStart := lagger.SM.Restores()
	if last, err = c.ProposeAndWait([]byte("last"), 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitApplied(last, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := c.CheckConverged(last); err != nil {
		t.Fatal(err)
	}
	left, _ := filepath.Glob(filepath.Join(lagger.SnapDir(), "*.snap.db*"))
	if len(left) > 0 {
		t.Fatalf("image files left after the catch-up: %v", left)
	}
	if after.Index == before.Index {
		// The member forgot the snapshot: the leader must send it again
		// (its log no longer holds the entries the member lacks).
		if lagger.SM.Restores()-atStart == 0 {
			t.Fatal("the member caught up without the snapshot it had not recorded")
		}
		out = append(out, "catch-up: the leader's snapshot installed again; contents equal the leader's; no image files left")
	} else {
		out = append(out, "catch-up: contents equal the leader's; no image files left")
	}
	return out
}

// kindOf names the file an operation touched without its run-specific
// parts (indexes, random suffixes).
func kindOf(path string) string {
	base := filepath.Base(path)
	switch {
	case strings.HasSuffix(base, raft.ImagePartSuffix):
		return "received payload"
	case strings.HasSuffix(base, ".snap.db"):
		return "image"
	case strings.HasSuffix(base, ".wal"):
		return "WAL segment"
	case base == "db":
		return "page store"
	case base == "snap":
		return "snapshot directory"
	}
	return base
}
