package e2e

import (
	"testing"

	"go.etcd.io/etcd/client/pkg/v3/types"
	"go.etcd.io/etcd/server/v3/etcdserver"
	"go.etcd.io/etcd/server/v3/etcdserver/api/membership"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v2store"
	"go.uber.org/zap"

	"github.com/coreos/go-semver/semver"

	"github.com/strata-db/strata/etcdsnap"
	smembership "github.com/strata-db/strata/membership"
)

// TestV2StoreMatchesEtcd: the v2 store a Strata leader puts in a raft
// snapshot for an etcd follower (etcdsnap.V2Store) is one that etcd's
// own v2 store restores, and holds what etcd's leader puts in one for
// the same membership: every node's value, and a history that takes
// more writes.
func TestV2StoreMatchesEtcd(t *testing.T) {
	lg := zap.NewNop()
	urls := func(u ...string) types.URLs { return types.MustNewURLs(u) }
	m1 := membership.NewMember("m1", urls("http://10.0.0.1:2380"), "tok", nil)
	m1.ClientURLs = []string{"http://10.0.0.1:2379", "http://10.0.0.1:22379"}
	m2 := membership.NewMemberAsLearner("m2", urls("http://10.0.0.2:2380"), "tok", nil)
	m3 := membership.NewMember("m3", urls("http://10.0.0.3:2380", "http://10.0.0.3:12380"), "tok", nil)
	m3.ClientURLs = []string{"http://10.0.0.3:2379"}
	cl := membership.NewClusterFromMembers(lg, types.ID(0x1234), []*membership.Member{m1, m2, m3})
	cl.SetVersion(semver.New("3.6.0"), func(*zap.Logger, *semver.Version) {}, false)
	want := etcdserver.GetMembershipInfoInV2Format(lg, cl)

	var ours []*smembership.Member
	for _, m := range []*membership.Member{m1, m2, m3} {
		ours = append(ours, &smembership.Member{ID: uint64(m.ID), Name: m.Name, PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs, IsLearner: m.IsLearner})
	}
	got, err := etcdsnap.V2Store(ours, nil, "3.6.0")
	if err != nil {
		t.Fatal(err)
	}
	tree := func(data []byte) map[string]string {
		st := v2store.New("/0", "/1")
		if err := st.Recovery(data); err != nil {
			t.Fatalf("v2store.Recovery: %v\n%s", err, data)
		}
		out := map[string]string{}
		var walk func(n *v2store.NodeExtern)
		walk = func(n *v2store.NodeExtern) {
			if n.Dir {
				out[n.Key] = "(dir)"
			} else {
				out[n.Key] = *n.Value
			}
			for _, c := range n.Nodes {
				walk(c)
			}
		}
		for _, root := range []string{"/0", "/1"} {
			ev, err := st.Get(root, true, true)
			if err != nil {
				t.Fatal(err)
			}
			walk(ev.Node)
		}
		// The restored store takes more writes (its history is whole).
		for i := 0; i < 1200; i++ {
			if _, err := st.Set("/0/version", false, "3.7.0", v2store.TTLOptionSet{ExpireTime: v2store.Permanent}); err != nil {
				t.Fatalf("write %d after Recovery: %v", i, err)
			}
		}
		return out
	}
	w, g := tree(want), tree(got)
	if len(w) != len(g) {
		t.Errorf("%d nodes, etcd's has %d:\n got %v\nwant %v", len(g), len(w), g, w)
	}
	for k, v := range w {
		if g[k] != v {
			t.Errorf("%s = %q, etcd's %q", k, g[k], v)
		}
	}
	// A removed member, as etcd's RaftCluster.Store records one (etcd's
	// cluster offers no way to build one without a backend).
	withRemoved, err := etcdsnap.V2Store(ours[:2], []uint64{uint64(m3.ID)}, "3.6.0")
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := tree(withRemoved)["/0/removed_members/"+m3.ID.String()]; !ok || v != "" {
		t.Errorf("removed member: %q, %v", v, ok)
	}
}
