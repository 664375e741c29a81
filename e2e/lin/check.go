package lin

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Result is the verdict on one history.
type Result struct {
	*Prepared
	// Verdict is porcupine's: Ok, Illegal, or Unknown (timed out).
	Verdict porcupine.CheckResult
	Info    porcupine.LinearizationInfo
	// Lost lists acknowledged writes missing from the final state.
	Lost    []string
	Elapsed time.Duration
	model   porcupine.Model
}

// Check prepares ops (see Prepare) and checks them with porcupine, giving
// up after timeout (Verdict Unknown), and checks the final state for lost
// writes directly (LostWrites).
func Check(ops []Op, initRev int64, timeout time.Duration) *Result {
	start := time.Now()
	p := Prepare(ops, initRev)
	r := &Result{Prepared: p, model: NewModel(initRev)}
	r.Verdict, r.Info = porcupine.CheckOperationsVerbose(r.model, p.Operations, timeout)
	r.Lost = LostWrites(ops, p)
	r.Elapsed = time.Since(start)
	return r
}

// Violations is 1 if the history is not linearizable, else 0.
func (r *Result) Violations() int {
	if r.Verdict == porcupine.Illegal {
		return 1
	}
	return 0
}

// OK reports a linearizable history with no lost write and no phantom value.
func (r *Result) OK() bool {
	return r.Verdict == porcupine.Ok && len(r.Lost) == 0 && len(r.Phantoms) == 0
}

// Explain says where the checker got stuck, for a log: how far the
// longest linearization it found goes, its last operations and the state
// they leave, and the operations that return first among those it could
// not add.
func (r *Result) Explain() string {
	if r.Verdict != porcupine.Illegal {
		return ""
	}
	var longest []porcupine.Operation
	for _, part := range r.Info.PartialLinearizationsOperations() {
		for _, l := range part {
			if len(l) > len(longest) {
				longest = l
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "longest linearization: %d of %d operations\n", len(longest), len(r.Operations))
	st := r.model.Init()
	for i, op := range longest {
		_, st = r.model.Step(st, op.Input, op.Output)
		if i >= len(longest)-5 {
			fmt.Fprintf(&b, "  linearized: %s [%s]\n", describeOp(op.Input, op.Output), op.Metadata)
		}
	}
	fmt.Fprintf(&b, "  state then: %s\n", describeState(st))
	in := map[[2]int64]bool{}
	for _, op := range longest {
		in[[2]int64{op.Call, int64(op.ClientId)}] = true
	}
	var rest []porcupine.Operation
	for _, op := range r.Operations {
		if !in[[2]int64{op.Call, int64(op.ClientId)}] {
			rest = append(rest, op)
		}
	}
	sort.SliceStable(rest, func(a, b int) bool { return rest[a].Return < rest[b].Return })
	for i, op := range rest {
		if i == 5 {
			break
		}
		fmt.Fprintf(&b, "  not linearizable next: %s [%s, %.6f-%.6f s]\n", describeOp(op.Input, op.Output), op.Metadata,
			float64(op.Call)/1e9, float64(op.Return)/1e9)
	}
	return b.String()
}

// Visualize writes porcupine's HTML view of the history and of the
// longest linearizations it found to path.
func (r *Result) Visualize(path string) error {
	return porcupine.VisualizePath(r.model, r.Info, path)
}

// WriteOps writes one line per recorded operation to path, in call order:
// the raw material behind a verdict.
func WriteOps(path string, ops []Op) error {
	ops = append([]Op(nil), ops...)
	sort.SliceStable(ops, func(a, b int) bool { return ops[a].Call < ops[b].Call })
	var b strings.Builder
	for _, op := range ops {
		res := "-> " + DescribeOutput(op.In, op.Out)
		if op.Failed() {
			res = "-> error: " + op.Err
		}
		fmt.Fprintf(&b, "%12.6f %12.6f client=%d %s %s %s\n", float64(op.Call)/1e9, float64(op.Return)/1e9,
			op.Client, op.Member, DescribeInput(op.In), res)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
