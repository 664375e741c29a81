// Package lin checks that histories of etcd KV operations (get, put,
// delete, txn) recorded against a cluster are linearizable, at the level of
// values and of revisions, with porcupine.
//
// The model is etcd's MVCC key space reduced to a few keys: a global
// revision counter and, per key, the value with its create revision, mod
// revision and version. Every operation's observable result is the model's
// result: a get returns the header revision of the state it read and the
// key's value, mod revision, create revision and version; a put, a
// successful txn or a delete of an existing key advances the revision by
// one and returns it; a delete of a missing key and a txn whose compare
// fails leave the revision where it is and return it. So a stale read, a
// lost or reordered write and a revision that moves without a write are
// all violations, not only a wrong value.
//
// Operations whose outcome the client does not know (an error or a
// timeout: "in doubt") are kept in the history as possibly applied, with
// no output and a return time after everything else, as porcupine
// expects. Prepare (history.go) narrows where one may be linearized
// without excluding any linearization a correct server can produce; see
// its comment for the argument.
package lin

import (
	"fmt"
	"strings"

	"github.com/anishathalye/porcupine"
)

// MaxKeys bounds the key set; keys are "/lin/0" … "/lin/7".
const MaxKeys = 8

// Prefix is the common prefix of the keys; a Range reads all of them.
const Prefix = "/lin/"

// KeyName is the etcd key of key index i.
func KeyName(i int) string { return fmt.Sprintf("%s%d", Prefix, i) }

// Kind is an operation type.
type Kind uint8

const (
	// Get is a linearizable Range of one key.
	Get Kind = iota
	// Range is a linearizable Range of the whole prefix.
	Range
	// Put writes Value to Key.
	Put
	// Delete deletes Key.
	Delete
	// TxnMod is If(ModRevision(Key) = CmpMod) Then(Put(Key, Value)) Else(Get(Key)).
	TxnMod
	// TxnValue is If(Value(Key) = CmpValue) Then(Put(Key, Value)) Else(Get(Key)).
	TxnValue
	// TxnMulti is If(ModRevision(Key) = CmpMod) Then(Put(Key, Value),
	// Put(Key2, Value2), Delete(Del)) Else(Range of the prefix): one
	// revision for three writes.
	TxnMulti
	// End marks the end of the history (see Prepare); it is not sent.
	End
)

var kindNames = [...]string{"get", "range", "put", "delete", "txn-mod", "txn-value", "txn-multi", "end"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", k)
}

// Writes reports whether an operation of kind k may change the key space.
func (k Kind) Writes() bool { return k >= Put && k <= TxnMulti }

// KV is one key's state. Mod == 0 means the key does not exist.
type KV struct {
	Value  string
	Create int64
	Mod    int64
	Ver    int64
}

func (kv KV) String() string {
	if kv.Mod == 0 {
		return "∅"
	}
	return fmt.Sprintf("%q@%d(c%d,v%d)", kv.Value, kv.Mod, kv.Create, kv.Ver)
}

// Input is an operation as invoked.
type Input struct {
	Kind     Kind
	Key      int
	Value    string
	Key2     int    // TxnMulti: the second put
	Value2   string // TxnMulti
	Del      int    // TxnMulti: the key deleted
	CmpMod   int64  // TxnMod, TxnMulti
	CmpValue string // TxnValue

	// Unknown marks an operation whose outcome the client does not know:
	// it may have been applied or not, and its output is not checked.
	Unknown bool
	// Pin, for an Unknown write, is the revision at which a read showed
	// one of its values (0: none did). Set by Prepare.
	Pin int64
	// gaps, for an Unknown write, are the revisions no acknowledged or
	// pinned write accounts for. Set by Prepare.
	gaps map[int64]bool
}

// Output is what the client saw. Reads fill KV at the index of each key
// they returned; a key not returned stays zero.
type Output struct {
	Rev       int64 // response header revision
	Succeeded bool  // txns
	Deleted   int64 // Delete
	KV        [MaxKeys]KV
	// Bad describes a response the model cannot represent (a key outside
	// the key set, two kvs for one key); it never matches the model.
	Bad string
}

// State is the model state: a value, so porcupine's cache can compare
// and copy it freely.
type State struct {
	Rev int64
	// End is set by the End marker; after it only in-doubt operations run.
	End bool
	KV  [MaxKeys]KV
}

func (s *State) put(k int, v string, rev int64) {
	old := s.KV[k]
	n := KV{Value: v, Mod: rev, Create: rev, Ver: 1}
	if old.Mod != 0 {
		n.Create, n.Ver = old.Create, old.Ver+1
	}
	s.KV[k] = n
}

// Apply runs in on s as etcd would and returns the new state, the output
// and whether the operation wrote (advanced the revision).
func Apply(s State, in Input) (State, Output, bool) {
	var out Output
	wrote := false
	switch in.Kind {
	case Get:
		out.KV[in.Key] = s.KV[in.Key]
	case Range:
		out.KV = s.KV
	case Put:
		s.Rev++
		s.put(in.Key, in.Value, s.Rev)
		wrote = true
	case Delete:
		if s.KV[in.Key].Mod != 0 {
			s.Rev++
			s.KV[in.Key] = KV{}
			out.Deleted = 1
			wrote = true
		}
	case TxnMod, TxnValue:
		cur := s.KV[in.Key]
		ok := cur.Mod == in.CmpMod
		if in.Kind == TxnValue {
			// etcd: a value compare on a missing key is false.
			ok = cur.Mod != 0 && cur.Value == in.CmpValue
		}
		if ok {
			s.Rev++
			s.put(in.Key, in.Value, s.Rev)
			wrote = true
		} else {
			out.KV[in.Key] = cur
		}
		out.Succeeded = ok
	case TxnMulti:
		if s.KV[in.Key].Mod == in.CmpMod {
			s.Rev++
			s.put(in.Key, in.Value, s.Rev)
			s.put(in.Key2, in.Value2, s.Rev)
			s.KV[in.Del] = KV{}
			out.Succeeded = true
			wrote = true
		} else {
			out.KV = s.KV
		}
	case End:
		s.End = true
	}
	out.Rev = s.Rev
	return s, out, wrote
}

// step is the model's step function.
func step(state, input, output interface{}) (bool, interface{}) {
	s := state.(State)
	in := input.(Input)
	if in.Kind == End {
		if s.End {
			return false, nil
		}
		s.End = true
		return true, s
	}
	ns, got, wrote := Apply(s, in)
	if in.Unknown {
		switch {
		case s.End:
			// After the end marker anything may still happen: nothing
			// observes it.
			return in.Pin == 0, ns
		case !wrote:
			// An in-doubt operation that changes nothing is moved after
			// the end marker (see Prepare).
			return false, nil
		case in.Pin != 0:
			return ns.Rev == in.Pin, ns
		default:
			return in.gaps[ns.Rev], ns
		}
	}
	if s.End {
		return false, nil
	}
	return got == output.(Output), ns
}

// NewModel is the model of a key space whose revision is initRev and
// whose keys do not exist.
func NewModel(initRev int64) porcupine.Model {
	return porcupine.Model{
		Init:  func() interface{} { return State{Rev: initRev} },
		Step:  step,
		Equal: func(a, b interface{}) bool { return a.(State) == b.(State) },
		Hash: func(st interface{}) uint64 {
			s := st.(State)
			h := uint64(s.Rev)
			for _, kv := range s.KV {
				h = h*1000003 ^ uint64(kv.Mod)
			}
			if s.End {
				h = ^h
			}
			return h
		},
		DescribeOperation:         describeOp,
		DescribeState:             describeState,
		DescribeOperationMetadata: func(m interface{}) string { s, _ := m.(string); return s },
	}
}

func describeState(st interface{}) string {
	s := st.(State)
	var b strings.Builder
	fmt.Fprintf(&b, "rev %d", s.Rev)
	if s.End {
		b.WriteString(" (end)")
	}
	for i, kv := range s.KV {
		if kv.Mod != 0 {
			fmt.Fprintf(&b, " k%d=%s", i, kv)
		}
	}
	return b.String()
}

// DescribeInput is in, readably.
func DescribeInput(in Input) string {
	var s string
	switch in.Kind {
	case Get:
		s = fmt.Sprintf("get(k%d)", in.Key)
	case Range:
		s = "range()"
	case Put:
		s = fmt.Sprintf("put(k%d, %q)", in.Key, in.Value)
	case Delete:
		s = fmt.Sprintf("delete(k%d)", in.Key)
	case TxnMod:
		s = fmt.Sprintf("if mod(k%d)=%d put(k%d, %q) else get(k%d)", in.Key, in.CmpMod, in.Key, in.Value, in.Key)
	case TxnValue:
		s = fmt.Sprintf("if value(k%d)=%q put(k%d, %q) else get(k%d)", in.Key, in.CmpValue, in.Key, in.Value, in.Key)
	case TxnMulti:
		s = fmt.Sprintf("if mod(k%d)=%d {put(k%d, %q) put(k%d, %q) delete(k%d)} else range()",
			in.Key, in.CmpMod, in.Key, in.Value, in.Key2, in.Value2, in.Del)
	case End:
		return "end of history"
	}
	return s
}

// DescribeOutput is out for an operation of kind in.Kind, readably.
func DescribeOutput(in Input, out Output) string {
	var b strings.Builder
	fmt.Fprintf(&b, "rev %d", out.Rev)
	if out.Bad != "" {
		fmt.Fprintf(&b, " BAD %s", out.Bad)
	}
	reads := func() {
		for i, kv := range out.KV {
			if kv.Mod != 0 || (in.Kind == Get || in.Kind == TxnMod || in.Kind == TxnValue) && i == in.Key {
				fmt.Fprintf(&b, " k%d=%s", i, kv)
			}
		}
	}
	switch in.Kind {
	case Get, Range:
		reads()
	case Delete:
		fmt.Fprintf(&b, " deleted %d", out.Deleted)
	case TxnMod, TxnValue, TxnMulti:
		if out.Succeeded {
			b.WriteString(" succeeded")
		} else {
			b.WriteString(" failed")
			reads()
		}
	}
	return b.String()
}

func describeOp(input, output interface{}) string {
	in := input.(Input)
	if in.Kind == End {
		return DescribeInput(in)
	}
	if in.Unknown {
		pin := ""
		if in.Pin != 0 {
			pin = fmt.Sprintf(", seen at rev %d", in.Pin)
		}
		return fmt.Sprintf("%s -> ? (in doubt%s)", DescribeInput(in), pin)
	}
	return DescribeInput(in) + " -> " + DescribeOutput(in, output.(Output))
}
