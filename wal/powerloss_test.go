package wal

import (
	"math/rand/v2"
	"strings"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/strata-db/strata/internal/testseed"
	"github.com/strata-db/strata/vfs"
	"github.com/strata-db/strata/vfs/powercut"
)

// TestPowerLossCycles cuts the WAL's power: Saves on a
// vfs.PowerLossFS, the power cut at a random I/O operation (record
// writes, their fdatasync, segment rotation, the spare segment's
// creation, zero-filling and rename, the directory syncs), everything not
// fsync'd thrown away, files and directory entries alike, then Open and
// ReadAll on the real files. Every acknowledged Save must come back; the
// one in flight may come back or not; appends must work after.
func TestPowerLossCycles(t *testing.T) {
	seed := testseed.Seed(t)
	rng := rand.New(rand.NewPCG(seed, seed^0x9fb21c651e98df25))
	cycles := 200
	if testing.Short() {
		cycles = 60
	}
	dir := t.TempDir()
	opts := func(fs vfs.FS) *Options { return &Options{SegmentSize: 8 << 10, FS: fs} }
	var acked uint64 // entries 1..acked are acknowledged
	sizes := map[uint64]int{}
	created, rotations, inflightKept := false, 0, 0
	plan := powerPoints()
	for cycle := 0; cycle < cycles; cycle++ {
		plfs := vfs.NewPowerLossFS(vfs.Default)
		cut := plan.Next(rng, cycle, 40)
		ffs := vfs.NewFaultFS(plfs, func(ev vfs.Event) *vfs.Fault {
			if ev.Op == vfs.OpRename {
				rotations++
			}
			return cut.Hook(ev)
		})
		var w *WAL
		var err error
		if !created && Exist(vfs.Default, dir) {
			// A Create cut at its last directory sync: the WAL may
			// have survived the power loss anyway, and a member
			// starting on this directory opens it, as here.
			created = true
		}
		if !created {
			w, err = Create(dir, []byte("meta"), opts(ffs))
			if err == nil {
				created = true
			}
		} else {
			w, err = Open(dir, Snapshot{}, opts(ffs))
			if err == nil {
				_, _, _, err = w.ReadAll()
			}
		}
		next := acked
		if err == nil {
			for i := 0; i < 30; i++ {
				next = acked + 1
				sizes[next] = 100 + rng.IntN(900)
				if err := w.Save(mkState(1, acked), []*raftpb.Entry{mkEntry(next, 1, sizes[next])}); err != nil {
					break
				}
				acked = next
			}
			w.Close()
		}
		crashAt := cut.At
		plfs.Crash()
		if _, _, err := plfs.Recover(); err != nil {
			t.Fatalf("cycle %d: recover: %v", cycle, err)
		}
		if !created {
			continue // the power went before the WAL existed
		}
		w, err = Open(dir, Snapshot{}, opts(nil))
		if err != nil {
			// A create cut before its directory sync leaves no WAL.
			if cycle == 0 || acked == 0 {
				created = false
				continue
			}
			t.Fatalf("cycle %d (power cut at operation %d): open: %v", cycle, crashAt, err)
		}
		_, _, ents, err := w.ReadAll()
		w.Close()
		if err != nil {
			t.Fatalf("cycle %d (power cut at operation %d): read: %v", cycle, crashAt, err)
		}
		got := uint64(len(ents))
		switch {
		case got == acked:
		case got == acked+1 && next == acked+1:
			acked++ // the Save in flight made it
			inflightKept++
		default:
			t.Fatalf("cycle %d (power cut at operation %d): %d entries after the power loss, %d acknowledged", cycle, crashAt, got, acked)
		}
		for i, e := range ents {
			if idx := uint64(i) + 1; e.GetIndex() != idx || string(e.GetData()) != string(entryData(idx, sizes[idx])) {
				t.Fatalf("cycle %d: entry %d came back as index %d with other bytes", cycle, idx, e.GetIndex())
			}
		}
	}
	points, err := plan.Summary()
	t.Logf("POWER-LOSS wal: %d cycles, %d entries acknowledged and all back, %d renames (rotations and spares) in the runs; cuts: %s; Save in flight kept %d times; acknowledged entries lost 0",
		cycles, acked, rotations, points, inflightKept)
	if err != nil {
		t.Fatal(err)
	}
}

// powerPoints are the named points of the WAL where the power-loss test
// cuts: a record write (before its fdatasync), the fdatasync, the spare
// segment's preallocation (its creation, fallocate or zero fill), and
// segment rotation (the renames and directory syncs that make a spare the
// next segment).
func powerPoints() *powercut.Plan {
	spare := func(ev vfs.Event) bool { return strings.HasSuffix(ev.Path, tmpSuffix) }
	return &powercut.Plan{Points: []powercut.Point{
		{Name: "record write before its fdatasync", Match: func(ev vfs.Event) bool { return ev.Op == vfs.OpWrite && !spare(ev) }},
		{Name: "fdatasync", Match: func(ev vfs.Event) bool { return ev.Op == vfs.OpSync && !spare(ev) }},
		{Name: "preallocation", Match: func(ev vfs.Event) bool {
			return ev.Op == vfs.OpPreallocate || (spare(ev) && (ev.Op == vfs.OpOpen || ev.Op == vfs.OpWrite || ev.Op == vfs.OpTruncate || ev.Op == vfs.OpSync))
		}},
		{Name: "segment rotation", Match: func(ev vfs.Event) bool { return ev.Op == vfs.OpRename || ev.Op == vfs.OpSyncDir }},
	}}
}
