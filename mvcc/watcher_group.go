package mvcc

import (
	"bytes"
	"sort"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// watcherState is where a watcher is in the watchable store. Every field
// of watcher below "guarded by WatchableStore.mu" changes only under that
// lock; the rest is fixed at creation.
type watcherState uint8

const (
	// stateSynced: every event up to WatchableStore.notified that the
	// watcher wants is already in its stream's channel; new events reach it
	// from the apply hook.
	stateSynced watcherState = iota
	// stateUnsynced: the watcher still needs events from minRev on, and the
	// sync loop reads them from the backend.
	stateUnsynced
	// stateVictim: the watcher's channel was full; its undelivered events
	// are parked in WatchableStore.victims until the victim loop delivers
	// them.
	stateVictim
	// stateDone: canceled, compacted or its stream closed. No response is
	// sent for it any more.
	stateDone
)

// watcher is one watch, owned by a WatchStream and registered in exactly
// one of the store's groups (or the victim set) until it is done.
type watcher struct {
	id       WatchID
	key      []byte
	end      []byte // nil: the single key; empty non-nil: every key >= key
	startRev int64
	filters  []pb.WatchCreateRequest_FilterType
	prevKV   bool
	progress bool
	fragment bool
	stream   *WatchStream

	// Guarded by WatchableStore.mu.
	state watcherState
	// minRev is the lowest revision whose events the watcher has not been
	// given yet (nor had parked as a victim).
	minRev int64
}

// contains reports whether key is in the watcher's range.
func (w *watcher) contains(key []byte) bool {
	if w.end == nil {
		return bytes.Equal(key, w.key)
	}
	if bytes.Compare(key, w.key) < 0 {
		return false
	}
	return len(w.end) == 0 || bytes.Compare(key, w.end) < 0
}

// filtered reports whether the watcher's NOPUT/NODELETE filters drop ev.
func (w *watcher) filtered(ev *mvccpb.Event) bool {
	for _, f := range w.filters {
		switch {
		case f == pb.WatchCreateRequest_NOPUT && ev.Type == mvccpb.Event_PUT:
			return true
		case f == pb.WatchCreateRequest_NODELETE && ev.Type == mvccpb.Event_DELETE:
			return true
		}
	}
	return false
}

type watcherSet map[*watcher]struct{}

// rangeEntry holds the watchers of one distinct [key, end) range.
type rangeEntry struct {
	key, end []byte // end empty: unbounded
	ws       watcherSet
}

// watcherGroup indexes watchers by what they watch, so the apply hook
// finds the watchers of a key without looking at the others. Single-key
// watchers are in a map; ranges are deduplicated (many clients watch the
// same prefix) and kept sorted by start key, so a lookup visits only the
// ranges that start at or before the key. That is linear in the number of
// distinct ranges in the worst case, which is fine for the few hundred
// prefixes real deployments watch; an interval tree would bound it if it
// ever is not.
//
// A watcherGroup is not safe for concurrent use; the store guards it with
// its mutex.
type watcherGroup struct {
	keys   map[string]watcherSet
	ranges map[[2]string]*rangeEntry
	sorted []*rangeEntry // ranges by key; rebuilt on the next lookup after a change
	dirty  bool
	n      int
	flip   bool // which kind each visits first
}

func newWatcherGroup() *watcherGroup {
	return &watcherGroup{keys: map[string]watcherSet{}, ranges: map[[2]string]*rangeEntry{}}
}

func (g *watcherGroup) len() int { return g.n }

func (g *watcherGroup) add(w *watcher) {
	g.n++
	if w.end == nil {
		set := g.keys[string(w.key)]
		if set == nil {
			set = watcherSet{}
			g.keys[string(w.key)] = set
		}
		set[w] = struct{}{}
		return
	}
	rk := [2]string{string(w.key), string(w.end)}
	e := g.ranges[rk]
	if e == nil {
		e = &rangeEntry{key: w.key, end: w.end, ws: watcherSet{}}
		g.ranges[rk] = e
		g.dirty = true
	}
	e.ws[w] = struct{}{}
}

// remove deletes w and reports whether it was there.
func (g *watcherGroup) remove(w *watcher) bool {
	if w.end == nil {
		set := g.keys[string(w.key)]
		if _, ok := set[w]; !ok {
			return false
		}
		delete(set, w)
		if len(set) == 0 {
			delete(g.keys, string(w.key))
		}
		g.n--
		return true
	}
	rk := [2]string{string(w.key), string(w.end)}
	e := g.ranges[rk]
	if e == nil {
		return false
	}
	if _, ok := e.ws[w]; !ok {
		return false
	}
	delete(e.ws, w)
	if len(e.ws) == 0 {
		delete(g.ranges, rk)
		g.dirty = true
	}
	g.n--
	return true
}

// each calls fn for every watcher in the group until fn returns false.
// fn may remove the watcher it is given. Map order is random, and single
// keys and ranges take turns going first, so a caller that stops early
// still reaches every watcher over a few calls.
func (g *watcherGroup) each(fn func(w *watcher) bool) {
	g.flip = !g.flip
	if g.flip {
		_ = g.eachKey(fn) && g.eachRange(fn)
	} else {
		_ = g.eachRange(fn) && g.eachKey(fn)
	}
}

func (g *watcherGroup) eachKey(fn func(w *watcher) bool) bool {
	for _, set := range g.keys {
		for w := range set {
			if !fn(w) {
				return false
			}
		}
	}
	return true
}

func (g *watcherGroup) eachRange(fn func(w *watcher) bool) bool {
	for _, e := range g.ranges {
		for w := range e.ws {
			if !fn(w) {
				return false
			}
		}
	}
	return true
}

// match calls fn for every watcher whose range holds key.
func (g *watcherGroup) match(key []byte, fn func(w *watcher)) {
	for w := range g.keys[string(key)] {
		fn(w)
	}
	if len(g.ranges) == 0 {
		return
	}
	if g.dirty {
		g.sorted = g.sorted[:0]
		for _, e := range g.ranges {
			g.sorted = append(g.sorted, e)
		}
		sort.Slice(g.sorted, func(i, j int) bool { return bytes.Compare(g.sorted[i].key, g.sorted[j].key) < 0 })
		g.dirty = false
	}
	// Only ranges starting at or before key can hold it.
	n := sort.Search(len(g.sorted), func(i int) bool { return bytes.Compare(g.sorted[i].key, key) > 0 })
	for _, e := range g.sorted[:n] {
		if len(e.end) == 0 || bytes.Compare(key, e.end) < 0 {
			for w := range e.ws {
				fn(w)
			}
		}
	}
}
