package mvcc

import (
	"fmt"
	"math"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// This file holds the two background loops of the watchable store: the
// sync loop, which catches unsynced watchers up from the backend, and the
// victim loop, which retries parked events.

func (s *WatchableStore) syncLoop() {
	defer s.wg.Done()
	t := time.NewTimer(s.cfg.SyncInterval)
	defer t.Stop()
	for {
		remaining, progressed := s.syncRound()
		if remaining > 0 && progressed {
			// Still catching up: go on at once, as etcd does when a round
			// made progress, but let Close in between rounds.
			select {
			case <-s.stopc:
				return
			default:
				continue
			}
		}
		t.Reset(s.cfg.SyncInterval)
		select {
		case <-t.C:
		case <-s.syncKick:
		case <-s.stopc:
			return
		}
	}
}

// syncTarget is a watcher chosen for a round with its minRev at choosing.
type syncTarget struct {
	w      *watcher
	minRev int64
}

// syncRound serves up to SyncBatchWatchers unsynced watchers with up to
// SyncBatchRevs revisions of events. It returns how many watchers are
// still unsynced and whether any watcher moved forward.
//
// It holds mu only to choose and to hand over; the backend read happens
// without it, so apply is never held up by a catch-up read. Watchers are
// re-checked at hand-over: one canceled meanwhile is skipped, and one
// whose revisions a compaction published meanwhile gets the compaction
// response on the next round instead of events that may have holes.
func (s *WatchableStore) syncRound() (remaining int, progressed bool) {
	s.mu.Lock()
	if s.unsynced.len() == 0 {
		s.mu.Unlock()
		return 0, false
	}
	target := s.notified
	compactRev := s.Store.CompactRev()
	var chosen []syncTarget
	var compacted []*watcher
	from := int64(math.MaxInt64)
	// Visit at most SyncBatchWatchers watchers, so that choosing is as
	// bounded as serving; map order varies, so every watcher gets its turn.
	visited := 0
	s.unsynced.each(func(w *watcher) bool {
		visited++
		if w.minRev < compactRev {
			// etcd's answer to a watch below the compacted revision: the
			// compact revision, and the watch is over. etcd leaves the
			// header revision of this response at 0, and so do we.
			r := WatchResponse{WatchID: w.id, CompactRevision: compactRev, Canceled: true}
			if w.trySend(r) {
				compacted = append(compacted, w)
			} // else a full channel: retried next round
		} else {
			chosen = append(chosen, syncTarget{w: w, minRev: w.minRev})
			from = min(from, w.minRev)
		}
		return visited < s.cfg.SyncBatchWatchers
	})
	for _, w := range compacted {
		s.unsynced.remove(w)
		w.state = stateDone
		s.watcherTotal.Add(-1)
		progressed = true
	}
	s.publishCountsLocked()
	remaining = s.unsynced.len()
	s.mu.Unlock()
	if len(chosen) == 0 {
		return remaining, progressed
	}

	to := min(target, from+s.cfg.SyncBatchRevs-1)
	batches, err := s.readEvents(chosen, from, to)
	if err != nil {
		s.log.Error("watch: catching up unsynced watchers failed; retrying", "from", from, "to", to, "error", err)
		return remaining, false
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	compactRev = s.Store.CompactRev()
	victims := false
	for _, c := range chosen {
		w := c.w
		if w.state != stateUnsynced || c.minRev > to || c.minRev < compactRev {
			continue
		}
		progressed = true
		w.minRev = to + 1
		if evs := batches[w]; len(evs) > 0 {
			if !w.trySend(WatchResponse{WatchID: w.id, Events: evs, Revision: target}) {
				s.unsynced.remove(w)
				w.state = stateVictim
				s.victims[w] = &victimBatch{evs: evs, rev: target}
				victims = true
				continue
			}
		}
		if w.minRev > s.notified {
			s.unsynced.remove(w)
			w.state = stateSynced
			s.synced.add(w)
		}
	}
	if victims {
		kick(s.victimKick)
	}
	s.publishCountsLocked()
	return s.unsynced.len(), progressed
}

// readEvents reads the key records with from <= main <= to and returns,
// per chosen watcher, the events it wants at or after its minRev. It runs
// without mu: it reads only the watchers' immutable fields.
func (s *WatchableStore) readEvents(chosen []syncTarget, from, to int64) (map[*watcher][]*mvccpb.Event, error) {
	g := newWatcherGroup()
	minRev := make(map[*watcher]int64, len(chosen))
	for _, c := range chosen {
		if c.minRev <= to {
			g.add(c.w)
			minRev[c.w] = c.minRev
		}
	}
	rd, err := s.Store.Backend().BeginRead()
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	batches := map[*watcher][]*mvccpb.Event{}
	var decodeErr error
	err = rd.ScanRevisions(from, to, func(rev Revision, tombstone bool, value []byte) bool {
		kv := &mvccpb.KeyValue{}
		if err := decodeKV(value, kv); err != nil {
			decodeErr = fmt.Errorf("mvcc: value of revision %v: %w", rev, err)
			return false
		}
		ev := &mvccpb.Event{Type: mvccpb.Event_PUT, Kv: kv}
		if tombstone {
			// A tombstone stores only the key; the event carries the
			// revision of the delete, as etcd's does.
			ev.Type = mvccpb.Event_DELETE
			kv.ModRevision = rev.Main
		}
		g.match(kv.Key, func(w *watcher) {
			if rev.Main >= minRev[w] && !w.filtered(ev) {
				batches[w] = append(batches[w], ev)
			}
		})
		return true
	})
	if err == nil {
		err = decodeErr
	}
	return batches, err
}

func (s *WatchableStore) victimLoop() {
	defer s.wg.Done()
	for {
		var retry <-chan time.Time
		if s.retryVictims() > 0 {
			retry = time.After(s.cfg.VictimRetryInterval)
		}
		select {
		case <-retry:
		case <-s.victimKick:
		case <-s.stopc:
			return
		}
	}
}

// victimChunk is how many victims retryVictims serves per hold of mu, so
// that thousands of parked watchers never keep apply waiting for long.
const victimChunk = 256

// retryVictims tries to deliver every victim's parked events and returns
// how many victims are left. A delivered victim rejoins the synced group,
// or the unsynced one if revisions went by while it was parked.
func (s *WatchableStore) retryVictims() int {
	s.mu.Lock()
	list := make([]*watcher, 0, len(s.victims))
	for w := range s.victims {
		list = append(list, w)
	}
	s.mu.Unlock()
	for len(list) > 0 {
		n := min(len(list), victimChunk)
		s.mu.Lock()
		unsynced := false
		// One message per stream, as in notify: a stream that has room
		// takes all of its victims at once.
		perStream := map[*WatchStream][]streamMsg{}
		for _, w := range list[:n] {
			if vb := s.victims[w]; vb != nil { // else canceled meanwhile
				perStream[w.stream] = append(perStream[w.stream], streamMsg{w: w, resp: WatchResponse{WatchID: w.id, Events: vb.evs, Revision: vb.rev}})
			}
		}
		for st, msgs := range perStream {
			m := msgs[0]
			if len(msgs) > 1 {
				m = streamMsg{batch: msgs}
			}
			select {
			case st.in <- m:
				s.metrics.eventsQueued(m.events())
			default:
				continue
			}
			for _, m := range msgs {
				w := m.w
				delete(s.victims, w)
				if w.minRev > s.notified {
					w.state = stateSynced
					s.synced.add(w)
				} else {
					w.state = stateUnsynced
					s.unsynced.add(w)
					unsynced = true
				}
			}
		}
		if unsynced {
			kick(s.syncKick)
		}
		s.publishCountsLocked()
		s.mu.Unlock()
		list = list[n:]
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.victims)
}
