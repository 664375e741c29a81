package mvcc

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"math/rand"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/internal/testseed"
	"github.com/strata-db/strata/pagestore"
)

var seedFlag = flag.Int64("seed", 0, "replay a randomized test with this seed")

func testSeed(t *testing.T) int64 {
	t.Helper()
	if *seedFlag != 0 {
		testseed.Log(t, uint64(*seedFlag), testseed.Env)
		return *seedFlag
	}
	return int64(testseed.Seed(t) >> 1) // non-negative, as rand.NewSource takes it
}

type testStore struct {
	t    testing.TB
	path string
	db   *pagestore.DB
	be   *Backend
	s    *Store
}

func openTestStore(t testing.TB, path string, cfg StoreConfig) *testStore {
	t.Helper()
	db, err := pagestore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	be, err := NewBackend(db, BackendConfig{BatchInterval: 5 * time.Millisecond, BatchLimit: 100})
	if err != nil {
		t.Fatal(err)
	}
	s, err := OpenStore(be, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &testStore{t: t, path: path, db: db, be: be, s: s}
}

func (ts *testStore) close() {
	ts.t.Helper()
	if err := ts.s.Close(); err != nil {
		ts.t.Fatal(err)
	}
	if err := ts.be.Close(); err != nil {
		ts.t.Fatal(err)
	}
	if err := ts.db.Close(); err != nil {
		ts.t.Fatal(err)
	}
}

// modelKV is one key's state in the reference model.
type modelKV struct {
	value                string
	create, mod, version int64
}

// model keeps the full history: states[r] is the keyspace at revision r.
type model struct {
	states     []map[string]modelKV
	compactRev int64
}

// newModel starts at revision 1, as etcd does.
func newModel() *model { return &model{states: []map[string]modelKV{{}, {}}, compactRev: -1} }

func (m *model) rev() int64 { return int64(len(m.states) - 1) }

func (m *model) at(rev int64) map[string]modelKV { return m.states[rev] }

// begin starts a write: a copy of the latest state for the next revision.
func (m *model) begin() map[string]modelKV {
	cur := m.states[len(m.states)-1]
	next := make(map[string]modelKV, len(cur))
	for k, v := range cur {
		next[k] = v
	}
	return next
}

func (m *model) put(st map[string]modelKV, rev int64, key, val string) {
	kv, ok := st[key]
	if ok {
		kv.version++
	} else {
		kv = modelKV{create: rev, version: 1}
	}
	kv.value, kv.mod = val, rev
	st[key] = kv
}

func inRange(k, key, end string) bool {
	switch {
	case end == "":
		return k == key
	case end == "\x00":
		return k >= key
	default:
		return k >= key && k < end
	}
}

func (m *model) rangeKeys(rev int64, key, end string) []string {
	var keys []string
	for k := range m.at(rev) {
		if inRange(k, key, end) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

// opGen makes random requests over a small key space.
type opGen struct {
	rng *rand.Rand
}

func (g *opGen) key() string { return fmt.Sprintf("k%02d", g.rng.Intn(40)) }

func (g *opGen) rangeArgs() (string, string) {
	switch g.rng.Intn(4) {
	case 0:
		return g.key(), ""
	case 1:
		return g.key(), "\x00"
	default:
		a, b := g.key(), g.key()
		if a > b {
			a, b = b, a
		}
		return a, b + "z"
	}
}

func bs(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}

// TestModel runs random puts, deletes, ranges at random revisions, txns,
// compactions and reopens against the store and a reference that keeps
// every revision's full state, comparing every result and error.
//
// With base, the store keeps an index base (indexbase.go) written every
// few hundred records, so reopens open on a base with records since it,
// and compactions run on an index that rests on one.
func TestModel(t *testing.T) {
	for _, base := range []bool{false, true} {
		t.Run(fmt.Sprintf("base=%v", base), func(t *testing.T) { testModel(t, base) })
	}
}

// baseConfig is a StoreConfig that keeps an index base beside path,
// written every `every` records.
func baseConfig(path string, every int) StoreConfig {
	return StoreConfig{IndexBase: path + ".index", IndexBaseEvery: every}
}

func testModel(t *testing.T, base bool) {
	seed := testSeed(t)
	rng := rand.New(rand.NewSource(seed))
	g := &opGen{rng: rng}
	path := filepath.Join(t.TempDir(), "db")
	cfg := StoreConfig{}
	if base {
		cfg = baseConfig(path, 200+rng.Intn(400))
	}
	ts := openTestStore(t, path, cfg)
	defer func() { ts.close() }()
	onBase := 0
	m := newModel()
	ci := uint64(0)
	ops := 50000
	if testing.Short() {
		ops = 10000
	}
	counts := map[string]int{}
	for i := 0; i < ops; i++ {
		p := rng.Intn(100)
		if p < 30 || p >= 35 && p < 45 || p >= 77 && p < 98 {
			ci++ // writes, txns and compactions are applied raft entries
		}
		switch {
		case p < 30:
			counts["put"]++
			key, val := g.key(), modelValue(rng, "v", i)
			resp, err := ts.s.Put(ci, 1, &pb.PutRequest{Key: []byte(key), Value: []byte(val), PrevKv: rng.Intn(2) == 0})
			if err != nil {
				t.Fatalf("op %d put: %v", i, err)
			}
			prev, had := m.at(m.rev())[key]
			st := m.begin()
			m.put(st, m.rev()+1, key, val)
			m.states = append(m.states, st)
			if resp.Header.Revision != m.rev() {
				t.Fatalf("op %d put: revision %d, want %d", i, resp.Header.Revision, m.rev())
			}
			if resp.PrevKv != nil && (!had || string(resp.PrevKv.Value) != prev.value) {
				t.Fatalf("op %d put: prev_kv %v, model had=%v %v", i, resp.PrevKv, had, prev)
			}
		case p < 45:
			counts["delete"]++
			key, end := g.rangeArgs()
			resp, err := ts.s.DeleteRange(ci, 1, &pb.DeleteRangeRequest{Key: []byte(key), RangeEnd: bs(end)})
			if err != nil {
				t.Fatalf("op %d delete: %v", i, err)
			}
			keys := m.rangeKeys(m.rev(), key, end)
			if len(keys) > 0 {
				st := m.begin()
				for _, k := range keys {
					delete(st, k)
				}
				m.states = append(m.states, st)
			}
			if resp.Deleted != int64(len(keys)) || resp.Header.Revision != m.rev() {
				t.Fatalf("op %d delete [%q,%q): deleted %d rev %d, want %d rev %d", i, key, end, resp.Deleted, resp.Header.Revision, len(keys), m.rev())
			}
		case p >= 30 && p < 35, p >= 45 && p < 77:
			counts["range"]++
			checkRange(t, i, ts.s, m, g)
		case p < 95:
			counts["txn"]++
			checkTxn(t, i, ts.s, m, g, ci)
		case p < 98:
			counts["compact"]++
			// Mostly valid targets that lag the head, so old revisions stay
			// readable; sometimes stale or future ones.
			rev := m.compactRev + rng.Int63n(max(1, (m.rev()-m.compactRev)/2+2))
			if rng.Intn(10) == 0 {
				rev = m.rev() + 1
			}
			_, done, err := ts.s.Compact(ci, 1, &pb.CompactionRequest{Revision: rev})
			var want error
			switch {
			case rev <= m.compactRev:
				want = ErrCompacted
			case rev > m.rev():
				want = ErrFutureRev
			}
			if !errors.Is(err, want) && !(err == nil && want == nil) {
				t.Fatalf("op %d compact %d (compacted %d, rev %d): %v, want %v", i, rev, m.compactRev, m.rev(), err, want)
			}
			if err == nil {
				m.compactRev = rev
				if rng.Intn(3) == 0 {
					<-done // sometimes wait for the physical deletion
				}
			}
		case p < 99:
			counts["reopen"]++
			checkRevMeta(t, ts)
			// Half the stops come with no compaction running: such a
			// stop of a store that had a base always leaves one (a
			// compaction stopped part-way may leave none, see
			// indexbase.go).
			idle := rng.Intn(2) == 0
			if idle {
				<-ts.s.compactor.idle()
			}
			hadBase := ts.s.index().Base() != nil
			if idle && hadBase {
				counts["idle reopen"]++
			}
			ts.close()
			ts = openTestStore(t, path, cfg)
			if ts.s.index().Base() != nil {
				onBase++
			} else if idle && hadBase {
				t.Fatalf("op %d: the store stopped with no compaction running did not reopen on an index base", i)
			}
			checkIndexRecords(t, ts)
			if ts.s.Rev() != m.rev() {
				t.Fatalf("op %d reopen: revision %d, want %d", i, ts.s.Rev(), m.rev())
			}
			if ts.s.ConsistentIndex() != ci {
				t.Fatalf("op %d reopen: consistent index %d, want %d", i, ts.s.ConsistentIndex(), ci)
			}
		}
	}
	t.Logf("%d ops %v, final revision %d, compacted at %d; %d reopens on an index base", ops, counts, m.rev(), m.compactRev, onBase)
	if base && onBase < counts["idle reopen"] {
		t.Fatalf("only %d of %d reopens used the index base", onBase, counts["reopen"])
	}
}

func checkRange(t *testing.T, i int, s *Store, m *model, g *opGen) {
	t.Helper()
	key, end := g.rangeArgs()
	rev := int64(0)
	if g.rng.Intn(2) == 0 {
		rev = g.rng.Int63n(m.rev() + 3)
	}
	req := &pb.RangeRequest{Key: []byte(key), RangeEnd: bs(end), Revision: rev}
	if g.rng.Intn(3) == 0 {
		req.Limit = int64(1 + g.rng.Intn(4))
	}
	if g.rng.Intn(5) == 0 {
		req.SortOrder = pb.RangeRequest_DESCEND
		req.SortTarget = pb.RangeRequest_KEY
	}
	if g.rng.Intn(8) == 0 {
		req.CountOnly = true
	} else if g.rng.Intn(6) == 0 {
		req.KeysOnly = true
	}
	// Half the ranges as the gRPC handler serves them: encoded straight
	// from the stored values, then decoded as a client decodes them.
	var resp *pb.RangeResponse
	var err error
	if g.rng.Intn(2) == 0 {
		resp, err = s.Range(req)
	} else {
		resp, err = rangeOverWire(s, req)
	}
	at := rev
	if at == 0 {
		at = m.rev()
	}
	switch {
	case rev > m.rev():
		if !errors.Is(err, ErrFutureRev) {
			t.Fatalf("op %d range at %d > %d: %v, want ErrFutureRev", i, rev, m.rev(), err)
		}
		return
	case rev > 0 && rev < m.compactRev:
		if !errors.Is(err, ErrCompacted) {
			t.Fatalf("op %d range at %d < compacted %d: %v, want ErrCompacted", i, rev, m.compactRev, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("op %d range %q..%q at %d: %v", i, key, end, rev, err)
	}
	keys := m.rangeKeys(at, key, end)
	if req.SortOrder == pb.RangeRequest_DESCEND {
		sort.Sort(sort.Reverse(sort.StringSlice(keys)))
	}
	if resp.Header.Revision != m.rev() || resp.Count != int64(len(keys)) {
		t.Fatalf("op %d range %q..%q at %d: header rev %d count %d, want %d %d", i, key, end, rev, resp.Header.Revision, resp.Count, m.rev(), len(keys))
	}
	if req.CountOnly {
		if len(resp.Kvs) != 0 {
			t.Fatalf("op %d count-only range returned kvs", i)
		}
		return
	}
	more := false
	if req.Limit > 0 && int64(len(keys)) > req.Limit {
		keys, more = keys[:req.Limit], true
	}
	if resp.More != more || len(resp.Kvs) != len(keys) {
		t.Fatalf("op %d range %q..%q at %d limit %d: %d kvs more=%v, want %d more=%v", i, key, end, rev, req.Limit, len(resp.Kvs), resp.More, len(keys), more)
	}
	st := m.at(at)
	for j, k := range keys {
		want := st[k]
		if req.KeysOnly {
			want.value = ""
		}
		checkKV(t, i, resp.Kvs[j], k, want)
	}
}

func checkKV(t *testing.T, i int, kv *mvccpb.KeyValue, key string, want modelKV) {
	t.Helper()
	if string(kv.Key) != key || string(kv.Value) != want.value || kv.CreateRevision != want.create ||
		kv.ModRevision != want.mod || kv.Version != want.version {
		t.Fatalf("op %d: kv %q=%q c=%d m=%d v=%d, want %q=%q c=%d m=%d v=%d", i,
			kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version,
			key, want.value, want.create, want.mod, want.version)
	}
}

// checkTxn runs a txn comparing a key's mod revision or value, with puts,
// deletes and a range in the branches, on distinct keys.
func checkTxn(t *testing.T, i int, s *Store, m *model, g *opGen, ci uint64) {
	t.Helper()
	cmpKey := g.key()
	cur := m.at(m.rev())
	kv, exists := cur[cmpKey]
	var cmp *pb.Compare
	wantOK := false
	if g.rng.Intn(2) == 0 {
		target := kv.mod
		if g.rng.Intn(3) == 0 {
			target++
		}
		cmp = &pb.Compare{Key: []byte(cmpKey), Target: pb.Compare_MOD, Result: pb.Compare_EQUAL,
			TargetUnion: &pb.Compare_ModRevision{ModRevision: target}}
		wantOK = kv.mod == target
	} else {
		val := kv.value
		if g.rng.Intn(3) == 0 {
			val += "x"
		}
		cmp = &pb.Compare{Key: []byte(cmpKey), Target: pb.Compare_VALUE, Result: pb.Compare_EQUAL,
			TargetUnion: &pb.Compare_Value{Value: []byte(val)}}
		wantOK = exists && kv.value == val
	}
	used := map[string]bool{}
	fresh := func() string {
		for {
			k := g.key()
			if !used[k] {
				used[k] = true
				return k
			}
		}
	}
	mk := func() ([]*pb.RequestOp, []func(map[string]modelKV, int64) bool, string) {
		var ops []*pb.RequestOp
		var apply []func(map[string]modelKV, int64) bool
		rk := fresh()
		ops = append(ops, &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte(rk)}}})
		for n := g.rng.Intn(3); n > 0; n-- {
			k := fresh()
			if g.rng.Intn(3) == 0 {
				ops = append(ops, &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(k)}}})
				apply = append(apply, func(st map[string]modelKV, rev int64) bool {
					_, ok := st[k]
					delete(st, k)
					return ok
				})
			} else {
				v := modelValue(g.rng, "t", i)
				ops = append(ops, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(k), Value: []byte(v)}}})
				apply = append(apply, func(st map[string]modelKV, rev int64) bool {
					m.put(st, rev, k, v)
					return true
				})
			}
		}
		return ops, apply, rk
	}
	succ, succApply, succRange := mk()
	fail, failApply, failRange := mk()
	resp, err := s.Txn(ci, 1, &pb.TxnRequest{Compare: []*pb.Compare{cmp}, Success: succ, Failure: fail})
	if err != nil {
		t.Fatalf("op %d txn: %v", i, err)
	}
	apply, rk := succApply, succRange
	if !wantOK {
		apply, rk = failApply, failRange
	}
	if resp.Succeeded != wantOK {
		t.Fatalf("op %d txn: succeeded=%v, want %v (compare %v, model %v exists=%v)", i, resp.Succeeded, wantOK, cmp, kv, exists)
	}
	// The range op runs first, before the branch's writes.
	rr := resp.Responses[0].GetResponseRange()
	want, ok := cur[rk]
	if (len(rr.Kvs) == 1) != ok || (ok && !bytes.Equal(rr.Kvs[0].Value, []byte(want.value))) {
		t.Fatalf("op %d txn range %q: %v, model %v %v", i, rk, rr.Kvs, want, ok)
	}
	st := m.begin()
	changed := false
	for _, f := range apply {
		if f(st, m.rev()+1) {
			changed = true
		}
	}
	if changed {
		m.states = append(m.states, st)
	}
	if resp.Header.Revision != m.rev() {
		t.Fatalf("op %d txn: header revision %d, want %d", i, resp.Header.Revision, m.rev())
	}
}

// modelValue is the value of op i: mostly short, and one in three a few
// hundred bytes to a few KiB that the page store keeps compressed, so
// that ranges, the encoded range and watches read compressed values.
func modelValue(rng *rand.Rand, tag string, i int) string {
	if rng.Intn(3) != 0 {
		return fmt.Sprintf("%s%d", tag, i)
	}
	return fmt.Sprintf("%s%d-%s", tag, i, strings.Repeat("payload-"+tag+" ", 10+rng.Intn(300)))
}

// rangeOverWire is RangeEncoded's response as a client receives it.
func rangeOverWire(s *Store, req *pb.RangeRequest) (*pb.RangeResponse, error) {
	enc, err := s.RangeEncoded(req)
	if err != nil {
		return nil, err
	}
	b, err := proto.Marshal(enc)
	if err != nil {
		return nil, err
	}
	resp := &pb.RangeResponse{}
	if err := proto.Unmarshal(b, resp); err != nil {
		return nil, err
	}
	if len(resp.ProtoReflect().GetUnknown()) != 0 {
		return nil, fmt.Errorf("unknown fields left after decoding: %x", resp.ProtoReflect().GetUnknown())
	}
	return resp, nil
}
