package membership

import (
	"net/url"
	"path/filepath"
	"reflect"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/schema"
)

// TestIDsAreEtcds checks the derivations against the ids etcd 3.7 gives a
// default single member (etcd --name default, token etcd-cluster).
func TestIDsAreEtcds(t *testing.T) {
	u, _ := url.Parse("http://localhost:2380")
	id := MemberID([]url.URL{*u}, "etcd-cluster")
	if id != 0x8e9e05c52164694d {
		t.Fatalf("member id %x, etcd's is 8e9e05c52164694d", id)
	}
	if c := ClusterID([]uint64{id}); c != 0xcdf818194e3a8c32 {
		t.Fatalf("cluster id %x, etcd's is cdf818194e3a8c32", c)
	}
}

// pageWriter persists into a page-store transaction.
type pageWriter struct {
	t  *testing.T
	tx *pagestore.Tx
}

func (w pageWriter) Put(bucket, k, v []byte) {
	b, err := w.tx.CreateBucketIfNotExists(bucket)
	if err == nil {
		err = b.Put(k, v)
	}
	if err != nil {
		w.t.Fatal(err)
	}
}

func (w pageWriter) Delete(bucket, k []byte) {
	b, err := w.tx.Bucket(bucket)
	if err == nil {
		err = b.Delete(k)
	}
	if err != nil {
		w.t.Fatal(err)
	}
}

// TestConfChangesPersist applies conf changes through a page store and
// reads them back as a restarted member would.
func TestConfChangesPersist(t *testing.T) {
	db, err := pagestore.Open(filepath.Join(t.TempDir(), "db"), &pagestore.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s := NewSet()
	s.Add(&Member{ID: 1, Name: "a", PeerURLs: []string{"http://a:2380"}})
	apply := func(cc *raftpb.ConfChange) {
		if err := db.Update(func(tx *pagestore.Tx) error {
			s.ApplyConfChange(cc, pageWriter{t, tx})
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Update(func(tx *pagestore.Tx) error { s.Persist(pageWriter{t, tx}); return nil }); err != nil {
		t.Fatal(err)
	}
	b := &Member{ID: 2, PeerURLs: []string{"http://b:2380"}}
	c := &Member{ID: 3, PeerURLs: []string{"http://c:2380"}, IsLearner: true}
	apply(&raftpb.ConfChange{Type: raftpb.ConfChangeAddNode.Enum(), NodeId: proto.Uint64(2), Context: b.JSON()})
	apply(&raftpb.ConfChange{Type: raftpb.ConfChangeAddLearnerNode.Enum(), NodeId: proto.Uint64(3), Context: c.JSON()})
	apply(&raftpb.ConfChange{Type: raftpb.ConfChangeRemoveNode.Enum(), NodeId: proto.Uint64(2)})
	apply(&raftpb.ConfChange{Type: raftpb.ConfChangeUpdateNode.Enum(), NodeId: proto.Uint64(3),
		Context: (&Member{ID: 3, PeerURLs: []string{"http://c2:2380"}}).JSON()})
	apply(&raftpb.ConfChange{Type: raftpb.ConfChangeRemoveNode.Enum(), NodeId: proto.Uint64(9)}) // unknown: no-op

	r := NewSet()
	if ok, err := r.Load(db); err != nil || !ok {
		t.Fatalf("load: %v %v", ok, err)
	}
	want := []*Member{{ID: 1, Name: "a", PeerURLs: []string{"http://a:2380"}}, {ID: 3, PeerURLs: []string{"http://c2:2380"}, IsLearner: true}}
	if got := r.List(); !reflect.DeepEqual(got, want) {
		t.Fatalf("members after reload %+v, want %+v", got, want)
	}
	if !r.IsRemoved(2) || r.IsRemoved(1) || r.Learners() != 1 {
		t.Fatalf("removed/learners wrong: %v %v %d", r.IsRemoved(2), r.IsRemoved(1), r.Learners())
	}
	if err := db.View(func(tx *pagestore.Tx) error {
		b, err := tx.Bucket(schema.Members)
		if err != nil {
			return err
		}
		v, err := b.Get([]byte("0000000000000001"))
		if string(v) != `{"id":1,"name":"a","peerURLs":["http://a:2380"]}` {
			t.Errorf("record of member 1: %s", v)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

func TestRestored(t *testing.T) {
	a, _ := url.Parse("http://10.0.0.1:2380")
	b, _ := url.Parse("http://10.0.0.2:2380")
	r, err := NewRestored("m1", map[string][]url.URL{"m1": {*a}, "m2": {*b}}, "tok")
	if err != nil {
		t.Fatal(err)
	}
	if r.Self != MemberID([]url.URL{*a}, "tok") || len(r.Members) != 2 || r.Members[0].ID > r.Members[1].ID {
		t.Fatalf("%+v", r)
	}
	if r.Cluster != ClusterID([]uint64{r.Members[0].ID, r.Members[1].ID}) {
		t.Fatal("cluster id")
	}
	if _, err := NewRestored("m3", map[string][]url.URL{"m1": {*a}}, "tok"); err == nil {
		t.Fatal("a name outside the initial cluster was accepted")
	}
}
