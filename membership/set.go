package membership

import (
	"encoding/json"
	"slices"
	"sort"
	"sync"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/schema"
)

// Writer is where membership changes are persisted: the write transaction
// of the entry that changes them (mvcc.WriteTx), so the change and the
// entry's index commit together.
type Writer interface {
	Put(bucket, key, value []byte)
	Delete(bucket, key []byte)
}

// Set is the live membership of a member. The apply goroutine changes it
// (Add at bootstrap, ApplyConfChange); RPCs read it from any goroutine.
type Set struct {
	// mu guards m and removed. Members returned by Get and List are
	// shared: they are changed only under mu (ApplyConfChange) or before
	// the server serves (bootstrap), so readers may hold them without it.
	mu      sync.RWMutex
	m       map[uint64]*Member
	removed map[uint64]bool
}

// NewSet returns an empty membership.
func NewSet() *Set { return &Set{m: map[uint64]*Member{}, removed: map[uint64]bool{}} }

// Load reads the persisted membership; ok is false for a new member with
// nothing persisted yet.
func (s *Set) Load(db *pagestore.DB) (ok bool, err error) {
	err = db.View(func(tx *pagestore.Tx) error {
		list, removed, err := Read(tx)
		if err != nil {
			return err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, m := range list {
			s.m[m.ID] = m
		}
		for _, id := range removed {
			s.removed[id] = true
		}
		ok = len(list) > 0
		return nil
	})
	return ok, err
}

// Persist writes every member (at bootstrap) through w.
func (s *Set) Persist(w Writer) {
	for _, m := range s.List() {
		w.Put(schema.Members, Key(m.ID), m.JSON())
	}
}

// Add adds or replaces a member.
func (s *Set) Add(m *Member) {
	s.mu.Lock()
	s.m[m.ID] = m
	s.mu.Unlock()
}

// Get returns member id, nil if it is not a member.
func (s *Set) Get(id uint64) *Member {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.m[id]
}

// List returns the members sorted by id.
func (s *Set) List() []*Member {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*Member, 0, len(s.m))
	for _, m := range s.m {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// PeerURLTaken reports whether a member other than except has one of
// urls.
func (s *Set) PeerURLTaken(urls []string, except uint64) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for id, m := range s.m {
		if id == except {
			continue
		}
		for _, a := range m.PeerURLs {
			for _, b := range urls {
				if a == b {
					return true
				}
			}
		}
	}
	return false
}

// Learners counts the learners.
func (s *Set) Learners() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	n := 0
	for _, m := range s.m {
		if m.IsLearner {
			n++
		}
	}
	return n
}

// Removed returns the ids of the members removed from the cluster, in
// ascending order.
func (s *Set) Removed() []uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]uint64, 0, len(s.removed))
	for id := range s.removed {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// IsRemoved reports whether id was removed from the cluster.
func (s *Set) IsRemoved(id uint64) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.removed[id]
}

func (s *Set) votersLocked() int {
	n := 0
	for _, m := range s.m {
		if !m.IsLearner {
			n++
		}
	}
	return n
}

// StartedVoters counts voters that have published a name (started), and
// all voters.
func (s *Set) StartedVoters() (started, voters int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, m := range s.m {
		if m.IsLearner {
			continue
		}
		voters++
		if m.Name != "" {
			started++
		}
	}
	return started, voters
}

// ApplyConfChange applies a committed membership change that the View
// accepted to the set and persists it through w. Adding a known member
// (one this member learned outside the log, at bootstrap or when it
// joined), or removing or updating an unknown one, changes nothing.
func (s *Set) ApplyConfChange(cc *raftpb.ConfChange, w Writer) {
	id := cc.GetNodeId()
	var r record
	if len(cc.GetContext()) > 0 {
		_ = json.Unmarshal(cc.GetContext(), &r)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch cc.GetType() {
	case raftpb.ConfChangeAddNode, raftpb.ConfChangeAddLearnerNode:
		old, ok := s.m[id]
		switch {
		case ok && old.IsLearner && r.IsPromote:
			// A promotion (etcd's context says isPromote). The record is
			// replaced, not changed in place (see SetAttributes).
			m := *old
			m.IsLearner = false
			s.m[id] = &m
			w.Put(schema.Members, Key(id), m.JSON())
		case !ok && !r.IsPromote && len(r.PeerURLs) > 0:
			s.m[id] = &Member{ID: id, Name: r.Name, PeerURLs: r.PeerURLs, ClientURLs: r.ClientURLs,
				IsLearner: cc.GetType() == raftpb.ConfChangeAddLearnerNode}
			w.Put(schema.Members, Key(id), s.m[id].JSON())
		}
	case raftpb.ConfChangeRemoveNode:
		if m, ok := s.m[id]; ok && !(!m.IsLearner && s.votersLocked() == 1) {
			// (Raft refuses to remove the last voter, and so does this.)
			delete(s.m, id)
			s.removed[id] = true
			w.Delete(schema.Members, Key(id))
			w.Put(schema.MembersRemoved, Key(id), []byte("removed"))
		}
	case raftpb.ConfChangeUpdateNode:
		if m, ok := s.m[id]; ok && len(r.PeerURLs) > 0 {
			m.PeerURLs = r.PeerURLs
			w.Put(schema.Members, Key(id), m.JSON())
		}
	}
}

// SetAttributes records the name and client URLs member id published
// (etcd's ClusterMemberAttrSet, applied from raft) and persists the
// member through w. An unknown or removed id changes nothing. The member
// record is replaced, not changed in place, so a reader holding the old
// one (Get, List) never sees it change.
func (s *Set) SetAttributes(id uint64, name string, clientURLs []string, w Writer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.m[id]
	if !ok {
		return
	}
	m := *old
	m.Name, m.ClientURLs = name, slices.Clone(clientURLs)
	s.m[id] = &m
	w.Put(schema.Members, Key(id), m.JSON())
}

// Reset replaces the whole membership with the one persisted in db (a
// member that installed a leader's snapshot).
func (s *Set) Reset(db *pagestore.DB) error {
	fresh := NewSet()
	if _, err := fresh.Load(db); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m, s.removed = fresh.m, fresh.removed
	return nil
}
