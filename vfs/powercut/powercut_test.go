package powercut

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/strata-db/strata/vfs"
)

func TestPlanCutsAtNamedPointsAndCounts(t *testing.T) {
	p := &Plan{Points: []Point{
		{Name: "sync", Match: func(ev vfs.Event) bool { return ev.Op == vfs.OpSync }},
		{Name: "rename", Match: func(ev vfs.Event) bool { return ev.Op == vfs.OpRename }},
	}}
	rng := rand.New(rand.NewPCG(1, 2))
	ops := []vfs.Op{vfs.OpWrite, vfs.OpWrite, vfs.OpSync, vfs.OpWrite, vfs.OpRename, vfs.OpSync, vfs.OpWrite, vfs.OpRename}
	for i := 0; i < 8; i++ {
		c := p.Next(rng, i, 3)
		for _, op := range ops {
			f := c.Hook(vfs.Event{Op: op})
			if f != nil {
				if !f.Crash {
					t.Fatal("a cut that is not a crash")
				}
				if c.Cut != Random && ops[c.At-1] != map[string]vfs.Op{"sync": vfs.OpSync, "rename": vfs.OpRename}[c.Cut] {
					t.Fatalf("cycle %d: cut %q at operation %d (%s)", i, c.Cut, c.At, ops[c.At-1])
				}
			}
		}
		if c.Cut == "" {
			t.Fatalf("cycle %d: no cut in %d operations", i, len(ops))
		}
	}
	sum, err := p.Summary()
	if err != nil || !strings.Contains(sum, "sync 2") || !strings.Contains(sum, "rename 2") || !strings.Contains(sum, "random 4") {
		t.Fatalf("summary %q, %v", sum, err)
	}
	// A point aimed at three times and never reached fails the summary.
	q := &Plan{Points: []Point{{Name: "never", Match: func(vfs.Event) bool { return false }}}}
	for i := 0; i < 6; i++ {
		c := q.Next(rng, i, 3)
		for _, op := range ops {
			c.Hook(vfs.Event{Op: op})
		}
	}
	if _, err := q.Summary(); err == nil || !strings.Contains(err.Error(), "never") {
		t.Fatalf("an unreached point passed the summary: %v", err)
	}
}
