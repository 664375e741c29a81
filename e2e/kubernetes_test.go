package e2e

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/strata-db/strata/e2e/harness"
)

// TestKubernetesShaped drives the target the way kube-apiserver's storage
// layer does, with clientv3: optimistic create/update/delete through
// mod_revision compares, paginated lists at a pinned revision, watches
// resumed from rv+1 with prev_kv and progress notifications, compaction,
// and leases that expire their keys.
func TestKubernetesShaped(t *testing.T) {
	b := needBins(t)
	srv, err := harness.NewServer(harness.ServerConfig{Bin: targetBin(t, b), Dir: t.TempDir(),
		Flags: []string{"--watch-progress-notify-interval=1s"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.ClientURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	key := func(i int) string { return fmt.Sprintf("/registry/pods/default/pod-%03d", i) }

	// Create: only if absent (mod_revision == 0).
	create := func(k, v string) (int64, bool) {
		r, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", 0)).Then(clientv3.OpPut(k, v)).Commit()
		must(err)
		return r.Header.Revision, r.Succeeded
	}
	revs := map[string]int64{}
	for i := 0; i < 25; i++ {
		rev, ok := create(key(i), "v1")
		if !ok {
			t.Fatalf("create %s failed", key(i))
		}
		revs[key(i)] = rev
	}
	if _, ok := create(key(0), "again"); ok {
		t.Fatal("second create of the same key succeeded")
	}
	// Update with the right and a stale resourceVersion.
	update := func(k, v string, rv int64) (*clientv3.TxnResponse, bool) {
		r, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", rv)).
			Then(clientv3.OpPut(k, v)).Else(clientv3.OpGet(k)).Commit()
		must(err)
		return r, r.Succeeded
	}
	r, ok := update(key(1), "v2", revs[key(1)])
	if !ok {
		t.Fatal("update with the current mod_revision failed")
	}
	staleRV := revs[key(1)]
	revs[key(1)] = r.Header.Revision
	r, ok = update(key(1), "v3", staleRV)
	if ok {
		t.Fatal("update with a stale mod_revision succeeded")
	}
	if got := r.Responses[0].GetResponseRange().Kvs[0]; got.ModRevision != revs[key(1)] || string(got.Value) != "v2" {
		t.Fatalf("conflict did not return the current object: %v", got)
	}
	// Delete with a precondition.
	dr, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key(2)), "=", revs[key(2)])).Then(clientv3.OpDelete(key(2))).Commit()
	must(err)
	if !dr.Succeeded {
		t.Fatal("conditional delete failed")
	}
	// Paginated list at a pinned revision: writes after the first page
	// are not seen by later pages.
	first, err := cli.Get(ctx, "/registry/pods/", clientv3.WithPrefix(), clientv3.WithLimit(10))
	must(err)
	listRev := first.Header.Revision
	if !first.More || len(first.Kvs) != 10 || first.Count != 24 {
		t.Fatalf("first page: more=%v kvs=%d count=%d", first.More, len(first.Kvs), first.Count)
	}
	_, err = cli.Put(ctx, key(99), "late")
	must(err)
	seen := len(first.Kvs)
	next := string(first.Kvs[len(first.Kvs)-1].Key) + "\x00"
	for {
		page, err := cli.Get(ctx, next, clientv3.WithRange(clientv3.GetPrefixRangeEnd("/registry/pods/")),
			clientv3.WithLimit(10), clientv3.WithRev(listRev))
		must(err)
		seen += len(page.Kvs)
		if page.Header.Revision == listRev {
			t.Fatal("header revision of a pinned read should be the current one")
		}
		if !page.More {
			break
		}
		next = string(page.Kvs[len(page.Kvs)-1].Key) + "\x00"
	}
	if seen != 24 {
		t.Fatalf("paginated list at revision %d saw %d objects, want 24", listRev, seen)
	}
	// Watch from rv+1 with prev_kv and progress notify: sees the late put
	// (after listRev) and a following update with its previous value.
	wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer wcancel()
	wch := cli.Watch(wctx, "/registry/pods/", clientv3.WithPrefix(), clientv3.WithRev(listRev+1),
		clientv3.WithPrevKV(), clientv3.WithProgressNotify())
	pr, err := cli.Put(ctx, key(99), "later")
	must(err)
	gotEvents, progress := 0, false
	deadline := time.After(20 * time.Second)
	for gotEvents < 2 || !progress {
		select {
		case wr := <-wch:
			must(wr.Err())
			if wr.IsProgressNotify() {
				if wr.Header.Revision < pr.Header.Revision && gotEvents == 2 {
					t.Fatalf("progress notify at %d after events up to %d", wr.Header.Revision, pr.Header.Revision)
				}
				progress = gotEvents == 2
				continue
			}
			for _, ev := range wr.Events {
				gotEvents++
				if gotEvents == 2 && (ev.PrevKv == nil || string(ev.PrevKv.Value) != "late" || ev.Kv.ModRevision != pr.Header.Revision) {
					t.Fatalf("second event %v, prev %v", ev.Kv, ev.PrevKv)
				}
			}
			if gotEvents == 2 && !progress {
				must(cli.RequestProgress(wctx))
			}
		case <-deadline:
			t.Fatalf("watch: %d events, progress %v", gotEvents, progress)
		}
	}
	// Compact, then a watch from an old revision fails with ErrCompacted.
	_, err = cli.Compact(ctx, pr.Header.Revision, clientv3.WithCompactPhysical())
	must(err)
	old := cli.Watch(ctx, "/registry/pods/", clientv3.WithPrefix(), clientv3.WithRev(listRev))
	select {
	case wr := <-old:
		if !errors.Is(wr.Err(), rpctypes.ErrCompacted) || wr.CompactRevision != pr.Header.Revision {
			t.Fatalf("watch below compaction: err %v compact %d", wr.Err(), wr.CompactRevision)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no answer to a watch below the compacted revision")
	}
	// Leases with a TTL expire their keys (events objects in Kubernetes).
	lg, err := cli.Grant(ctx, 2)
	must(err)
	_, err = cli.Put(ctx, "/registry/events/default/e1", "x", clientv3.WithLease(lg.ID))
	must(err)
	waitCondition(t, "the key of the expired lease to go", 10*time.Second, func() bool {
		g, err := cli.Get(ctx, "/registry/events/default/e1")
		must(err)
		return len(g.Kvs) == 0
	})
	ttl, err := cli.TimeToLive(ctx, lg.ID)
	must(err)
	if ttl.TTL != -1 {
		t.Fatalf("TimeToLive of the expired lease: %d, want -1", ttl.TTL)
	}
}
