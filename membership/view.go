package membership

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/schema"
)

// The refusals of committed conf changes, with etcd's texts (its
// membership errors, which the API maps to rpctypes' member errors).
var (
	ErrIDRemoved        = errors.New("membership: ID removed")
	ErrIDExists         = errors.New("membership: ID exists")
	ErrIDNotFound       = errors.New("membership: ID not found")
	ErrPeerURLExists    = errors.New("membership: peerURL exists")
	ErrMemberNotLearner = errors.New("membership: can only promote a learner member")
	ErrTooManyLearners  = errors.New("membership: too many learner members in cluster")
	// ErrLastVoter and ErrBadContext are Strata's: raft cannot remove
	// its last voter, and a change without a readable member cannot be
	// applied (etcd's member would crash on either).
	ErrLastVoter  = errors.New("membership: cannot remove the last voting member")
	ErrBadContext = errors.New("membership: undecodable conf change context")
)

// View is the membership a committed conf change is checked against, as
// etcd checks it (ValidateConfigurationChange): the members and removed
// ids that the conf changes applied so far leave, starting from none. It
// differs from the Set, which also holds what a member learns outside the
// log (the initial cluster at bootstrap, the running cluster's members
// when it joins); a check against that would refuse the log's own adds
// of those members. Every member, Strata or etcd, reaches the same
// decision for each change from the same log, so raft's configuration
// stays the same on all of them.
//
// The raft goroutine checks each change with its own View before raft
// applies it (refused: the change goes to raft with node id 0, as etcd
// does); the apply goroutine repeats the check with another View and
// persists it, with the indexes it refused, in the same commit as the
// index. After a restart the raft goroutine starts from the persisted
// View and takes the decisions for the entries it replays at or below
// the consistent index from the refused indexes (see Refused).
//
// A View is used from one goroutine.
type View struct {
	members map[uint64]viewMember
	removed map[uint64]bool
	// refused are the indexes of the latest refused changes, ascending.
	refused []uint64
}

type viewMember struct {
	peerURLs []string
	learner  bool
}

// maxRefused bounds the refused indexes kept (8 bytes each, rewritten
// with each conf change): only those since the raft snapshot before the
// consistent index are ever asked for, at most --snapshot-count entries
// plus a page-store commit's worth back, and a refusal is rare (two
// racing adds of one peer URL).
const maxRefused = 8192

// NewView returns the empty view, the one before the first entry.
func NewView() *View {
	return &View{members: map[uint64]viewMember{}, removed: map[uint64]bool{}}
}

// Clone returns an independent copy of v.
func (v *View) Clone() *View {
	c := &View{members: make(map[uint64]viewMember, len(v.members)), removed: make(map[uint64]bool, len(v.removed)),
		refused: slices.Clone(v.refused)}
	for id, m := range v.members {
		c.members[id] = viewMember{peerURLs: slices.Clone(m.peerURLs), learner: m.learner}
	}
	for id := range v.removed {
		c.removed[id] = true
	}
	return c
}

// viewRecord is the persisted View (JSON, in bucket schema.ConfView).
type viewRecord struct {
	Members []viewMemberRecord `json:"members"`
	Removed []uint64           `json:"removed,omitempty"`
}

type viewMemberRecord struct {
	ID        uint64   `json:"id"`
	PeerURLs  []string `json:"peerURLs"`
	IsLearner bool     `json:"isLearner,omitempty"`
}

var (
	viewKey    = []byte("view")
	refusedKey = []byte("refused")
)

// LoadView reads the View persisted in tx, whose consistent index is ci.
// A state without one is a new member's (ci 0: the empty view), or was
// converted from an etcd snapshot, restored by stratautl or written by
// an older Strata: its members buckets are then the view, as they are
// etcd's backend.
func LoadView(tx *pagestore.Tx, ci uint64) (*View, error) {
	v := NewView()
	b, err := tx.Bucket(schema.ConfView)
	if err != nil && !isBucketNotFound(err) {
		return nil, err
	}
	var raw []byte
	if b != nil {
		if raw, err = b.Get(viewKey); err != nil {
			return nil, err
		}
	}
	if raw == nil {
		if ci == 0 {
			return v, nil
		}
		members, removed, err := Read(tx)
		if err != nil {
			return nil, err
		}
		for _, m := range members {
			v.members[m.ID] = viewMember{peerURLs: slices.Clone(m.PeerURLs), learner: m.IsLearner}
		}
		for _, id := range removed {
			v.removed[id] = true
		}
		return v, nil
	}
	var rec viewRecord
	if err := json.Unmarshal(raw, &rec); err != nil {
		return nil, fmt.Errorf("membership: the persisted conf view: %w", err)
	}
	for _, m := range rec.Members {
		v.members[m.ID] = viewMember{peerURLs: m.PeerURLs, learner: m.IsLearner}
	}
	for _, id := range rec.Removed {
		v.removed[id] = true
	}
	ref, err := b.Get(refusedKey)
	if err != nil {
		return nil, err
	}
	if len(ref)%8 != 0 {
		return nil, fmt.Errorf("membership: the persisted refused conf changes: %d bytes", len(ref))
	}
	for i := 0; i < len(ref); i += 8 {
		v.refused = append(v.refused, binary.BigEndian.Uint64(ref[i:]))
	}
	return v, nil
}

// Persist writes the view and its refused indexes through w.
func (v *View) Persist(w Writer) {
	rec := viewRecord{Members: make([]viewMemberRecord, 0, len(v.members))}
	for id, m := range v.members {
		rec.Members = append(rec.Members, viewMemberRecord{ID: id, PeerURLs: m.peerURLs, IsLearner: m.learner})
	}
	sort.Slice(rec.Members, func(i, j int) bool { return rec.Members[i].ID < rec.Members[j].ID })
	for id := range v.removed {
		rec.Removed = append(rec.Removed, id)
	}
	slices.Sort(rec.Removed)
	raw, _ := json.Marshal(rec)
	w.Put(schema.ConfView, viewKey, raw)
	ref := make([]byte, 0, 8*len(v.refused))
	for _, idx := range v.refused {
		ref = binary.BigEndian.AppendUint64(ref, idx)
	}
	w.Put(schema.ConfView, refusedKey, ref)
}

// Refused reports whether the change at index was refused, for an index
// at or below the consistent index the view was loaded at.
func (v *View) Refused(index uint64) bool {
	_, ok := slices.BinarySearch(v.refused, index)
	return ok
}

// Apply checks the committed change cc at index against the view and
// applies it when it passes; a refused change leaves the view as it was,
// records index as refused and returns the reason. maxLearners is the
// member's --max-learners.
func (v *View) Apply(index uint64, cc *raftpb.ConfChange, maxLearners int) error {
	if err := v.apply(cc, maxLearners); err != nil {
		if n := len(v.refused); n == 0 || v.refused[n-1] < index {
			v.refused = append(v.refused, index)
			if len(v.refused) > maxRefused {
				v.refused = slices.Delete(v.refused, 0, len(v.refused)-maxRefused)
			}
		}
		return err
	}
	return nil
}

// apply is etcd's ValidateConfigurationChange followed by the change.
func (v *View) apply(cc *raftpb.ConfChange, maxLearners int) error {
	id := cc.GetNodeId()
	if v.removed[id] {
		return ErrIDRemoved
	}
	switch cc.GetType() {
	case raftpb.ConfChangeAddNode, raftpb.ConfChangeAddLearnerNode:
		var r record
		if err := json.Unmarshal(cc.GetContext(), &r); err != nil {
			return ErrBadContext
		}
		m, known := v.members[id]
		if r.IsPromote {
			switch {
			case !known:
				return ErrIDNotFound
			case !m.learner:
				return ErrMemberNotLearner
			}
			m.learner = false
			v.members[id] = m
			return nil
		}
		if known {
			return ErrIDExists
		}
		for _, other := range v.members {
			for _, u := range r.PeerURLs {
				if slices.Contains(other.peerURLs, u) {
					return ErrPeerURLExists
				}
			}
		}
		if r.IsLearner && cc.GetType() == raftpb.ConfChangeAddLearnerNode && v.learners()+1 > maxLearners {
			return ErrTooManyLearners
		}
		// The member as its context describes it, as etcd's backend
		// stores it (etcd's add writes both from the same request).
		v.members[id] = viewMember{peerURLs: slices.Clone(r.PeerURLs), learner: r.IsLearner}
	case raftpb.ConfChangeRemoveNode:
		m, known := v.members[id]
		if !known {
			return ErrIDNotFound
		}
		if !m.learner && v.voters() == 1 {
			return ErrLastVoter
		}
		delete(v.members, id)
		v.removed[id] = true
	case raftpb.ConfChangeUpdateNode:
		m, known := v.members[id]
		if !known {
			return ErrIDNotFound
		}
		var r record
		if err := json.Unmarshal(cc.GetContext(), &r); err != nil {
			return ErrBadContext
		}
		for oid, other := range v.members {
			if oid == id {
				continue
			}
			for _, u := range r.PeerURLs {
				if slices.Contains(other.peerURLs, u) {
					return ErrPeerURLExists
				}
			}
		}
		m.peerURLs = slices.Clone(r.PeerURLs)
		v.members[id] = m
	default:
		return fmt.Errorf("membership: unknown conf change type %v", cc.GetType())
	}
	return nil
}

func (v *View) learners() (n int) {
	for _, m := range v.members {
		if m.learner {
			n++
		}
	}
	return n
}

func (v *View) voters() (n int) {
	for _, m := range v.members {
		if !m.learner {
			n++
		}
	}
	return n
}
