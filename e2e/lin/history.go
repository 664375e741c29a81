package lin

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Op is one recorded operation.
type Op struct {
	Client int // porcupine client id (a new one after each in-doubt op)
	Member string
	In     Input
	Out    Output
	Err    string // non-empty: the client got an error or timed out
	Call   int64  // ns since the history's start
	Return int64
}

// Failed reports whether the client saw an error.
func (o Op) Failed() bool { return o.Err != "" }

// History records operations from many goroutines.
type History struct {
	start time.Time

	mu      sync.Mutex
	ops     []Op
	clients int
}

// NewHistory starts an empty history; timestamps count from now.
func NewHistory() *History { return &History{start: time.Now()} }

// Now is the history's clock (monotonic, ns since NewHistory).
func (h *History) Now() int64 { return int64(time.Since(h.start)) }

// NewClient hands out a fresh porcupine client id.
func (h *History) NewClient() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.clients++
	return h.clients - 1
}

// Add records op.
func (h *History) Add(op Op) {
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

// Ops is a copy of what was recorded, in the order it was added.
func (h *History) Ops() []Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Op(nil), h.ops...)
}

// Prepared is a history ready for porcupine.
type Prepared struct {
	Operations []porcupine.Operation
	InitRev    int64
	// MaxRev is the highest revision any successful response showed.
	MaxRev int64
	// Gaps are the revisions in (InitRev, MaxRev] that no acknowledged
	// write returned and no read showed a value of: only an in-doubt
	// write can have made them.
	Gaps []int64
	// Acked, InDoubt, Pinned, FailedReads count the operations.
	Acked, InDoubt, Pinned, FailedReads int
	// Final is the key space as the last successful Range showed it (the
	// one with the highest revision), and FinalRev its revision; HasFinal
	// is false when no Range succeeded.
	Final    [MaxKeys]KV
	FinalRev int64
	HasFinal bool
	// Phantoms are values some read returned that no operation wrote.
	Phantoms []string
	// pins[i] is Pin for ops[i] (see Input.Pin).
	pins map[int]int64
}

// writtenValues are the (key, value) pairs a write puts when it succeeds.
func writtenValues(in Input) [][2]interface{} {
	switch in.Kind {
	case Put, TxnMod, TxnValue:
		return [][2]interface{}{{in.Key, in.Value}}
	case TxnMulti:
		return [][2]interface{}{{in.Key, in.Value}, {in.Key2, in.Value2}}
	}
	return nil
}

// Prepare turns recorded operations into a porcupine history over the
// key space that started at revision initRev with no keys.
//
// A failed read is dropped: it changed nothing and showed nothing. A
// failed write is kept, in doubt: Unknown, no output, returning after
// everything else (porcupine's way to say it may have taken effect at any
// time after its call, or never). Left at that, the checker tries every
// subset of pending in-doubt writes at every step, which is exponential in
// their number; so Prepare adds what every linearization a correct server
// can produce satisfies anyway, which excludes none of them:
//
//   - An End marker, called and returned after every operation that
//     returned. An in-doubt operation that took effect after the last
//     read, or that changed nothing where it was linearized (a delete of a
//     missing key, a txn whose compare failed), can be moved after the
//     marker in any linearization: nothing observes it there. So the
//     model lets an in-doubt operation change nothing only after End, and
//     lets it do anything there.
//   - Values are unique per write, so a read that returned value v at mod
//     revision m shows that the write of v took effect at revision m: an
//     in-doubt write whose value was seen is pinned to that revision.
//   - Every revision is made by exactly one write. Acknowledged writes
//     return theirs, pinned ones have theirs, so an unpinned in-doubt
//     write that took effect before End did so at one of the remaining
//     revisions up to the highest one observed (Gaps); the model refuses
//     it anywhere else before End.
//
// These constraints only remove linearizations; they cannot make a
// non-linearizable history pass.
func Prepare(ops []Op, initRev int64) *Prepared {
	p := &Prepared{InitRev: initRev, MaxRev: initRev}
	writerOf := map[string]int{} // value -> index in ops
	for i, op := range ops {
		for _, kv := range writtenValues(op.In) {
			writerOf[kv[1].(string)] = i
		}
	}
	claimed := map[int64]bool{}
	pins := map[int]int64{}
	p.pins = pins
	var end int64
	for _, op := range ops {
		end = max(end, op.Call, op.Return)
		if op.Failed() {
			continue
		}
		out := op.Out
		if out.Rev > p.MaxRev {
			p.MaxRev = out.Rev
		}
		if op.In.Kind == Range || (op.In.Kind == TxnMulti && !out.Succeeded) {
			if out.Rev >= p.FinalRev {
				p.Final, p.FinalRev, p.HasFinal = out.KV, out.Rev, true
			}
		}
		wrote := false
		switch op.In.Kind {
		case Put:
			wrote = true
		case Delete:
			wrote = out.Deleted > 0
		case TxnMod, TxnValue, TxnMulti:
			wrote = out.Succeeded
		}
		if wrote {
			claimed[out.Rev] = true
		}
		for _, kv := range out.KV {
			if kv.Mod == 0 {
				continue
			}
			w, ok := writerOf[kv.Value]
			if !ok {
				p.Phantoms = append(p.Phantoms, kv.Value)
				continue
			}
			if ops[w].Failed() {
				if _, seen := pins[w]; !seen {
					pins[w] = kv.Mod
					claimed[kv.Mod] = true
				}
			}
		}
	}
	for r := initRev + 1; r <= p.MaxRev; r++ {
		if !claimed[r] {
			p.Gaps = append(p.Gaps, r)
		}
	}
	gaps := map[int64]bool{}
	for _, r := range p.Gaps {
		gaps[r] = true
	}

	endOp := porcupine.Operation{ClientId: 0, Input: Input{Kind: End}, Call: end + 1, Output: Output{}, Return: end + 1, Metadata: "end marker"}
	for i, op := range ops {
		meta := op.Member
		if op.Failed() {
			meta += ": " + op.Err
			if !op.In.Kind.Writes() {
				p.FailedReads++
				continue
			}
			in := op.In
			in.Unknown = true
			in.Pin = pins[i]
			in.gaps = gaps
			if in.Pin != 0 {
				p.Pinned++
			}
			p.InDoubt++
			p.Operations = append(p.Operations, porcupine.Operation{
				ClientId: op.Client, Input: in, Call: op.Call, Output: Output{}, Return: end + 2, Metadata: meta,
			})
			continue
		}
		p.Acked++
		p.Operations = append(p.Operations, porcupine.Operation{
			ClientId: op.Client, Input: op.In, Call: op.Call, Output: op.Out, Return: op.Return, Metadata: meta,
		})
	}
	sort.SliceStable(p.Operations, func(a, b int) bool { return p.Operations[a].Call < p.Operations[b].Call })
	p.Operations = append(p.Operations, endOp)
	return p
}

// LostWrites checks directly, from the final state, that no acknowledged
// write was lost: after an acknowledged write of key k at revision r, k's
// final mod revision is r or later, or k is missing and a delete of k at a
// later revision is known (acknowledged, pinned) or possible (an in-doubt
// delete and a gap after r). After an acknowledged delete of k at r, k is
// missing or was written after r. Writes after the final read are not
// checked. It returns one line per lost write.
func LostWrites(ops []Op, p *Prepared) []string {
	if !p.HasFinal {
		return nil
	}
	type del struct {
		rev     int64 // 0: in doubt, unpinned
		unknown bool
	}
	deletes := map[int][]del{}
	for i, op := range ops {
		var keys []int
		switch op.In.Kind {
		case Delete:
			if op.Failed() || op.Out.Deleted > 0 {
				keys = []int{op.In.Key}
			}
		case TxnMulti:
			if op.Failed() || op.Out.Succeeded {
				keys = []int{op.In.Del}
			}
		}
		for _, k := range keys {
			d := del{rev: op.Out.Rev}
			if op.Failed() {
				d = del{rev: p.pins[i], unknown: p.pins[i] == 0}
			}
			deletes[k] = append(deletes[k], d)
		}
	}
	gapAfter := func(r int64) bool {
		return len(p.Gaps) > 0 && p.Gaps[len(p.Gaps)-1] > r
	}
	deletedAfter := func(k int, r int64) bool {
		for _, d := range deletes[k] {
			if d.unknown && gapAfter(r) || !d.unknown && d.rev > r {
				return true
			}
		}
		return false
	}
	var lost []string
	for _, op := range ops {
		if op.Failed() {
			continue
		}
		r := op.Out.Rev
		if r > p.FinalRev {
			continue
		}
		switch {
		case op.In.Kind == Delete && op.Out.Deleted > 0:
			if f := p.Final[op.In.Key]; f.Mod != 0 && f.Mod < r {
				lost = append(lost, fmt.Sprintf("%s at rev %d: final k%d=%s is older", DescribeInput(op.In), r, op.In.Key, f))
			}
		case op.In.Kind == Put || (op.In.Kind == TxnMod || op.In.Kind == TxnValue || op.In.Kind == TxnMulti) && op.Out.Succeeded:
			for _, kv := range writtenValues(op.In) {
				k := kv[0].(int)
				f := p.Final[k]
				switch {
				case f.Mod > r, f.Mod == r && f.Value == kv[1].(string):
				case f.Mod == 0 && deletedAfter(k, r):
				default:
					lost = append(lost, fmt.Sprintf("%s acknowledged at rev %d (client %d, %s): final k%d=%s",
						DescribeInput(op.In), r, op.Client, op.Member, k, f))
				}
			}
		}
	}
	return lost
}
