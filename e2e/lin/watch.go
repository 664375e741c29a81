package lin

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Watch guarantees, as etcd's robustness suite states them, checked over
// watch streams on the key set recorded during a history:
//
//   - ordered: event revisions never decrease along a stream;
//   - unique: no event (revision, key) is delivered twice;
//   - atomic: all events of one revision arrive in one response;
//   - reliable: no gap, a stream delivers every event of the key set from
//     its start revision to the last revision it reached;
//   - resumable: after the watched member is killed the stream resumes
//     from where it was (clientv3 reopens it from the next revision) and
//     the first three still hold across the break;
//   - bookmarkable: after a progress notification at revision P no event
//     at or below P arrives;
//   - prev_kv: each event's previous key-value is the key's value just
//     before the event's revision (none for a creation);
//   - and each event is what the reference says happened at its revision.
//
// The reference is one more watch, opened after the history on a healthy
// member from the history's first revision. It is itself checked: its
// events, replayed over the empty key set, give the final read, and every
// acknowledged write is among them at the revision the client was told.

// WatchEvent is one event as a stream delivered it.
type WatchEvent struct {
	Rev, Create, Mod int64
	Key, Value       string
	Delete           bool
	HasPrev          bool
	PrevValue        string
	PrevMod          int64
}

func (e WatchEvent) String() string {
	op := "PUT"
	if e.Delete {
		op = "DELETE"
	}
	prev := "no prev"
	if e.HasPrev {
		prev = fmt.Sprintf("prev %q@%d", e.PrevValue, e.PrevMod)
	}
	return fmt.Sprintf("%s %s=%q rev %d (create %d, %s)", op, e.Key, e.Value, e.Rev, e.Create, prev)
}

// WatchResp is one response of a stream.
type WatchResp struct {
	Events   []WatchEvent
	Progress bool  // a progress notification (no events)
	Header   int64 // the response header's revision
	Err      string
}

// WatchLog is what one stream delivered.
type WatchLog struct {
	Member string
	Start  int64 // the first revision asked for

	mu    sync.Mutex
	resps []WatchResp
	// reached is the highest revision the stream is known to be complete
	// up to: its last event's, or a progress notification's.
	reached  int64
	reopens  int
	requests int
}

// Resps is a copy of the responses received so far.
func (w *WatchLog) Resps() []WatchResp {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]WatchResp(nil), w.resps...)
}

// Reached is the highest revision the stream has shown it is complete to.
func (w *WatchLog) Reached() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.reached
}

// Counts are the stream's responses, events, progress notifications,
// reopens and progress requests.
func (w *WatchLog) Counts() (resps, events, progress, reopens, requests int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range w.resps {
		events += len(r.Events)
		if r.Progress {
			progress++
		}
	}
	return len(w.resps), events, progress, w.reopens, w.requests
}

func (w *WatchLog) add(r WatchResp) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.resps = append(w.resps, r)
	if r.Progress {
		w.reached = max(w.reached, r.Header)
	}
	for _, e := range r.Events {
		w.reached = max(w.reached, e.Rev)
	}
}

// RecordWatch watches the key set on cli from revision start, with
// prev_kv and progress notifications, and asks for progress every
// progressEvery, until ctx ends. If the stream ends with an error (it does
// not while clientv3 can reconnect) it is reopened from the revision after
// the last one it delivered.
func RecordWatch(ctx context.Context, cli *clientv3.Client, member string, start int64, progressEvery time.Duration) *WatchLog {
	return RecordWatchPrefix(ctx, cli, member, Prefix, start, progressEvery)
}

// RecordWatchPrefix is RecordWatch on the keys under prefix.
func RecordWatchPrefix(ctx context.Context, cli *clientv3.Client, member, prefix string, start int64, progressEvery time.Duration) *WatchLog {
	w := &WatchLog{Member: member, Start: start}
	go func() {
		next := start
		for ctx.Err() == nil {
			wctx, cancel := context.WithCancel(ctx)
			ch := cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithProgressNotify(), clientv3.WithRev(next))
			go func() {
				t := time.NewTicker(progressEvery)
				defer t.Stop()
				for {
					select {
					case <-wctx.Done():
						return
					case <-t.C:
						if cli.RequestProgress(wctx) == nil {
							w.mu.Lock()
							w.requests++
							w.mu.Unlock()
						}
					}
				}
			}()
			for resp := range ch {
				r := WatchResp{Header: resp.Header.Revision, Progress: resp.IsProgressNotify()}
				if err := resp.Err(); err != nil {
					r.Err = err.Error()
				}
				for _, ev := range resp.Events {
					e := WatchEvent{Rev: ev.Kv.ModRevision, Create: ev.Kv.CreateRevision, Mod: ev.Kv.ModRevision,
						Key: string(ev.Kv.Key), Value: string(ev.Kv.Value), Delete: ev.Type == mvccpb.DELETE}
					if ev.PrevKv != nil {
						e.HasPrev, e.PrevValue, e.PrevMod = true, string(ev.PrevKv.Value), ev.PrevKv.ModRevision
					}
					r.Events = append(r.Events, e)
					next = max(next, e.Rev+1)
				}
				w.add(r)
			}
			cancel()
			if ctx.Err() == nil {
				w.mu.Lock()
				w.reopens++
				w.mu.Unlock()
				time.Sleep(50 * time.Millisecond) // pace the reopening while the member is down
			}
		}
	}()
	return w
}

// WatchReport is the outcome of CheckWatches.
type WatchReport struct {
	Streams, Events, Progress, Reopens int
	// Violations, by guarantee.
	Violations map[string][]string
}

// Count is the number of violations.
func (r *WatchReport) Count() int {
	n := 0
	for _, v := range r.Violations {
		n += len(v)
	}
	return n
}

func (r *WatchReport) add(kind, format string, args ...any) {
	if len(r.Violations[kind]) < 20 {
		r.Violations[kind] = append(r.Violations[kind], fmt.Sprintf(format, args...))
	} else if len(r.Violations[kind]) == 20 {
		r.Violations[kind] = append(r.Violations[kind], "…")
	}
}

// Summary is the counts as "kind=n" pairs, every guarantee named.
func (r *WatchReport) Summary() string {
	var parts []string
	for _, k := range WatchGuarantees {
		parts = append(parts, fmt.Sprintf("%s=%d", k, len(r.Violations[k])))
	}
	return strings.Join(parts, " ")
}

// WatchGuarantees are the violation kinds CheckWatches reports.
var WatchGuarantees = []string{"ordered", "unique", "atomic", "reliable", "bookmarkable", "prev_kv", "content", "reference", "error"}

// CheckWatches checks every stream in logs against ref (the reference
// watch, over (initRev, finalRev]), ref against the final read final at
// finalRev, and ref against the acknowledged writes in ops.
func CheckWatches(logs []*WatchLog, ref []WatchEvent, initRev, finalRev int64, final [MaxKeys]KV, ops []Op) *WatchReport {
	rep := &WatchReport{Violations: map[string][]string{}}
	checkReference(rep, ref, initRev, finalRev, final, ops)

	// The reference by revision, and the key set just before each event.
	byRev := map[int64][]WatchEvent{}
	before := map[string]map[int64]KV{} // key -> rev -> value before rev
	state := map[string]KV{}
	for _, e := range ref {
		byRev[e.Rev] = append(byRev[e.Rev], e)
		if before[e.Key] == nil {
			before[e.Key] = map[int64]KV{}
		}
		before[e.Key][e.Rev] = state[e.Key]
		if e.Delete {
			delete(state, e.Key)
		} else {
			state[e.Key] = KV{Value: e.Value, Create: e.Create, Mod: e.Rev}
		}
	}
	var revs []int64
	for r := range byRev {
		revs = append(revs, r)
	}
	sort.Slice(revs, func(i, j int) bool { return revs[i] < revs[j] })

	for _, w := range logs {
		rep.Streams++
		resps := w.Resps()
		_, ev, pr, ro, _ := w.Counts()
		rep.Events += ev
		rep.Progress += pr
		rep.Reopens += ro
		name := w.Member
		var last, bookmark int64
		seen := map[string]bool{}
		respOf := map[int64]int{}
		got := map[int64][]WatchEvent{}
		for i, r := range resps {
			if r.Err != "" {
				rep.add("error", "%s: response %d: %s", name, i, r.Err)
			}
			if r.Progress {
				bookmark = max(bookmark, r.Header)
			}
			for _, e := range r.Events {
				if e.Rev < last {
					rep.add("ordered", "%s: %s after revision %d", name, e, last)
				}
				last = max(last, e.Rev)
				if e.Rev <= bookmark {
					rep.add("bookmarkable", "%s: %s after a progress notification at %d", name, e, bookmark)
				}
				id := strconv.FormatInt(e.Rev, 10) + " " + e.Key
				if seen[id] {
					rep.add("unique", "%s: %s delivered twice", name, e)
				}
				seen[id] = true
				if j, ok := respOf[e.Rev]; ok && j != i {
					rep.add("atomic", "%s: revision %d split over responses %d and %d", name, e.Rev, j, i)
				}
				respOf[e.Rev] = i
				got[e.Rev] = append(got[e.Rev], e)
				checkPrev(rep, name, e, before)
			}
		}
		// Reliable and content: every reference revision in (start-1,
		// reached] arrived, as the reference has it.
		reached := w.Reached()
		for _, rv := range revs {
			if rv < w.Start || rv > reached {
				continue
			}
			want, have := byRev[rv], got[rv]
			if len(have) == 0 {
				rep.add("reliable", "%s: revision %d (%s) never arrived (stream reached %d)", name, rv, want[0], reached)
				continue
			}
			if !sameEvents(want, have) {
				rep.add("content", "%s: revision %d: got %v, the reference has %v", name, rv, have, want)
			}
		}
		for rv, have := range got {
			if _, ok := byRev[rv]; !ok {
				rep.add("content", "%s: revision %d: %v, which the reference does not have", name, rv, have)
			}
		}
	}
	return rep
}

func checkPrev(rep *WatchReport, name string, e WatchEvent, before map[string]map[int64]KV) {
	prev, ok := before[e.Key][e.Rev]
	if !ok {
		return // not in the reference: reported as content
	}
	switch {
	case prev.Mod == 0 && e.HasPrev:
		rep.add("prev_kv", "%s: %s, but the key did not exist before", name, e)
	case prev.Mod != 0 && !e.HasPrev:
		rep.add("prev_kv", "%s: %s without prev_kv; before it the key was %q@%d", name, e, prev.Value, prev.Mod)
	case prev.Mod != 0 && (e.PrevValue != prev.Value || e.PrevMod != prev.Mod):
		rep.add("prev_kv", "%s: %s; before it the key was %q@%d", name, e, prev.Value, prev.Mod)
	}
}

func sameEvents(a, b []WatchEvent) bool {
	if len(a) != len(b) {
		return false
	}
	key := func(e WatchEvent) string {
		return fmt.Sprintf("%s|%s|%v|%d", e.Key, e.Value, e.Delete, e.Create)
	}
	ka, kb := make([]string, len(a)), make([]string, len(b))
	for i := range a {
		ka[i], kb[i] = key(a[i]), key(b[i])
	}
	sort.Strings(ka)
	sort.Strings(kb)
	for i := range ka {
		if ka[i] != kb[i] {
			return false
		}
	}
	return true
}

// checkReference checks the reference stream: complete to finalRev, its
// replay gives the final read, every acknowledged write is in it.
func checkReference(rep *WatchReport, ref []WatchEvent, initRev, finalRev int64, final [MaxKeys]KV, ops []Op) {
	state := map[string]KV{}
	var last int64
	for _, e := range ref {
		if e.Rev <= initRev || e.Rev > finalRev {
			rep.add("reference", "event %s outside (%d, %d]", e, initRev, finalRev)
		}
		if e.Rev < last {
			rep.add("reference", "event %s after revision %d", e, last)
		}
		last = e.Rev
		if e.Delete {
			delete(state, e.Key)
		} else {
			state[e.Key] = KV{Value: e.Value, Create: e.Create, Mod: e.Rev}
		}
	}
	for i := 0; i < MaxKeys; i++ {
		k := KeyName(i)
		got, want := state[k], final[i]
		if got.Value != want.Value || got.Mod != want.Mod || got.Create != want.Create {
			rep.add("reference", "%s: replaying the reference gives %q@%d (created %d), the final read %q@%d (created %d)",
				k, got.Value, got.Mod, got.Create, want.Value, want.Mod, want.Create)
		}
	}
	at := map[int64][]WatchEvent{}
	for _, e := range ref {
		at[e.Rev] = append(at[e.Rev], e)
	}
	for _, op := range ops {
		if op.Failed() || op.In.Unknown {
			continue
		}
		rev := op.Out.Rev
		has := func(key int, value string, del bool) bool {
			for _, e := range at[rev] {
				if e.Key == KeyName(key) && e.Delete == del && (del || e.Value == value) {
					return true
				}
			}
			return false
		}
		switch op.In.Kind {
		case Put:
			if !has(op.In.Key, op.In.Value, false) {
				rep.add("reference", "acknowledged put %s=%q at %d is not in the reference", KeyName(op.In.Key), op.In.Value, rev)
			}
		case Delete:
			if op.Out.Deleted > 0 && !has(op.In.Key, "", true) {
				rep.add("reference", "acknowledged delete of %s at %d is not in the reference", KeyName(op.In.Key), rev)
			}
		case TxnMod, TxnValue, TxnMulti:
			if !op.Out.Succeeded {
				continue
			}
			for _, kv := range writtenValues(op.In) {
				if !has(kv[0].(int), kv[1].(string), false) {
					rep.add("reference", "acknowledged txn's put %s=%q at %d is not in the reference", KeyName(kv[0].(int)), kv[1], rev)
				}
			}
		}
	}
}

// ReadReference reads every event of the key set in (initRev, finalRev]
// with one watch on cli: until a progress notification at finalRev or
// later says nothing more is to come.
func ReadReference(ctx context.Context, cli *clientv3.Client, initRev, finalRev int64) ([]WatchEvent, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := cli.Watch(ctx, Prefix, clientv3.WithPrefix(), clientv3.WithRev(initRev+1), clientv3.WithProgressNotify())
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				_ = cli.RequestProgress(ctx)
			}
		}
	}()
	var out []WatchEvent
	for resp := range ch {
		if err := resp.Err(); err != nil {
			return out, err
		}
		for _, ev := range resp.Events {
			if ev.Kv.ModRevision > finalRev {
				return out, nil
			}
			out = append(out, WatchEvent{Rev: ev.Kv.ModRevision, Create: ev.Kv.CreateRevision, Mod: ev.Kv.ModRevision,
				Key: string(ev.Kv.Key), Value: string(ev.Kv.Value), Delete: ev.Type == mvccpb.DELETE})
		}
		if resp.IsProgressNotify() && resp.Header.Revision >= finalRev {
			return out, nil
		}
	}
	return out, ctx.Err()
}
