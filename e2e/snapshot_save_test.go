package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/strata-db/strata/e2e/harness"
)

// TestSnapshotSaveUnderLoadRestoresInEtcd: 'etcdctl
// snapshot save' against a running strata, while clientv3 writers keep
// writing, gives a file etcd's own tools take. 'etcdutl snapshot status'
// reads it, 'etcdutl snapshot restore' makes an etcd data dir of it, and
// the etcd started there serves the same keys, revisions and HashKV (at
// the snapshot's revision) as strata; 'stratautl snapshot restore' of the
// same file gives a strata that does too. It logs the save's throughput
// against strata (under load and idle) and against the restored etcd
// with the same data, and strata's RSS during the saves.
//
//	make build && cd e2e && STRATA_E2E_TARGET=../bin/strata go test -run TestSnapshotSaveUnderLoad -count=1 -v .
//
// STRATA_E2E_SNAPSHOT_MB sets the data size (default 24).
func TestSnapshotSaveUnderLoadRestoresInEtcd(t *testing.T) {
	b := needBins(t)
	target := os.Getenv("STRATA_E2E_TARGET")
	if target == "" {
		t.Skip("SKIP: set STRATA_E2E_TARGET to the strata binary (make build writes ../bin/strata)")
	}
	strataBin, err := filepath.Abs(target)
	if err != nil {
		t.Fatal(err)
	}
	stratautl, err := harness.Stratautl(strataBin)
	if err != nil {
		t.Fatal(err)
	}
	dataMB := 24
	if v := os.Getenv("STRATA_E2E_SNAPSHOT_MB"); v != "" {
		if dataMB, err = strconv.Atoi(v); err != nil {
			t.Fatalf("STRATA_E2E_SNAPSHOT_MB: %v", err)
		}
	}
	work := t.TempDir()
	srv := startServer(t, strataBin, "strata")
	cli := newClient(t, srv.ClientURL)
	loadSnapshotData(t, cli, dataMB)

	// Writers run through the save.
	var acks atomic.Int64
	stop := make(chan struct{})
	started := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := cli.Put(ctx, fmt.Sprintf("/load/w%d/%06d", w, i), strings.Repeat("x", 100+i%400))
				cancel()
				if err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
				if acks.Add(1) >= 200 {
					once.Do(func() { close(started) })
				}
			}
		}()
	}
	stopWriters := func() {
		select {
		case <-stop:
		default:
			close(stop)
			wg.Wait()
		}
	}
	defer stopWriters()
	<-started

	ctl := &harness.Ctl{Bin: b.Etcdctl, Endpoints: []string{srv.ClientURL}, Timeout: 10 * time.Minute}
	snap := filepath.Join(work, "snap.db")
	before := acks.Load()
	loaded := timedSave(t, ctl, srv.Pid(), snap)
	during := acks.Load() - before
	stopWriters()
	if during == 0 {
		t.Fatalf("no write was acknowledged during the %v save: the test did not save under load", loaded.took)
	}
	t.Logf("snapshot save against strata under load: %s; %d puts acknowledged meanwhile", loaded, during)
	t.Logf("strata: %s", serverSnapshotLog(srv))

	// etcd's tools take the file.
	st := snapshotStatus(t, b.Etcdutl, snap)
	rev := st.Revision
	t.Logf("etcdutl snapshot status: %+v", st)
	want := dump(t, cli, rev)
	wantHash := hashKV(t, cli, srv.ClientURL, rev)
	if want.count != st.TotalKey {
		t.Errorf("etcdutl counts %d keys, strata serves %d at revision %d", st.TotalKey, want.count, rev)
	}

	etcd, err := harness.NewServer(harness.ServerConfig{Bin: b.Etcd, Dir: filepath.Join(work, "etcd")})
	if err != nil {
		t.Fatal(err)
	}
	out := run(t, b.Etcdutl, "snapshot", "restore", snap, "--data-dir", etcd.DataDir, "--name", etcd.Name(),
		"--initial-cluster", etcd.Name()+"="+etcd.PeerURL, "--initial-cluster-token", "strata-e2e",
		"--initial-advertise-peer-urls", etcd.PeerURL)
	t.Logf("etcdutl snapshot restore: %s", strings.TrimSpace(out))
	if err := etcd.Start(); err != nil {
		t.Fatalf("etcd on the restored data dir: %v\n%s", err, etcd.LogTail(30))
	}
	defer etcd.Stop()
	ecli := newClient(t, etcd.ClientURL)
	sameData(t, "etcd restored by etcdutl", ecli, etcd.ClientURL, rev, want, wantHash)

	// stratautl restores the same file.
	srv2, err := harness.NewServer(harness.ServerConfig{Bin: strataBin, Dir: filepath.Join(work, "strata2")})
	if err != nil {
		t.Fatal(err)
	}
	out = run(t, stratautl, "snapshot", "restore", snap, "--data-dir", srv2.DataDir, "--name", srv2.Name(),
		"--initial-cluster", srv2.Name()+"="+srv2.PeerURL, "--initial-cluster-token", "strata-e2e",
		"--initial-advertise-peer-urls", srv2.PeerURL, "--no-progress")
	t.Logf("stratautl snapshot restore:\n%s", out)
	if err := srv2.Start(); err != nil {
		t.Fatalf("strata on the restored data dir: %v\n%s", err, srv2.LogTail(30))
	}
	defer srv2.Stop()
	sameData(t, "strata restored by stratautl", newClient(t, srv2.ClientURL), srv2.ClientURL, rev, want, wantHash)

	// Throughput with the same data: strata idle, and the etcd restored
	// from strata's snapshot.
	idle := timedSave(t, ctl, srv.Pid(), filepath.Join(work, "idle.db"))
	t.Logf("strata: %s", serverSnapshotLog(srv))
	ectl := &harness.Ctl{Bin: b.Etcdctl, Endpoints: []string{etcd.ClientURL}, Timeout: 10 * time.Minute}
	ref := timedSave(t, ectl, etcd.Pid(), filepath.Join(work, "etcd.db"))
	t.Logf("snapshot save, same data (%d MiB of values): strata under load %s; strata idle %s; etcd 3.7.3 %s",
		dataMB, loaded, idle, ref)
}

// loadSnapshotData writes about mb MiB: keys with values from 10 bytes
// to 20 KiB (large ones take overflow pages), overwrites and deletes (so
// keys have several revisions and tombstones), a compaction, and a lease
// with keys.
func loadSnapshotData(t *testing.T, cli *clientv3.Client, mb int) {
	t.Helper()
	rng := rand.New(rand.NewSource(17))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	type kv struct{ k, v string }
	var puts []kv
	for total, i := 0, 0; total < mb<<20; i++ {
		n := 10 + rng.Intn(2000)
		if rng.Intn(20) == 0 {
			n = 4000 + rng.Intn(16_000)
		}
		puts = append(puts, kv{fmt.Sprintf("/snap/%07d", i), strings.Repeat(string(rune('a'+i%26)), n)})
		total += n
	}
	work := make(chan kv)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range work {
				if _, err := cli.Put(ctx, p.k, p.v); err != nil {
					t.Errorf("put %s: %v", p.k, err)
				}
			}
		}()
	}
	for _, p := range puts {
		work <- p
	}
	close(work)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	mid, err := cli.Get(ctx, "/snap/")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(puts); i += 10 {
		if _, err := cli.Put(ctx, puts[i].k, "overwritten"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cli.Compact(ctx, mid.Header.Revision); err != nil {
		t.Fatal(err)
	}
	for i := 5; i < len(puts); i += 20 {
		if _, err := cli.Delete(ctx, puts[i].k); err != nil {
			t.Fatal(err)
		}
	}
	l, err := cli.Grant(ctx, 3600)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"/leased/a", "/leased/b"} {
		if _, err := cli.Put(ctx, k, "leased", clientv3.WithLease(l.ID)); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("loaded %d keys (%d MiB of values), compacted at %d", len(puts), mb, mid.Header.Revision)
}

func newClient(t *testing.T, url string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		MaxCallRecvMsgSize: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// saveResult is one timed 'etcdctl snapshot save'.
type saveResult struct {
	bytes int64
	took  time.Duration
	// The server's resident memory before and at its peak during the
	// save (sampled every 10 ms): all of it (VmRSS, which counts the
	// pages of a memory-mapped database file the save reads) and the
	// anonymous part (RssAnon: heap and stacks).
	base, peak memUse
}

type memUse struct{ rss, anon int64 }

func (r saveResult) String() string {
	return fmt.Sprintf("%.1f MiB in %v = %.0f MiB/s, server RSS %d MiB before, peak %d MiB during (anonymous %d MiB before, peak %d MiB)",
		float64(r.bytes)/(1<<20), r.took.Round(time.Millisecond), float64(r.bytes)/(1<<20)/r.took.Seconds(),
		r.base.rss>>20, r.peak.rss>>20, r.base.anon>>20, r.peak.anon>>20)
}

// timedSave runs etcdctl snapshot save to path, sampling the server's
// RSS while it runs.
func timedSave(t *testing.T, ctl *harness.Ctl, pid int, path string) saveResult {
	t.Helper()
	var r saveResult
	r.base = memory(pid)
	done := make(chan struct{})
	sampled := make(chan memUse)
	go func() {
		peak := r.base
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				sampled <- peak
				return
			case <-tick.C:
				m := memory(pid)
				peak.rss, peak.anon = max(peak.rss, m.rss), max(peak.anon, m.anon)
			}
		}
	}()
	start := time.Now()
	res := ctl.Run("", "--command-timeout=10m", "snapshot", "save", path)
	r.took = time.Since(start)
	close(done)
	r.peak = <-sampled
	if res.Code != 0 {
		t.Fatalf("etcdctl snapshot save: %s", res)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	r.bytes = fi.Size()
	return r
}

// serverSnapshotLog is what the server logged about its last snapshot.
func serverSnapshotLog(srv *harness.Server) string {
	var out []string
	for _, ln := range strings.Split(srv.LogTail(200), "\n") {
		if strings.Contains(ln, "database snapshot") {
			out = append(out, ln)
		}
	}
	if len(out) > 2 {
		out = out[len(out)-2:]
	}
	return strings.Join(out, "\n")
}

// memory reads a process's resident memory (zero if unknown).
func memory(pid int) memUse {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return memUse{}
	}
	var m memUse
	for _, ln := range strings.Split(string(b), "\n") {
		name, v, ok := strings.Cut(ln, ":")
		if !ok {
			continue
		}
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch name {
		case "VmRSS":
			m.rss = kb << 10
		case "RssAnon":
			m.anon = kb << 10
		}
	}
	return m
}

// keyDump is every key live at a revision, with its revisions.
type keyDump struct {
	count int
	kvs   []*mvccpb.KeyValue
}

func dump(t *testing.T, cli *clientv3.Client, rev int64) keyDump {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts := []clientv3.OpOption{clientv3.WithFromKey()}
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	r, err := cli.Get(ctx, "\x00", opts...)
	if err != nil {
		t.Fatal(err)
	}
	if rev > 0 && r.Header.Revision < rev {
		t.Fatalf("header revision %d below %d", r.Header.Revision, rev)
	}
	return keyDump{count: len(r.Kvs), kvs: r.Kvs}
}

type kvHash struct {
	hash              uint32
	compact, revision int64
}

func hashKV(t *testing.T, cli *clientv3.Client, url string, rev int64) kvHash {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := cli.HashKV(ctx, url, rev)
	if err != nil {
		t.Fatal(err)
	}
	return kvHash{hash: r.Hash, compact: r.CompactRevision, revision: r.HashRevision}
}

// sameData checks a restored server serves, at its current revision
// (which must be rev), what strata served at rev.
func sameData(t *testing.T, what string, cli *clientv3.Client, url string, rev int64, want keyDump, wantHash kvHash) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cur, err := cli.Get(ctx, "/snap/0000000")
	if err != nil {
		t.Fatal(err)
	}
	if cur.Header.Revision != rev {
		t.Errorf("%s is at revision %d, the snapshot at %d", what, cur.Header.Revision, rev)
	}
	got := dump(t, cli, 0)
	if got.count != want.count {
		t.Fatalf("%s serves %d keys, strata served %d at revision %d", what, got.count, want.count, rev)
	}
	for i := range want.kvs {
		w, g := want.kvs[i], got.kvs[i]
		if !bytes.Equal(w.Key, g.Key) || !bytes.Equal(w.Value, g.Value) || w.CreateRevision != g.CreateRevision ||
			w.ModRevision != g.ModRevision || w.Version != g.Version || w.Lease != g.Lease {
			t.Fatalf("%s: key %d differs:\n got %s create %d mod %d version %d lease %x (%d bytes)\nwant %s create %d mod %d version %d lease %x (%d bytes)",
				what, i, g.Key, g.CreateRevision, g.ModRevision, g.Version, g.Lease, len(g.Value),
				w.Key, w.CreateRevision, w.ModRevision, w.Version, w.Lease, len(w.Value))
		}
	}
	if h := hashKV(t, cli, url, rev); h != wantHash {
		t.Fatalf("%s: HashKV at %d is %+v, strata's %+v", what, rev, h, wantHash)
	}
	t.Logf("%s: the same %d keys at revision %d, HashKV %+v", what, got.count, rev, wantHash)
}
