package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/strata-db/strata/internal/poll"
	"github.com/strata-db/strata/internal/testseed"
	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/server/config"
	"github.com/strata-db/strata/vfs"
)

// TestReceivedSnapshotCorruptionMatrix damages a received snapshot
// file. A follower of a 3-member cluster loses its power right
// after its WAL recorded a leader's snapshot and before the received image
// became its page store, so at the next start it must finish the install
// from the image waiting in member/snap (raft's finishInstall). The image
// is then damaged, one case at a time, on every page: bit flips (in the
// page header and at a random byte), a zeroed 512-byte sector, and
// truncations at and inside pages. Each case must end as either
//
//   - refused: the member does not start, with an error that wraps
//     pagestore.ErrCorrupt and names the image file, the offset of the
//     damage (or the file's short size) and what to do; or
//   - unharmed: it starts, and its page store holds exactly what the
//     undamaged image gives (the damage hit bytes no reader uses).
//
// A member that starts on different data is a silent corruption, and
// fails the test. STRATA_SNAPSHOT_MATRIX_CASES bounds the cases (default
// 120, drawn at random from the full list; make powerloss-long runs
// 1000).
func TestReceivedSnapshotCorruptionMatrix(t *testing.T) {
	seed := testseed.Seed(t)
	rng := rand.New(rand.NewPCG(seed, seed^0x0b5e55ed1c0de5a1))
	limit := envCount("STRATA_SNAPSHOT_MATRIX_CASES", 120)
	victim, image := interruptedInstall(t, rng)
	tree := readTree(t, victim.dir)
	orig := tree.file(t, image)
	cfg, err := config.Parse(victim.args, nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	// What the member holds after an undamaged install.
	start := func() (string, error) {
		s, err := newServer(cfg, nil, storageHooks{})
		if err != nil {
			return "", err
		}
		if err := s.Stop(); err != nil {
			t.Fatalf("stop: %v", err)
		}
		return dumpPageStore(t, cfg.BackendPath()), nil
	}
	tree.restore(t, victim.dir, image, orig)
	rep, err := pagestore.CheckFile(image, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Err(); err != nil {
		t.Fatalf("the undamaged image does not check: %v", err)
	}
	want, err := start()
	if err != nil {
		t.Fatalf("the member does not start on the undamaged image: %v", err)
	}
	ps := rep.PageSize
	pages := len(orig) / ps

	type damage struct {
		what   string
		mutate func([]byte) []byte
	}
	var all []damage
	flip := func(off int) damage {
		return damage{fmt.Sprintf("bit flip at %d (page %d)", off, off/ps), func(b []byte) []byte {
			b[off] ^= 1 << (off % 8)
			return b
		}}
	}
	for p := 0; p < pages; p++ {
		base := p * ps
		for i := 0; i < 2; i++ {
			all = append(all, flip(base+rng.IntN(32)))
		}
		for i := 0; i < 4; i++ {
			all = append(all, flip(base+32+rng.IntN(ps-32)))
		}
		for i := 0; i < 2; i++ {
			sector := base + 512*rng.IntN(ps/512)
			all = append(all, damage{fmt.Sprintf("zeroed sector at %d (page %d)", sector, p), func(b []byte) []byte {
				clear(b[sector : sector+512])
				return b
			}})
		}
		for _, cut := range []int{base, base + 1 + rng.IntN(ps-1)} {
			if cut == 0 {
				continue
			}
			all = append(all, damage{fmt.Sprintf("truncated at %d (page %d)", cut, p), func(b []byte) []byte { return b[:cut] }})
		}
	}
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	if len(all) > limit {
		all = all[:limit]
	}
	refused, unharmed := 0, 0
	for _, d := range all {
		tree.restore(t, victim.dir, image, d.mutate(append([]byte(nil), orig...)))
		got, err := start()
		if err != nil {
			msg := err.Error()
			switch {
			case !errors.Is(err, pagestore.ErrCorrupt):
				t.Errorf("%s: refused, but not as a corruption: %v", d.what, err)
			case !strings.Contains(msg, image):
				t.Errorf("%s: the refusal does not name the image %s: %v", d.what, image, err)
			case !strings.Contains(msg, "offset") && !strings.Contains(msg, " bytes but "):
				t.Errorf("%s: the refusal names neither an offset nor the file's size: %v", d.what, err)
			case !strings.Contains(msg, "delete its data directory and add it again"):
				t.Errorf("%s: the refusal does not say what to do: %v", d.what, err)
			}
			refused++
			continue
		}
		if got != want {
			t.Errorf("%s: SILENT: the member started on different data", d.what)
			continue
		}
		unharmed++
	}
	t.Logf("CORRUPTION received snapshot: %d cases over %d pages of %s: %d refused, %d unharmed, 0 silent",
		len(all), pages, filepath.Base(image), refused, unharmed)
}

// interruptedInstall runs a 3-member cluster until one follower has to
// catch up by a snapshot, and cuts that follower's power right after its
// WAL recorded the snapshot, as the image is renamed over its page store
// (the rename is lost with the power). It stops the cluster and returns
// the follower and the image that waits in its snapshot directory.
func interruptedInstall(t *testing.T, rng *rand.Rand) (*clusterMember, string) {
	t.Helper()
	route := newRouteFS()
	c := newTestClusterHooked(t, 3, storageHooks{walFS: route, dbFS: route}, "--snapshot-count=40", "--snapshot-catchup-entries=10")
	lead := c.leader()
	victim := c.followers()[0]
	c.stop(victim)
	// Values larger than a page that do not compress (overflow runs), and
	// small ones that do (compressed values in leaves).
	big := string(incompressible(8400, byte(rng.Uint32())))
	for i := 0; i < 500; i++ {
		v := fmt.Sprintf("%d-%s", i, strings.Repeat("v", rng.IntN(200)))
		if i%25 == 0 {
			v += big
		}
		if _, err := lead.kv.Put(ctxT(t), &pb.PutRequest{Key: []byte(fmt.Sprintf("k%03d", rng.IntN(300))), Value: []byte(v)}); err != nil {
			t.Fatal(err)
		}
	}
	snapDir := filepath.Join(victim.dir, "member", "snap")
	var (
		mu    sync.Mutex
		image string
	)
	var pc *powerCut
	pc = newWatchedPowerCut(1<<62, func(ev vfs.Event, n int64) {
		if ev.Op == vfs.OpRename && filepath.Dir(ev.Path) == snapDir && strings.HasSuffix(ev.Path, ".snap.db") {
			mu.Lock()
			image = ev.Path
			mu.Unlock()
			pc.at.Store(n)
		}
	})
	route.route(victim.dir, pc.fs)
	vs := serveOn(t, victim.args, c.hooks)
	if vs == nil {
		t.Fatalf("%s did not start", victim.name)
	}
	poll.Until(t, victim.name+" to reach the install's last rename", func() bool { return pc.fs.Crashed() })
	_ = vs.Stop()
	pc.cut(t, 0)
	route.route(victim.dir, vfs.Default)
	c.stopAll()
	mu.Lock()
	defer mu.Unlock()
	if _, err := os.Stat(image); err != nil {
		t.Fatalf("no image waits for the install after the cut: %v", err)
	}
	return victim, image
}

// dataTree is a data directory held in memory, zero runs left out (the
// WAL's preallocated segments), to put it back quickly before each case.
type dataTree []treeFile

type treeFile struct {
	rel     string
	size    int64
	extents map[int64][]byte // offset -> non-zero bytes
}

const treeChunk = 64 << 10

func readTree(t *testing.T, dir string) dataTree {
	t.Helper()
	var tree dataTree
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		f := treeFile{rel: rel, size: int64(len(b)), extents: map[int64][]byte{}}
		for off := 0; off < len(b); off += treeChunk {
			chunk := b[off:min(off+treeChunk, len(b))]
			if !bytes.Equal(chunk, make([]byte, len(chunk))) {
				f.extents[int64(off)] = chunk
			}
		}
		tree = append(tree, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

// file returns the bytes of the file at path (inside the tree's dir).
func (tr dataTree) file(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// restore puts dir back as the tree held it, with override as the
// content of the file at path.
func (tr dataTree) restore(t *testing.T, dir, path string, override []byte) {
	t.Helper()
	if err := os.RemoveAll(filepath.Join(dir, "member")); err != nil {
		t.Fatal(err)
	}
	for _, tf := range tr {
		p := filepath.Join(dir, tf.rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if p == path {
			if err := os.WriteFile(p, override, 0o600); err != nil {
				t.Fatal(err)
			}
			continue
		}
		f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		for off, b := range tf.extents {
			if _, err := f.WriteAt(b, off); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.Truncate(tf.size); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
}

// dumpPageStore reads every bucket of the page store at path, offline,
// into one string: two stores hold the same data if their dumps are equal.
func dumpPageStore(t *testing.T, path string) string {
	t.Helper()
	db, err := pagestore.Open(path, &pagestore.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer db.Close()
	var b strings.Builder
	err = db.View(func(tx *pagestore.Tx) error {
		return tx.ForEach(func(name []byte, bk *pagestore.Bucket) error {
			fmt.Fprintf(&b, "[%q]\n", name)
			return bk.ForEach(func(k, v []byte) error {
				fmt.Fprintf(&b, "%q=%q\n", k, v)
				return nil
			})
		})
	})
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return b.String()
}
