package lin

import (
	"strings"
	"testing"
)

// A small history: /lin/0 created at 2, changed at 3; a txn writes /lin/1
// and /lin/2 at 4; /lin/0 deleted at 5.
func watchFixture() (ref []WatchEvent, final [MaxKeys]KV, ops []Op) {
	ref = []WatchEvent{
		{Rev: 2, Create: 2, Mod: 2, Key: "/lin/0", Value: "a"},
		{Rev: 3, Create: 2, Mod: 3, Key: "/lin/0", Value: "b"},
		{Rev: 4, Create: 4, Mod: 4, Key: "/lin/1", Value: "c"},
		{Rev: 4, Create: 4, Mod: 4, Key: "/lin/2", Value: "d"},
		{Rev: 5, Create: 0, Mod: 5, Key: "/lin/0", Delete: true},
	}
	final[1] = KV{Value: "c", Create: 4, Mod: 4, Ver: 1}
	final[2] = KV{Value: "d", Create: 4, Mod: 4, Ver: 1}
	ops = []Op{
		{In: Input{Kind: Put, Key: 0, Value: "a"}, Out: Output{Rev: 2}},
		{In: Input{Kind: Put, Key: 0, Value: "b"}, Out: Output{Rev: 3}},
		{In: Input{Kind: TxnMulti, Key: 1, Value: "c", Key2: 2, Value2: "d"}, Out: Output{Rev: 4, Succeeded: true}},
		{In: Input{Kind: Delete, Key: 0}, Out: Output{Rev: 5, Deleted: 1}},
	}
	return ref, final, ops
}

// goodStream is what a correct watch from revision 2 delivers.
func goodStream() []WatchResp {
	return []WatchResp{
		{Events: []WatchEvent{{Rev: 2, Create: 2, Mod: 2, Key: "/lin/0", Value: "a"}}},
		{Events: []WatchEvent{{Rev: 3, Create: 2, Mod: 3, Key: "/lin/0", Value: "b", HasPrev: true, PrevValue: "a", PrevMod: 2}}},
		{Progress: true, Header: 3},
		{Events: []WatchEvent{
			{Rev: 4, Create: 4, Mod: 4, Key: "/lin/1", Value: "c"},
			{Rev: 4, Create: 4, Mod: 4, Key: "/lin/2", Value: "d"}}},
		{Events: []WatchEvent{{Rev: 5, Mod: 5, Key: "/lin/0", Delete: true, HasPrev: true, PrevValue: "b", PrevMod: 3}}},
	}
}

func logOf(resps []WatchResp) *WatchLog {
	w := &WatchLog{Member: "m1", Start: 2}
	for _, r := range resps {
		w.add(r)
	}
	return w
}

func TestCheckWatchesCleanStream(t *testing.T) {
	ref, final, ops := watchFixture()
	rep := CheckWatches([]*WatchLog{logOf(goodStream())}, ref, 1, 5, final, ops)
	if rep.Count() != 0 {
		t.Fatalf("a correct stream: %v", rep.Violations)
	}
	if rep.Events != 5 || rep.Progress != 1 {
		t.Fatalf("counts: %d events, %d progress", rep.Events, rep.Progress)
	}
}

func TestCheckWatchesFindsEachViolation(t *testing.T) {
	ref, final, ops := watchFixture()
	cases := []struct {
		kind   string
		mutate func(rs []WatchResp) []WatchResp
	}{
		{"ordered", func(rs []WatchResp) []WatchResp { rs[0], rs[1] = rs[1], rs[0]; return rs }},
		{"unique", func(rs []WatchResp) []WatchResp { return append(rs, WatchResp{Events: rs[4].Events}) }},
		{"atomic", func(rs []WatchResp) []WatchResp {
			split := []WatchResp{{Events: rs[3].Events[:1]}, {Events: rs[3].Events[1:]}}
			return append(append(append([]WatchResp{}, rs[:3]...), split...), rs[4])
		}},
		{"reliable", func(rs []WatchResp) []WatchResp { return append(rs[:1], rs[2:]...) }},
		{"bookmarkable", func(rs []WatchResp) []WatchResp { rs[2].Header = 4; return rs }},
		{"prev_kv", func(rs []WatchResp) []WatchResp { rs[1].Events[0].PrevValue = "x"; return rs }},
		{"content", func(rs []WatchResp) []WatchResp { rs[0].Events[0].Value = "z"; return rs }},
		{"error", func(rs []WatchResp) []WatchResp { return append(rs, WatchResp{Err: "canceled"}) }},
	}
	for _, c := range cases {
		rep := CheckWatches([]*WatchLog{logOf(c.mutate(goodStream()))}, ref, 1, 5, final, ops)
		if len(rep.Violations[c.kind]) == 0 {
			t.Errorf("%s: not found; report %v", c.kind, rep.Violations)
		}
	}
}

func TestCheckWatchesChecksTheReference(t *testing.T) {
	ref, final, ops := watchFixture()
	// The reference lost the txn: the final read and the acknowledged
	// txn both disagree with it.
	short := append(append([]WatchEvent{}, ref[:2]...), ref[4])
	rep := CheckWatches(nil, short, 1, 5, final, ops)
	v := strings.Join(rep.Violations["reference"], "\n")
	if !strings.Contains(v, "replaying the reference") || !strings.Contains(v, "acknowledged txn") {
		t.Fatalf("a reference missing a revision: %v", rep.Violations)
	}
}
