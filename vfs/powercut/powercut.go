// Package powercut chooses where a power-loss test cuts the power: at a
// random I/O operation, or at a named point (the first operation of a
// kind after a random number of operations), and counts the cuts per
// point so a test can print that every named point was reached.
package powercut

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"

	"github.com/strata-db/strata/vfs"
)

// Point is a named kind of operation to cut at. Match sees every
// operation in order (so it may keep state, such as the kind of the last
// write) and reports whether this one is of its kind.
type Point struct {
	Name  string
	Match func(ev vfs.Event) bool
}

// Plan alternates, cycle by cycle, a random cut and a cut at each named
// point in turn.
type Plan struct {
	Points []Point
	counts map[string]int // cuts per point
	chosen map[string]int // cycles that aimed at each point
}

// Random names a cut at a random operation.
const Random = "random"

// Cycle is one cycle's choice. Hook is the vfs.FaultFS hook to install;
// after the cycle, Cut names where the power went ("" if the cycle ended
// first) and At is the operation's number.
type Cycle struct {
	plan  *Plan
	name  string
	point *Point
	after int
	n     int
	Cut   string
	At    int
}

// Next chooses the cut of cycle number i: even cycles a random operation
// in 1..maxOp; odd cycles the next named point, at its first operation
// after a random 0..maxOp-1 others.
func (p *Plan) Next(rng *rand.Rand, i, maxOp int) *Cycle {
	if p.counts == nil {
		p.counts, p.chosen = map[string]int{}, map[string]int{}
	}
	c := &Cycle{plan: p, name: Random, after: rng.IntN(maxOp)}
	if i%2 == 1 && len(p.Points) > 0 {
		c.point = &p.Points[(i/2)%len(p.Points)]
		c.name = c.point.Name
	}
	p.chosen[c.name]++
	return c
}

// Hook is the fault hook: it returns a crash at the chosen operation.
func (c *Cycle) Hook(ev vfs.Event) *vfs.Fault {
	c.n++
	hit := false
	for i := range c.plan.Points {
		// Every matcher sees every operation, to keep its state.
		if m := c.plan.Points[i].Match(ev); m && c.point == &c.plan.Points[i] {
			hit = true
		}
	}
	if c.Cut != "" {
		return nil
	}
	if c.point == nil {
		hit = c.n == c.after+1
	}
	if hit && c.n > c.after {
		c.Cut, c.At = c.name, c.n
		c.plan.counts[c.name]++
		return &vfs.Fault{Crash: true}
	}
	return nil
}

// Ops is the number of operations the cycle saw.
func (c *Cycle) Ops() int { return c.n }

// Summary lists the cuts per point, named points in their order, then
// the random ones and the cycles that ended before their cut. It fails
// if a named point that at least three cycles aimed at was never reached
// (with fewer, a short run may not have come to it).
func (p *Plan) Summary() (string, error) {
	var parts, missing []string
	ended := 0
	for _, pt := range p.Points {
		parts = append(parts, fmt.Sprintf("%s %d", pt.Name, p.counts[pt.Name]))
		if p.counts[pt.Name] == 0 && p.chosen[pt.Name] >= 3 {
			missing = append(missing, pt.Name)
		}
		ended += p.chosen[pt.Name] - p.counts[pt.Name]
	}
	ended += p.chosen[Random] - p.counts[Random]
	parts = append(parts, fmt.Sprintf("%s %d", Random, p.counts[Random]))
	if ended > 0 {
		parts = append(parts, fmt.Sprintf("cycles that ended before their cut %d (cut after the stop)", ended))
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return strings.Join(parts, ", "), fmt.Errorf("no cut reached the named points %s", strings.Join(missing, ", "))
	}
	return strings.Join(parts, ", "), nil
}
