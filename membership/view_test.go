package membership

import (
	"errors"
	"path/filepath"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/pagestore"
)

func addCC(id uint64, learner bool, urls ...string) *raftpb.ConfChange {
	typ := raftpb.ConfChangeAddNode
	if learner {
		typ = raftpb.ConfChangeAddLearnerNode
	}
	m := &Member{ID: id, PeerURLs: urls, IsLearner: learner}
	return &raftpb.ConfChange{Type: typ.Enum(), NodeId: proto.Uint64(id), Context: m.JSON()}
}

func promoteCC(id uint64) *raftpb.ConfChange {
	return &raftpb.ConfChange{Type: raftpb.ConfChangeAddNode.Enum(), NodeId: proto.Uint64(id), Context: PromoteContext(id)}
}

func removeCC(id uint64) *raftpb.ConfChange {
	return &raftpb.ConfChange{Type: raftpb.ConfChangeRemoveNode.Enum(), NodeId: proto.Uint64(id)}
}

func updateCC(id uint64, urls ...string) *raftpb.ConfChange {
	m := &Member{ID: id, PeerURLs: urls}
	return &raftpb.ConfChange{Type: raftpb.ConfChangeUpdateNode.Enum(), NodeId: proto.Uint64(id), Context: m.JSON()}
}

// viewSteps is a log of conf changes with etcd 3.7.3's decision for each
// (ValidateConfigurationChange against the members its earlier changes
// left, --max-learners 1), in index order from 1.
var viewSteps = []struct {
	cc   *raftpb.ConfChange
	want error
}{
	// A new cluster's bootstrap entries: the view starts empty, so the
	// initial members are added by the log, not refused as known.
	{addCC(1, false, "http://a:2380"), nil},
	{addCC(2, false, "http://b:2380"), nil},
	{addCC(3, false, "http://c:2380"), nil},
	// Two racing member adds of one peer URL: the second is refused.
	{addCC(4, true, "http://d:2380"), nil},
	{addCC(5, true, "http://d:2380"), ErrPeerURLExists},
	// The learner limit, then adds of known ids (a voter re-added as a
	// learner would be a demotion).
	{addCC(6, true, "http://e:2380"), ErrTooManyLearners},
	{addCC(4, false, "http://d:2380"), ErrIDExists},
	{addCC(1, true, "http://a:2380"), ErrIDExists},
	// Promotions.
	{promoteCC(1), ErrMemberNotLearner},
	{promoteCC(9), ErrIDNotFound},
	{promoteCC(4), nil},
	{promoteCC(4), ErrMemberNotLearner},
	// Updates.
	{updateCC(2, "http://a:2380"), ErrPeerURLExists},
	{updateCC(2, "http://b:2380", "http://b2:2380"), nil},
	{updateCC(9, "http://z:2380"), ErrIDNotFound},
	// A removed id can come back under no change.
	{removeCC(3), nil},
	{addCC(3, false, "http://c:2380"), ErrIDRemoved},
	{updateCC(3, "http://c:2380"), ErrIDRemoved},
	{removeCC(3), ErrIDRemoved},
	{promoteCC(3), ErrIDRemoved},
	{removeCC(9), ErrIDNotFound},
	// The removed member's URL is free again (etcd checks the members
	// only).
	{addCC(7, true, "http://c:2380"), nil},
	{removeCC(2), nil},
	{removeCC(4), nil},
	// Raft cannot lose its last voter (Strata's refusal; etcd's member
	// would crash on it).
	{removeCC(1), ErrLastVoter},
	{removeCC(7), nil},
	{&raftpb.ConfChange{Type: raftpb.ConfChangeAddNode.Enum(), NodeId: proto.Uint64(8), Context: []byte("{")}, ErrBadContext},
}

// TestViewDecidesAsEtcd applies the log above and checks each decision,
// and that a view persisted part way decides the rest alike and knows
// which replayed indexes were refused.
func TestViewDecidesAsEtcd(t *testing.T) {
	db, err := pagestore.Open(filepath.Join(t.TempDir(), "db"), &pagestore.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	v := NewView()
	const cut = 14
	var refused []uint64
	for i, st := range viewSteps {
		idx := uint64(i + 1)
		if got := v.Apply(idx, st.cc, 1); !errors.Is(got, st.want) {
			t.Fatalf("index %d: %v %x: got %v, etcd's is %v", idx, st.cc.GetType(), st.cc.GetNodeId(), got, st.want)
		}
		if st.want != nil {
			refused = append(refused, idx)
		}
		if idx != cut {
			continue
		}
		if err := db.Update(func(tx *pagestore.Tx) error { v.Persist(pageWriter{t, tx}); return nil }); err != nil {
			t.Fatal(err)
		}
		// A restarted member: its view, loaded at the cut, decides the
		// rest of the log as the running one does, and answers for the
		// replayed indexes from the refused ones.
		var w *View
		if err := db.View(func(tx *pagestore.Tx) (err error) { w, err = LoadView(tx, cut); return err }); err != nil {
			t.Fatal(err)
		}
		for j := uint64(1); j <= cut; j++ {
			wantRefused := viewSteps[j-1].want != nil
			if w.Refused(j) != wantRefused {
				t.Fatalf("reloaded view: index %d refused=%v, want %v", j, w.Refused(j), wantRefused)
			}
		}
		for k, rest := range viewSteps[cut:] {
			if got := w.Apply(uint64(cut+k+1), rest.cc, 1); !errors.Is(got, rest.want) {
				t.Fatalf("reloaded view, index %d: got %v, want %v", cut+k+1, got, rest.want)
			}
		}
	}
	if len(refused) != len(v.refused) {
		t.Fatalf("refused indexes %v, want %v", v.refused, refused)
	}
}

// TestLoadViewWithoutRecord: a state with no persisted view is a new
// member's at index 0 (empty, whatever its members buckets say), or an
// etcd or restored state, whose members buckets are the view.
func TestLoadViewWithoutRecord(t *testing.T) {
	db, err := pagestore.Open(filepath.Join(t.TempDir(), "db"), &pagestore.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s := NewSet()
	s.Add(&Member{ID: 1, PeerURLs: []string{"http://a:2380"}})
	s.Add(&Member{ID: 2, PeerURLs: []string{"http://b:2380"}, IsLearner: true})
	if err := db.Update(func(tx *pagestore.Tx) error {
		s.Persist(pageWriter{t, tx})
		pageWriter{t, tx}.Put([]byte("members_removed"), Key(3), []byte("removed"))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	load := func(ci uint64) *View {
		var v *View
		if err := db.View(func(tx *pagestore.Tx) (err error) { v, err = LoadView(tx, ci); return err }); err != nil {
			t.Fatal(err)
		}
		return v
	}
	if err := load(0).Apply(1, addCC(1, false, "http://a:2380"), 1); err != nil {
		t.Fatalf("index 0: the bootstrap add of member 1 refused: %v", err)
	}
	v := load(40)
	// A clone decides on its own: a change applied to it leaves v as it was.
	// (Below, v still promotes learner 2.)
	if err := v.Clone().Apply(41, promoteCC(2), 1); err != nil {
		t.Fatalf("clone: promoting member 2: %v", err)
	}
	for _, c := range []struct {
		cc   *raftpb.ConfChange
		want error
	}{
		{addCC(1, false, "http://x:2380"), ErrIDExists},
		{addCC(5, true, "http://b:2380"), ErrPeerURLExists},
		{addCC(3, false, "http://c:2380"), ErrIDRemoved},
		{addCC(6, true, "http://f:2380"), ErrTooManyLearners},
		{promoteCC(2), nil},
	} {
		if got := v.Apply(41, c.cc, 1); !errors.Is(got, c.want) {
			t.Fatalf("from the members buckets: %v %x: got %v, want %v", c.cc.GetType(), c.cc.GetNodeId(), got, c.want)
		}
	}
}
