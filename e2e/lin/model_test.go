package lin

import (
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// b builds hand-written histories: initial revision 1, no keys.
type b struct{ ops []Op }

func (h *b) ok(client int, call, ret int64, in Input, out Output) *b {
	h.ops = append(h.ops, Op{Client: client, Member: "m1", In: in, Out: out, Call: call, Return: ret})
	return h
}

func (h *b) fail(client int, call, ret int64, in Input) *b {
	h.ops = append(h.ops, Op{Client: client, Member: "m1", In: in, Err: "context deadline exceeded", Call: call, Return: ret})
	return h
}

func put(k int, v string) Input { return Input{Kind: Put, Key: k, Value: v} }
func get(k int) Input           { return Input{Kind: Get, Key: k} }
func rng() Input                { return Input{Kind: Range} }
func rev(r int64) Output        { return Output{Rev: r} }

// read is a read's output: revision r and the given keys.
func read(r int64, kvs map[int]KV) Output {
	o := Output{Rev: r}
	for k, kv := range kvs {
		o.KV[k] = kv
	}
	return o
}

func kv(v string, create, mod, ver int64) KV { return KV{Value: v, Create: create, Mod: mod, Ver: ver} }

func check(t *testing.T, h *b) *Result {
	t.Helper()
	r := Check(h.ops, 1, 10*time.Second)
	if r.Verdict == porcupine.Unknown {
		t.Fatal("checker timed out")
	}
	return r
}

func wantOK(t *testing.T, h *b) {
	t.Helper()
	if r := check(t, h); !r.OK() {
		t.Fatalf("linearizable history reported %s, lost %q, phantoms %q", r.Verdict, r.Lost, r.Phantoms)
	}
}

func wantViolation(t *testing.T, h *b) *Result {
	t.Helper()
	r := check(t, h)
	if r.Verdict != porcupine.Illegal {
		t.Fatalf("non-linearizable history reported %s", r.Verdict)
	}
	if e := r.Explain(); !strings.Contains(e, "longest linearization") {
		t.Fatalf("Explain: %q", e)
	}
	// The visualization is what a failing run leaves behind: it must render.
	if err := r.Visualize(filepath.Join(t.TempDir(), "v.html")); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestLinearizableHistoryOK(t *testing.T) {
	h := (&b{}).
		ok(0, 0, 10, put(0, "a"), rev(2)).
		ok(1, 5, 15, get(0), read(1, nil)). // concurrent with the put, before it
		ok(2, 12, 20, get(0), read(2, map[int]KV{0: kv("a", 2, 2, 1)})).
		ok(0, 21, 30, Input{Kind: TxnMod, Key: 0, CmpMod: 2, Value: "b"}, Output{Rev: 3, Succeeded: true}).
		ok(1, 22, 25, Input{Kind: Delete, Key: 1}, rev(2)). // concurrent: before the txn, nothing to delete
		ok(2, 31, 40, rng(), read(3, map[int]KV{0: kv("b", 2, 3, 2)})).
		ok(3, 31, 33, Input{Kind: TxnValue, Key: 0, CmpValue: "a", Value: "c"}, read(3, map[int]KV{0: kv("b", 2, 3, 2)})).
		fail(4, 32, 35, put(1, "x")).                 // in doubt, seen below: pinned at 4
		fail(5, 33, 36, Input{Kind: Delete, Key: 2}). // in doubt, a no-op: after the end
		fail(6, 34, 37, put(2, "lost-in-doubt")).     // in doubt, never seen: never applied
		ok(3, 50, 60, rng(), read(4, map[int]KV{0: kv("b", 2, 3, 2), 1: kv("x", 4, 4, 1)})).
		ok(2, 51, 61, Input{Kind: TxnMulti, Key: 1, CmpMod: 4, Value: "m", Key2: 2, Value2: "m/2", Del: 0}, Output{Rev: 5, Succeeded: true}).
		ok(1, 62, 70, rng(), read(5, map[int]KV{1: kv("m", 4, 5, 2), 2: kv("m/2", 5, 5, 1)}))
	wantOK(t, h)
}

// TestStaleReadIsViolation: a read after an acknowledged write returns
// the value before it.
func TestStaleReadIsViolation(t *testing.T) {
	h := (&b{}).
		ok(0, 0, 10, put(0, "a"), rev(2)).
		ok(1, 20, 30, get(0), read(1, nil))
	wantViolation(t, h)
	// The same read concurrent with the put is fine.
	h = (&b{}).
		ok(0, 0, 10, put(0, "a"), rev(2)).
		ok(1, 5, 30, get(0), read(1, nil))
	wantOK(t, h)
}

// TestRevisionMismatchIsViolation: the right value with a header revision
// no write made.
func TestRevisionMismatchIsViolation(t *testing.T) {
	h := (&b{}).
		ok(0, 0, 10, put(0, "a"), rev(2)).
		ok(0, 20, 30, put(0, "b"), rev(3)).
		ok(1, 40, 50, get(0), read(4, map[int]KV{0: kv("b", 2, 3, 2)}))
	wantViolation(t, h)
	// A put acknowledged at a revision that skips one.
	h = (&b{}).
		ok(0, 0, 10, put(0, "a"), rev(2)).
		ok(0, 20, 30, put(1, "b"), rev(4))
	wantViolation(t, h)
	// A delete of a missing key that advances the revision.
	h = (&b{}).ok(0, 0, 10, Input{Kind: Delete, Key: 0}, rev(2))
	wantViolation(t, h)
}

// TestLostWriteIsViolation: an acknowledged write missing from the final
// read is both a violation and a lost write.
func TestLostWriteIsViolation(t *testing.T) {
	h := (&b{}).
		ok(0, 0, 10, put(0, "a"), rev(2)).
		ok(1, 0, 10, put(1, "b"), rev(3)).
		ok(2, 20, 30, rng(), read(3, map[int]KV{1: kv("b", 3, 3, 1)}))
	r := wantViolation(t, h)
	if len(r.Lost) != 1 || !strings.Contains(r.Lost[0], `put(k0, "a")`) {
		t.Fatalf("lost writes: %q", r.Lost)
	}
	// An acknowledged delete undone.
	h = (&b{}).
		ok(0, 0, 10, put(0, "a"), rev(2)).
		ok(0, 20, 30, Input{Kind: Delete, Key: 0}, Output{Rev: 3, Deleted: 1}).
		ok(1, 40, 50, rng(), read(3, map[int]KV{0: kv("a", 2, 2, 1)}))
	if r := wantViolation(t, h); len(r.Lost) != 1 {
		t.Fatalf("lost writes: %q", r.Lost)
	}
}

// TestInDoubtWrites: an in-doubt write may have taken effect, at a
// revision no other write accounts for, or not at all; it may not take a
// revision an acknowledged write returned.
func TestInDoubtWrites(t *testing.T) {
	// Took effect at revision 2, never read, overwritten: the gap it
	// leaves shows in the next write's revision and in the version.
	h := (&b{}).
		fail(0, 0, 5, put(0, "x")).
		ok(1, 10, 20, put(0, "y"), rev(3)).
		ok(1, 30, 40, rng(), read(3, map[int]KV{0: kv("y", 2, 3, 2)}))
	wantOK(t, h)
	// Seen at revision 2 while an acknowledged put returned 2.
	h = (&b{}).
		fail(0, 0, 5, put(0, "x")).
		ok(1, 10, 20, put(1, "y"), rev(2)).
		ok(1, 30, 40, rng(), read(3, map[int]KV{0: kv("x", 2, 2, 1), 1: kv("y", 2, 2, 1)}))
	wantViolation(t, h)
	// Seen before it was called.
	h = (&b{}).
		ok(1, 0, 10, rng(), read(2, map[int]KV{0: kv("x", 2, 2, 1)})).
		fail(0, 20, 25, put(0, "x"))
	wantViolation(t, h)
	// A read shows a value nobody wrote.
	h = (&b{}).ok(1, 0, 10, get(0), read(2, map[int]KV{0: kv("ghost", 2, 2, 1)}))
	if r := wantViolation(t, h); len(r.Phantoms) != 1 {
		t.Fatalf("phantoms: %q", r.Phantoms)
	}
}

// TestManyInDoubtWritesCheckQuickly: in-doubt writes that never took
// effect must not make the search exponential.
func TestManyInDoubtWritesCheckQuickly(t *testing.T) {
	h := &b{}
	for i := 0; i < 60; i++ {
		h.fail(100+i, int64(i), int64(i)+1, put(i%MaxKeys, "doubt-"+strconv.Itoa(i)))
	}
	r := int64(1)
	for i := 0; i < 400; i++ {
		r++
		h.ok(0, int64(100+2*i), int64(101+2*i), put(i%MaxKeys, "v"+strconv.Itoa(i)), rev(r))
	}
	start := time.Now()
	wantOK(t, h)
	t.Logf("60 in-doubt writes and 400 puts checked in %v", time.Since(start))
}

// TestRandomLinearizableHistories: histories made by running generated
// operations on the model itself, with overlapping calls and some writes
// failing (applied or not), must check OK. Prints its seed; STRATA_LIN_SEED
// replays it.
func TestRandomLinearizableHistories(t *testing.T) {
	seed := time.Now().UnixNano()
	if s := os.Getenv("STRATA_LIN_SEED"); s != "" {
		seed, _ = strconv.ParseInt(s, 10, 64)
	}
	t.Logf("seed=%d (STRATA_LIN_SEED replays)", seed)
	r := rand.New(rand.NewSource(seed))
	for n := 0; n < 20; n++ {
		ops := simulate(r, 6, 5, 400)
		res := Check(ops, 1, 30*time.Second)
		if !res.OK() {
			p := filepath.Join(t.TempDir(), "ops.txt")
			_ = WriteOps(p, ops)
			t.Fatalf("history %d: %s lost=%q phantoms=%q", n, res.Verdict, res.Lost, res.Phantoms)
		}
		// The same history with one successful range read answered at
		// the revision before the one it read: no state of the model
		// has those keys at that revision.
		var ranges []int
		for i, op := range ops {
			if op.In.Kind == Range && !op.Failed() && op.Out.Rev > 1 {
				ranges = append(ranges, i)
			}
		}
		bad := append([]Op(nil), ops...)
		i := ranges[r.Intn(len(ranges))]
		bad[i].Out.Rev--
		if res := Check(bad, 1, 30*time.Second); res.Verdict != porcupine.Illegal {
			t.Fatalf("history %d with range %d answered at rev %d: %s", n, i, bad[i].Out.Rev, res.Verdict)
		}
	}
}

// simulate runs clients' generated operations on the model: each op is
// called, takes effect at a later tick (or, for some failed writes,
// never), and returns later still.
type inflight struct {
	op      Op
	applied bool
	drop    bool // a failed write that never took effect
}

func simulate(r *rand.Rand, clients, keys, n int) []Op {
	gens := make([]*Gen, clients)
	cur := make([]*inflight, clients)
	ids := make([]int, clients)
	for i := range gens {
		gens[i] = &Gen{Name: "c" + strconv.Itoa(i), Keys: keys, Mix: DefaultMix, Rand: r}
		ids[i] = i
	}
	next := clients
	st := State{Rev: 1}
	var ops []Op
	for t := int64(1); len(ops) < n || anyInflight(cur); t++ {
		c := r.Intn(clients)
		f := cur[c]
		switch {
		case f == nil && len(ops) < n:
			in := gens[c].Next()
			cur[c] = &inflight{op: Op{Client: ids[c], Member: "m", In: in, Call: t}, drop: in.Kind.Writes() && r.Intn(10) == 0}
		case f == nil:
		case !f.applied:
			f.applied = true
			if !f.drop {
				st, f.op.Out, _ = Apply(st, f.op.In)
			}
		default:
			f.op.Return = t
			if f.drop || f.op.In.Kind.Writes() && r.Intn(20) == 0 {
				f.op.Err, f.op.Out = "in doubt", Output{}
				ids[c], next = next, next+1
			}
			ops = append(ops, f.op)
			gens[c].Saw(f.op)
			cur[c] = nil
		}
	}
	_, out, _ := Apply(st, Input{Kind: Range})
	t := int64(1 << 40)
	return append(ops, Op{Client: next, Member: "m", In: Input{Kind: Range}, Out: out, Call: t, Return: t + 1})
}

func anyInflight(cur []*inflight) bool {
	for _, f := range cur {
		if f != nil {
			return true
		}
	}
	return false
}
