package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/strata-db/strata/e2e/harness"
)

// The full-disk tests run the real bin/strata on
// small tmpfs file systems that the test mounts, one for the WAL
// (--wal-dir) and one for the data dir, so each full disk is isolated. A
// ballast file fills a disk; deleting it is "space returns". tmpfs ignores
// fdatasync, which does not matter here: ENOSPC is what is under test.
//
// Short mode (the default, inside `make test`) runs each case once; long
// mode (STRATA_FULLDISK=long, `make robustness`) runs more cycles and
// hammers the full data disk for a minute. Both print what the client saw,
// RSS before and after, and how many acknowledged writes were read back.

func fullDiskLong() bool { return os.Getenv("STRATA_FULLDISK") == "long" }

// needStrataAsRoot returns the strata binary, or skips with the reason.
func needStrataAsRoot(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIP: the full-disk tests mount small tmpfs file systems, which needs root; run them as root (make robustness)")
	}
	p := os.Getenv("STRATA_E2E_TARGET")
	if p == "" {
		t.Skip("SKIP: the full-disk tests check Strata's own behaviour; set STRATA_E2E_TARGET=../bin/strata (make e2e does)")
	}
	bin, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("STRATA_E2E_TARGET: %v", err)
	}
	return bin
}

// mountTmpfs mounts a tmpfs of size bytes on a new directory and unmounts
// it when the test ends (after the server, whose cleanup runs first).
func mountTmpfs(t *testing.T, name string, size int64) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs on %s: %v: %s", dir, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// resizeTmpfs changes the size of the tmpfs mounted on dir.
func resizeTmpfs(t *testing.T, dir string, size int64) {
	t.Helper()
	if out, err := exec.Command("mount", "-o", fmt.Sprintf("remount,size=%d", size), dir).CombinedOutput(); err != nil {
		t.Fatalf("resize tmpfs on %s: %v: %s", dir, err, out)
	}
}

func statfs(t *testing.T, dir string) syscall.Statfs_t {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// usedBytes is what the files on dir's file system take.
func usedBytes(t *testing.T, dir string) int64 {
	st := statfs(t, dir)
	return int64(st.Blocks-st.Bfree) * int64(st.Bsize)
}

func freeBytes(t *testing.T, dir string) int64 {
	st := statfs(t, dir)
	return int64(st.Bavail) * int64(st.Bsize)
}

// fillDisk writes a ballast file into dir until only leave bytes are free.
func fillDisk(t *testing.T, dir string, leave int64) string {
	t.Helper()
	path := filepath.Join(dir, "ballast")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for {
		free := freeBytes(t, dir)
		if free <= leave {
			return path
		}
		n := min(int64(len(chunk)), free-leave)
		if _, err := f.Write(chunk[:n]); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return path
			}
			t.Fatal(err)
		}
	}
}

// memMiB is a process's memory from /proc: VmRSS, and RssAnon (its heap
// and stacks, without the page store's mapped file pages, which on tmpfs
// count as resident too).
type memMiB struct{ rss, anon float64 }

func (m memMiB) String() string { return fmt.Sprintf("%.0f (anon %.0f)", m.rss, m.anon) }

func readMem(pid int) memMiB {
	var m memMiB
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return m
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmRSS:":
			m.rss = kb / 1024
		case "RssAnon:":
			m.anon = kb / 1024
		}
	}
	return m
}

// rssSampler records the highest memory of a process until stopped.
type rssSampler struct {
	mu   sync.Mutex
	max  memMiB
	stop chan struct{}
	done chan struct{}
}

func sampleRSS(pid int) *rssSampler {
	r := &rssSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for {
			m := readMem(pid)
			r.mu.Lock()
			r.max.rss, r.max.anon = max(r.max.rss, m.rss), max(r.max.anon, m.anon)
			r.mu.Unlock()
			select {
			case <-r.stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return r
}

func (r *rssSampler) end() memMiB {
	close(r.stop)
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.max
}

// loadGen runs writers that put unique keys and records what the client
// saw: the acknowledged keys and every distinct error message.
type loadGen struct {
	cli     *clientv3.Client
	prefix  string
	valSize int

	mu       sync.Mutex
	seq      int
	acked    map[string]bool
	errs     map[string]int
	attempts int
	stop     chan struct{}
	wg       sync.WaitGroup
}

// valueOf is key's value: size pseudo-random bytes seeded by the key, so
// the WAL's compression cannot shrink it and a reader can check it.
func valueOf(key string, size int) string {
	h := fnv.New64a()
	h.Write([]byte(key))
	r := rand.New(rand.NewPCG(h.Sum64(), 17))
	b := make([]byte, 0, size+8)
	for len(b) < size {
		b = binary.LittleEndian.AppendUint64(b, r.Uint64())
	}
	return string(b[:size])
}

func newLoadGen(cli *clientv3.Client, prefix string, valSize int) *loadGen {
	return &loadGen{cli: cli, prefix: prefix, valSize: valSize, acked: map[string]bool{}, errs: map[string]int{}}
}

func (g *loadGen) start(writers int) {
	g.stop = make(chan struct{})
	for i := 0; i < writers; i++ {
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			for {
				select {
				case <-g.stop:
					return
				default:
				}
				if err := g.put(); err != nil {
					// A refused write comes back at once; do not spin.
					select {
					case <-g.stop:
						return
					case <-time.After(5 * time.Millisecond):
					}
				}
			}
		}()
	}
}

// put writes the next key and records the outcome.
func (g *loadGen) put() error {
	g.mu.Lock()
	g.seq++
	key := fmt.Sprintf("%s%07d", g.prefix, g.seq)
	g.attempts++
	g.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	_, err := g.cli.Put(ctx, key, valueOf(key, g.valSize))
	cancel()
	g.mu.Lock()
	if err == nil {
		g.acked[key] = true
	} else {
		g.errs[err.Error()]++
	}
	g.mu.Unlock()
	return err
}

// putUntil writes one key at a time, each acknowledged before the next,
// until cond holds; so the log is never more than one put past the point
// where cond first held.
func (g *loadGen) putUntil(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s (%s)", timeout, what, g.summary())
		}
		if err := g.put(); err != nil {
			t.Fatalf("a put while waiting for %s: %v (%s)", what, err, g.summary())
		}
	}
}

func (g *loadGen) halt() {
	close(g.stop)
	g.wg.Wait()
}

func (g *loadGen) sawError(substr string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for e := range g.errs {
		if strings.Contains(e, substr) {
			return true
		}
	}
	return false
}

func (g *loadGen) summary() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var es []string
	for e, n := range g.errs {
		es = append(es, fmt.Sprintf("%dx %q", n, e))
	}
	sort.Strings(es)
	if len(es) == 0 {
		es = []string{"no errors"}
	}
	return fmt.Sprintf("%d puts attempted (%d KiB values), %d acknowledged; errors: %s",
		g.attempts, g.valSize>>10, len(g.acked), strings.Join(es, ", "))
}

func (g *loadGen) ackedKeys() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]string, 0, len(g.acked))
	for k := range g.acked {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// verifyAcked reads every acknowledged key back and checks its value.
func verifyAcked(t *testing.T, cli *clientv3.Client, keys []string, valSize int, deleted map[string]bool) int {
	t.Helper()
	n := 0
	for _, k := range keys {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := cli.Get(ctx, k)
		cancel()
		if err != nil {
			t.Fatalf("get acknowledged key %s: %v", k, err)
		}
		if deleted[k] {
			if len(resp.Kvs) != 0 {
				t.Fatalf("key %s deleted while the disk was full is back", k)
			}
			continue
		}
		if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != valueOf(k, valSize) {
			t.Fatalf("acknowledged key %s lost or changed (%d kvs)", k, len(resp.Kvs))
		}
		n++
	}
	return n
}

func waitCondition(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	if err := linPoll(timeout, 20*time.Millisecond, what, cond); err != nil {
		t.Fatal(err)
	}
}

// spareSegment reports whether dir holds a prepared next segment of the
// full 64 MiB (its blocks are reserved from the start of preparation).
func spareSegment(t *testing.T, dir string) bool {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if info, err := e.Info(); err == nil && strings.HasSuffix(e.Name(), ".wal.tmp") && info.Size() == 64*mib {
			return true
		}
	}
	return false
}

func walSegments(t *testing.T, dir string) []int64 {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int64
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".wal") {
			info, err := e.Info()
			if err != nil {
				t.Fatal(err)
			}
			sizes = append(sizes, info.Size())
		}
	}
	return sizes
}

func logText(t *testing.T, srv *harness.Server) string {
	t.Helper()
	b, err := os.ReadFile(srv.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func fatalLines(t *testing.T, srv *harness.Server) []string {
	var out []string
	for _, l := range strings.Split(logText(t, srv), "\n") {
		if strings.Contains(l, `"level":"fatal"`) {
			out = append(out, l)
		}
	}
	return out
}

func scrapeMetric(t *testing.T, url, name string) float64 {
	t.Helper()
	res, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

const mib = 1 << 20

// TestFullDiskWAL: the WAL's disk fills. While only the next segment
// cannot be preallocated, the member keeps appending to the current one
// and recovers by itself once space returns; when a write itself fails it
// exits with exactly one fatal line and a non-zero status, and, restarted
// after space returns (as systemd would), serves every acknowledged write.
func TestFullDiskWAL(t *testing.T) {
	bin := needStrataAsRoot(t)
	cycles := 1
	if fullDiskLong() {
		cycles = 3
	}
	// The first segment, its spare and a reduced segment cut once space
	// returns fill 144 MiB of 160. Each further cycle starts with the same
	// 160 MiB free: how many segments a cycle leaves behind depends on
	// timing (whether the first segment finished growing before the disk
	// filled, how far the log ran past a segment's size before its spare
	// came back), so a fixed total can run out in a later cycle.
	const cycleRoom = 160 * mib
	walFS := mountTmpfs(t, "walfs", cycleRoom)
	dataFS := mountTmpfs(t, "datafs", 1024*mib)
	walDir := filepath.Join(walFS, "wal")
	srv, err := harness.NewServer(harness.ServerConfig{Bin: bin, Dir: t.TempDir(), DataDir: filepath.Join(dataFS, "data"),
		Flags: []string{"--wal-dir=" + walDir, "--disk-probe=false"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the member's last log lines:\n%s", srv.LogTail(30))
		}
	})
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	cli := newClient(t, srv.ClientURL)
	defer func() { cli.Close() }()
	rssStart := readMem(srv.Pid())
	const valSize = 64 << 10
	gen := newLoadGen(cli, "w", valSize)

	// Phase 1: no room for the segment after the spare. Appends go on;
	// space returns; the log moves on by itself. The puts are one at a
	// time, so the log stops within a put of each condition: the disk is
	// full only while the writes stay inside preallocated space.
	for c := 0; c < cycles; c++ {
		if c > 0 {
			resizeTmpfs(t, walFS, usedBytes(t, walFS)+cycleRoom)
		}
		// The spare is prepared once the current segment is three quarters
		// full: write until it exists (the first time, 128 MiB of the 160).
		gen.putUntil(t, "the spare segment", 2*time.Minute, func() bool { return spareSegment(t, walDir) })
		segs := len(walSegments(t, walDir))
		ballast := fillDisk(t, walFS, 512<<10)
		// Into the spare, and on to three quarters of it: the next segment
		// is wanted and cannot be prepared.
		gen.putUntil(t, "the log to use its last segment and fail to prepare the next", 2*time.Minute, func() bool {
			return len(walSegments(t, walDir)) > segs && strings.Count(logText(t, srv), "cannot preallocate the next WAL segment") > c
		})
		if err := os.Remove(ballast); err != nil {
			t.Fatal(err)
		}
		segs = len(walSegments(t, walDir))
		gen.putUntil(t, "a new segment once space returned", 2*time.Minute, func() bool {
			return len(walSegments(t, walDir)) > segs
		})
		if gen.sawError("") {
			t.Fatalf("cycle %d: the client saw errors: %s", c, gen.summary())
		}
		t.Logf("WAL disk, cycle %d: next segment not preallocatable, member kept serving and moved on by itself; segments now %v; %s",
			c+1, walSegments(t, walDir), gen.summary())
	}
	if n := strings.Count(logText(t, srv), "preallocated the next WAL segment again"); n < cycles {
		t.Fatalf("recovery logged %d times over %d cycles", n, cycles)
	}
	rssMid := readMem(srv.Pid())

	// Phase 2: the WAL write itself fails: one fatal line, exit status 1.
	fillDisk(t, walFS, 512<<10)
	rss := sampleRSS(srv.Pid())
	phase2 := newLoadGen(cli, "x", valSize)
	phase2.start(4)
	code, err := srv.WaitExit(3 * time.Minute)
	rssMax := rss.end()
	phase2.halt()
	if err != nil {
		t.Fatalf("the member did not exit once its WAL disk was full: %v (a half-alive process)\n%s", err, srv.LogTail(20))
	}
	if code == 0 {
		t.Fatalf("exit status 0 after a fatal WAL error")
	}
	fatals := fatalLines(t, srv)
	if len(fatals) != 1 || !strings.Contains(fatals[0], "no space left on device") || !strings.Contains(fatals[0], ".wal") ||
		!strings.Contains(fatals[0], "free space on the disk holding the WAL directory") {
		t.Fatalf("want exactly one fatal line naming ENOSPC, the segment file and the remedy; got %d:\n%s", len(fatals), strings.Join(fatals, "\n"))
	}
	t.Logf("WAL disk full: the member exited with status %d and one fatal line:\n  %s", code, fatals[0])
	t.Logf("WAL disk full: the client saw: %s", phase2.summary())

	// Space returns; the supervisor restarts it.
	if err := os.Remove(filepath.Join(walFS, "ballast")); err != nil {
		t.Fatal(err)
	}
	cli.Close()
	if err := srv.Start(); err != nil {
		t.Fatalf("restart after space returned: %v", err)
	}
	cli = newClient(t, srv.ClientURL)
	keys := append(gen.ackedKeys(), phase2.ackedKeys()...)
	n := verifyAcked(t, cli, keys, valSize, nil)
	if _, err := cli.Put(context.Background(), "after-restart", "ok"); err != nil {
		t.Fatalf("put after restart: %v", err)
	}
	rssAfter := readMem(srv.Pid())
	fmt.Printf("FULL-DISK WAL: client saw while only preallocation failed: %s\n", gen.summary())
	fmt.Printf("FULL-DISK WAL: client saw when the WAL write failed: %s\n", phase2.summary())
	fmt.Printf("FULL-DISK WAL: the fatal line: %s\n", fatals[0])
	fmt.Printf("FULL-DISK WAL: exit status %d, %d fatal line; RSS MiB: start %v, after %d recovery cycle(s) %v, max while failing %v, after restart %v; %d acknowledged writes read back after space returned\n",
		code, len(fatals), rssStart, cycles, rssMid, rssMax, rssAfter, n)
}

// TestFullDiskData: the data dir's disk fills. The member raises NOSPACE
// (clients get etcd's "database space exceeded"), keeps serving reads and
// deletes, keeps its memory bounded while clients keep writing, and
// clears the alarm by itself once space returns, with every acknowledged
// write readable, also after a restart.
func TestFullDiskData(t *testing.T) {
	bin := needStrataAsRoot(t)
	dataFS := mountTmpfs(t, "datafs", 64*mib)
	walFS := mountTmpfs(t, "walfs", 1024*mib)
	srv, err := harness.NewServer(harness.ServerConfig{Bin: bin, Dir: t.TempDir(), DataDir: filepath.Join(dataFS, "data"),
		Flags: []string{"--wal-dir=" + filepath.Join(walFS, "wal"), "--disk-probe=false"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	cli := newClient(t, srv.ClientURL)
	defer func() { cli.Close() }()
	ctx := context.Background()
	const valSize = 16 << 10
	cycles, hammer := 1, 5*time.Second
	if fullDiskLong() {
		cycles, hammer = 3, time.Minute
	}
	var keys []string
	deleted := map[string]bool{}
	for c := 0; c < cycles; c++ {
		rssStart := readMem(srv.Pid())
		ballast := fillDisk(t, dataFS, 4*mib)
		gen := newLoadGen(cli, fmt.Sprintf("d%d-", c), valSize)
		gen.start(8)
		waitCondition(t, "NOSPACE once the data disk filled", 2*time.Minute, func() bool {
			return gen.sawError("etcdserver: mvcc: database space exceeded")
		})
		// Keep the clients writing against the full disk: memory must stay
		// bounded (the issue saw 1.77 GB after about 220 MB of writes).
		rss := sampleRSS(srv.Pid())
		end := time.Now().Add(hammer)
		maxBacklog := 0.0
		for time.Now().Before(end) {
			maxBacklog = max(maxBacklog, scrapeMetric(t, srv.MetricsURL, "strata_backend_backlog_bytes"))
			time.Sleep(100 * time.Millisecond)
		}
		rssFull := rss.end()
		if maxBacklog > 64*mib {
			t.Fatalf("backlog reached %.0f bytes, past the 64 MiB default --backend-backlog-bytes", maxBacklog)
		}
		alarms, err := cli.AlarmList(ctx)
		if err != nil || len(alarms.Alarms) != 1 || alarms.Alarms[0].Alarm.String() != "NOSPACE" {
			t.Fatalf("alarm list %v (%v), want NOSPACE", alarms, err)
		}
		st, err := cli.Status(ctx, srv.ClientURL)
		if err != nil || len(st.Errors) != 1 || !strings.Contains(st.Errors[0], "alarm:NOSPACE") {
			t.Fatalf("endpoint status %v (%v), want the NOSPACE alarm in its errors", st, err)
		}
		if f := scrapeMetric(t, srv.MetricsURL, "strata_backend_commit_failing"); f != 1 {
			t.Fatalf("strata_backend_commit_failing = %v while the disk is full", f)
		}
		gen.halt()
		cycleKeys := gen.ackedKeys()
		if len(cycleKeys) == 0 {
			t.Fatal("no write acknowledged before the disk filled")
		}
		// Reads and deletes are served while full.
		if resp, err := cli.Get(ctx, cycleKeys[0]); err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("get while full: %v %v", resp, err)
		}
		if _, err := cli.Delete(ctx, cycleKeys[0]); err != nil {
			t.Fatalf("delete while full: %v", err)
		}
		deleted[cycleKeys[0]] = true
		keys = append(keys, cycleKeys...)
		t.Logf("data disk full, cycle %d: the client saw: %s; alarm %v; status errors %v", c+1, gen.summary(), alarms.Alarms, st.Errors)

		// Space returns: the alarm clears by itself, nothing is lost.
		if err := os.Remove(ballast); err != nil {
			t.Fatal(err)
		}
		waitCondition(t, "the alarm to clear once space returned", 2*time.Minute, func() bool {
			a, err := cli.AlarmList(ctx)
			return err == nil && len(a.Alarms) == 0
		})
		if _, err := cli.Put(ctx, "after", "space"); err != nil {
			t.Fatalf("put once space returned: %v", err)
		}
		n := verifyAcked(t, cli, keys, valSize, deleted)
		rssAfter := readMem(srv.Pid())
		fmt.Printf("FULL-DISK DATA cycle %d: client saw: %s\n", c+1, gen.summary())
		fmt.Printf("FULL-DISK DATA cycle %d: RSS MiB: before %v, max while full (%v of writers) %v, after space returned %v; backlog max %.1f MiB; %d acknowledged writes read back\n",
			c+1, rssStart, hammer, rssFull, rssAfter, maxBacklog/mib, n)
	}
	cli.Close()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	cli = newClient(t, srv.ClientURL)
	n := verifyAcked(t, cli, keys, valSize, deleted)
	if a, err := cli.AlarmList(ctx); err != nil || len(a.Alarms) != 0 {
		t.Fatalf("alarms after restart: %v %v", a, err)
	}
	fmt.Printf("FULL-DISK DATA: %d acknowledged writes read back after a restart\n", n)
}

// TestFullDiskSmallStart: a member starts on a 64 MiB
// file system holding both its WAL and its page store (etcd's layout, on
// which etcd 3.7 starts too), with smaller WAL segments logged once, and
// takes writes.
func TestFullDiskSmallStart(t *testing.T) {
	bin := needStrataAsRoot(t)
	fs := mountTmpfs(t, "smallfs", 64*mib)
	srv, err := harness.NewServer(harness.ServerConfig{Bin: bin, Dir: t.TempDir(), DataDir: filepath.Join(fs, "data"),
		Flags: []string{"--disk-probe=false"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	if err := srv.Start(); err != nil {
		t.Fatalf("start on a 64 MiB file system: %v", err)
	}
	cli := newClient(t, srv.ClientURL)
	defer func() { cli.Close() }()
	const valSize = 16 << 10
	var keys []string
	for i := 0; i < 640; i++ { // 10 MiB
		k := fmt.Sprintf("s%05d", i)
		if _, err := cli.Put(context.Background(), k, valueOf(k, valSize)); err != nil {
			t.Fatalf("put %d on the small disk: %v", i, err)
		}
		keys = append(keys, k)
	}
	if n := strings.Count(logText(t, srv), "no room for a full segment"); n != 1 {
		t.Fatalf("smaller WAL segments logged %d times, want once", n)
	}
	walDir := filepath.Join(fs, "data", "member", "wal")
	cli.Close()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	cli = newClient(t, srv.ClientURL)
	n := verifyAcked(t, cli, keys, valSize, nil)
	fmt.Printf("FULL-DISK SMALL START: started on a 64 MiB tmpfs (WAL and data dir); WAL segments %v; %d writes of 16 KiB acknowledged and read back after a restart; %.1f MiB free\n",
		walSegments(t, walDir), n, float64(freeBytes(t, fs))/mib)
}
