package etcdsnap

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	"github.com/strata-db/strata/membership"
	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/schema"
	"github.com/strata-db/strata/version"
)

// pageWriter persists membership into a page-store transaction.
type pageWriter struct {
	t  *testing.T
	tx *pagestore.Tx
}

func (w pageWriter) Put(bucket, k, v []byte) {
	if err := put(w.tx, string(bucket), k, v); err != nil {
		w.t.Fatal(err)
	}
}

func (w pageWriter) Delete(bucket, k []byte) {}

// strataMember writes what a Strata member's page store holds: keys,
// meta, a lease, auth, an alarm, a membership with a removed member, and
// a bucket of Strata's own.
func strataMember(t *testing.T, keys int) *pagestore.DB {
	return openStore(t, func(tx *pagestore.Tx) error {
		for i := 1; i <= keys; i++ {
			kv := &mvccpb.KeyValue{Key: fmt.Appendf(nil, "k%05d", i%1000), Value: fmt.Appendf(nil, "v%d", i),
				CreateRevision: int64(i), ModRevision: int64(i), Version: 1}
			v, _ := proto.Marshal(kv)
			rk := binary.BigEndian.AppendUint64(nil, uint64(i+1))
			rk = append(rk, '_')
			rk = binary.BigEndian.AppendUint64(rk, 0)
			if err := put(tx, "key", rk, v); err != nil {
				return err
			}
		}
		for k, v := range map[string][]byte{
			"consistent_index":    binary.BigEndian.AppendUint64(nil, 4242),
			"term":                binary.BigEndian.AppendUint64(nil, 7),
			"scheduledCompactRev": binary.BigEndian.AppendUint64(nil, 3),
			"finishedCompactRev":  binary.BigEndian.AppendUint64(nil, 3),
		} {
			if err := put(tx, "meta", []byte(k), v); err != nil {
				return err
			}
		}
		put(tx, "lease", binary.BigEndian.AppendUint64(nil, 0x1234), []byte{8, 1, 16, 60})
		put(tx, "auth", []byte("authEnabled"), []byte{0})
		put(tx, "alarm", []byte{8, 1, 16, 1}, nil)
		put(tx, "strata_own", []byte("x"), []byte("y"))
		ms := membership.NewSet()
		ms.Add(&membership.Member{ID: 0x8e9e05c52164694d, Name: "default", PeerURLs: []string{"http://localhost:2380"},
			ClientURLs: []string{"http://localhost:2379"}})
		ms.Add(&membership.Member{ID: 0x0abc, PeerURLs: []string{"http://l:2380"}, IsLearner: true})
		ms.Persist(pageWriter{t, tx})
		return put(tx, "members_removed", membership.Key(0x77), []byte("removed"))
	})
}

// TestEtcdSchema writes a Strata member's page store as an etcd
// snapshot.db and reads it as etcd would.
func TestEtcdSchema(t *testing.T) {
	db := strataMember(t, 5000)
	tx, err := db.Begin(false)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	seen := map[string]int{}
	e, err := PlanEtcd(context.Background(), tx, EtcdOptions{Observe: func(b, k, v []byte) error {
		seen[string(b)]++
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if e.RaftIndex != 4242 || e.RaftTerm != 7 || e.Members != 2 || strings.Join(e.Skipped, ",") != "strata_own" {
		t.Errorf("plan: index %d term %d members %d skipped %q", e.RaftIndex, e.RaftTerm, e.Members, e.Skipped)
	}
	path := writeFile(t, e.Snapshot.buckets)
	if seen["key"] != 5000 || seen["lease"] != 1 || seen["meta"] != 6 || seen["members"] != 0 {
		t.Errorf("observed %v", seen)
	}
	bdb, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer bdb.Close()
	err = bdb.View(func(btx *bolt.Tx) error {
		for err := range btx.Check() {
			t.Errorf("tx.Check: %v", err)
		}
		var names []string
		btx.ForEach(func(name []byte, b *bolt.Bucket) error {
			names = append(names, string(name))
			return nil
		})
		if got := strings.Join(names, ","); got != "alarm,auth,authRoles,authUsers,cluster,key,lease,members,members_removed,meta" {
			t.Errorf("buckets %s", got)
		}
		meta := btx.Bucket(schema.Meta)
		for k, want := range map[string]string{
			"consistent_index":    string(binary.BigEndian.AppendUint64(nil, 4242)),
			"term":                string(binary.BigEndian.AppendUint64(nil, 7)),
			"storageVersion":      version.Cluster,
			"confState":           `{"voters":[10276657743932975437],"learners":[2748],"auto_leave":false}`,
			"scheduledCompactRev": string(binary.BigEndian.AppendUint64(nil, 3)),
		} {
			if got := string(meta.Get([]byte(k))); got != want {
				t.Errorf("meta %s = %q, want %q", k, got, want)
			}
		}
		if n := meta.Stats().KeyN; n != 6 {
			t.Errorf("meta has %d keys, want 6", n)
		}
		if v := string(btx.Bucket(schema.Members).Get([]byte("8e9e05c52164694d"))); v !=
			`{"id":10276657743932975437,"peerURLs":["http://localhost:2380"],"name":"default","clientURLs":["http://localhost:2379"]}` {
			t.Errorf("member record %s", v)
		}
		if v := string(btx.Bucket(schema.Members).Get([]byte("abc"))); !strings.Contains(v, `"isLearner":true`) {
			t.Errorf("learner record %s", v)
		}
		if v := string(btx.Bucket(schema.MembersRemoved).Get([]byte("77"))); v != "removed" {
			t.Errorf("removed member %q", v)
		}
		if v := string(btx.Bucket(schema.Cluster).Get(schema.ClusterVersionKey)); v != version.Cluster {
			t.Errorf("cluster version %q", v)
		}
		// Small buckets are inline, as bbolt stores them; the key
		// bucket is not.
		if st := btx.Bucket(schema.Meta).Stats(); st.InlineBucketN != 1 {
			t.Errorf("meta is not inline: %+v", st)
		}
		if st := btx.Bucket(schema.Key).Stats(); st.InlineBucketN != 0 || st.KeyN != 5000 || st.Depth < 2 {
			t.Errorf("key bucket stats %+v", st)
		}
		// The data buckets are the store's, record for record.
		for _, name := range []string{"key", "lease", "auth", "alarm"} {
			b, err := tx.Bucket([]byte(name))
			if err != nil {
				return err
			}
			bb := btx.Bucket([]byte(name))
			n := 0
			if err := b.ForEach(func(k, v []byte) error {
				if !bytes.Equal(bb.Get(k), v) {
					t.Errorf("%s %x differs", name, k)
				}
				n++
				return nil
			}); err != nil {
				return err
			}
			if bb.Stats().KeyN != n {
				t.Errorf("%s has %d records, the store %d", name, bb.Stats().KeyN, n)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestOneReadViewWhileWriting writes the snapshot of a read transaction
// while another goroutine keeps committing puts, deletes and new buckets:
// the file must hold exactly what the read transaction sees. The second
// pass starts only once the writer has committed, so the two passes
// straddle writes.
func TestOneReadViewWhileWriting(t *testing.T) {
	db := openStore(t, func(tx *pagestore.Tx) error {
		for i := 0; i < 20_000; i++ {
			if err := put(tx, "key", revKey(int64(i)), fmt.Appendf(nil, "v%d", i)); err != nil {
				return err
			}
		}
		return nil
	})
	tx, err := db.Begin(false)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var commits atomic.Int64
	enough := make(chan struct{})
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			err := db.Update(func(wtx *pagestore.Tx) error {
				b, err := wtx.Bucket([]byte("key"))
				if err != nil {
					return err
				}
				for j := 0; j < 100; j++ {
					if err := b.Delete(revKey(int64((i*100 + j) % 20_000))); err != nil {
						return err
					}
					if err := b.Put(revKey(int64(20_000+i*100+j)), []byte("new")); err != nil {
						return err
					}
				}
				return put(wtx, fmt.Sprintf("new-%d", i), []byte("k"), []byte("v"))
			})
			if err != nil {
				done <- err
				return
			}
			if commits.Add(1) == 5 {
				close(enough)
			}
		}
	}()
	bs := rawBuckets(t, tx)
	for i := range bs {
		open, calls := bs[i].Open, 0
		bs[i].Open = func() (Records, error) {
			if calls++; calls == 2 {
				<-enough // the second pass runs after writes committed
			}
			return open()
		}
	}
	path := writeFile(t, bs)
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if commits.Load() < 5 {
		t.Fatalf("only %d commits during the snapshot", commits.Load())
	}
	bdb, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer bdb.Close()
	if err := bdb.View(func(btx *bolt.Tx) error { return compareStores(t, btx, tx) }); err != nil {
		t.Fatal(err)
	}
	bdb.View(func(btx *bolt.Tx) error {
		if n := btx.Bucket([]byte("key")).Stats().KeyN; n != 20_000 {
			t.Errorf("the snapshot has %d keys, the read view 20000", n)
		}
		return nil
	})
}

// TestMemoryBounded writes a 64 MiB store and checks that planning and
// writing allocate a small, fixed amount: records are streamed, never
// collected. The value does not compress: a value the page store keeps
// compressed is decoded into memory of its own at each read, garbage at
// once but counted by TotalAlloc.
func TestMemoryBounded(t *testing.T) {
	const records, vsize = 50_000, 1300 // about 64 MiB of data
	db := openStore(t, func(tx *pagestore.Tx) error {
		v := make([]byte, vsize)
		rand.NewChaCha8([32]byte{1}).Read(v)
		for i := 0; i < records; i++ {
			if err := put(tx, "key", revKey(int64(i)), v); err != nil {
				return err
			}
		}
		return nil
	})
	tx, err := db.Begin(false)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	e, err := PlanEtcd(context.Background(), tx, EtcdOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n, err := e.WriteTo(io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d MiB written, %d KiB allocated", n>>20, alloc>>10)
	if n < 64<<20 {
		t.Fatalf("only %d bytes written", n)
	}
	if alloc > 2<<20 {
		t.Fatalf("writing a %d MiB snapshot allocated %d KiB; want under 2 MiB", n>>20, alloc>>10)
	}
}
