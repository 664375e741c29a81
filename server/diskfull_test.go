package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/status"

	"github.com/strata-db/strata/internal/poll"
	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/vfs"
	"github.com/strata-db/strata/wal"
)

// jsonLog collects a server's JSON log records.
type jsonLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *jsonLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *jsonLog) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(l, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// records returns the records whose message contains msg ("" for all).
func (l *jsonLog) records(t *testing.T, msg string) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.buf.String()), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m, _ := r["msg"].(string); strings.Contains(m, msg) {
			out = append(out, r)
		}
	}
	return out
}

// errorRecords returns the records at level error or above.
func (l *jsonLog) errorRecords(t *testing.T) []map[string]any {
	var out []map[string]any
	for _, r := range l.records(t, "") {
		if lv, _ := r["level"].(string); strings.HasPrefix(lv, "ERROR") {
			out = append(out, r)
		}
	}
	return out
}

// memberArgs are startMember's flags for a member on dataDir.
func memberArgs(t *testing.T, dataDir string, extra ...string) ([]string, string) {
	cp, pp := freePort(t), freePort(t)
	client := fmt.Sprintf("http://127.0.0.1:%d", cp)
	peer := fmt.Sprintf("http://127.0.0.1:%d", pp)
	return append([]string{"--name", "m1", "--data-dir", dataDir,
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "m1=" + peer}, extra...), client
}

// checkAcked reads back every acknowledged key.
func checkAcked(t *testing.T, m *testMember, acked map[string]string) {
	t.Helper()
	for k, v := range acked {
		rr, err := m.kv.Range(context.Background(), &pb.RangeRequest{Key: []byte(k)})
		if err != nil {
			t.Fatalf("get %s: %v", k, err)
		}
		if len(rr.Kvs) != 1 || string(rr.Kvs[0].Value) != v {
			t.Fatalf("acknowledged key %s: got %v, want its value", k, rr.Kvs)
		}
	}
}

// TestWALWriteFailureStopsMember: a
// failed WAL write (ENOSPC) must not leave a half-alive member answering
// "server stopped" forever. The member stops by itself (Done closes, Err
// names the cause), logging exactly one fatal line that names the file and
// what to do; restarted on the same data, as systemd would, it serves every
// acknowledged write and takes new ones.
//
// The same holds for EIO from fdatasync: the kernel may
// have dropped the dirty pages, so the member never goes on after it.
func TestWALWriteFailureStopsMember(t *testing.T) {
	for _, c := range []struct {
		name   string
		op     vfs.Op
		err    syscall.Errno
		remedy string
	}{
		{"ENOSPC on write", vfs.OpWrite, syscall.ENOSPC, "free space on the disk holding the WAL"},
		{"EIO on fdatasync", vfs.OpSync, syscall.EIO, "check the disk holding the WAL"},
	} {
		t.Run(c.name, func(t *testing.T) { testWALFailureStopsMember(t, c.op, c.err, c.remedy) })
	}
}

func testWALFailureStopsMember(t *testing.T, op vfs.Op, errno syscall.Errno, remedy string) {
	dir := filepath.Join(t.TempDir(), "d")
	var armed atomic.Bool
	ffs := vfs.NewFaultFS(vfs.Default, func(ev vfs.Event) *vfs.Fault {
		if armed.Load() && ev.Op == op && strings.HasSuffix(ev.Path, ".wal") {
			return &vfs.Fault{Err: errno}
		}
		return nil
	})
	logs := &jsonLog{}
	args, client := memberArgs(t, dir, "--disk-probe=false")
	m := startHooked(t, args, client, logs.logger(), storageHooks{walFS: ffs})
	ctx := context.Background()
	acked := map[string]string{}
	for i := 0; i < 20; i++ {
		k, v := fmt.Sprintf("k%02d", i), fmt.Sprintf("v%d", i)
		if _, err := m.kv.Put(ctx, &pb.PutRequest{Key: []byte(k), Value: []byte(v)}); err != nil {
			t.Fatal(err)
		}
		acked[k] = v
	}
	armed.Store(true)
	_, err := m.kv.Put(ctx, &pb.PutRequest{Key: []byte("lost"), Value: []byte("x")})
	if err == nil {
		t.Fatal("a put was acknowledged although its WAL write failed")
	}
	t.Logf("the client saw: %v", err)
	select {
	case <-m.s.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the member is still up 30 s after its WAL write failed: a half-alive process")
	}
	m.conn.Close()
	var ioErr *wal.IOError
	if err := m.s.Err(); !errors.As(err, &ioErr) || !errors.Is(err, errno) {
		t.Fatalf("member error %v, want the WAL's %v", err, errno)
	}
	errs := logs.errorRecords(t)
	if len(errs) != 1 {
		t.Fatalf("%d records at error level or above, want exactly one fatal line: %v", len(errs), errs)
	}
	f := errs[0]
	if f["level"] != "ERROR+8" || f["file"] != ioErr.File || !strings.HasSuffix(ioErr.File, ".wal") ||
		!strings.Contains(fmt.Sprint(f["remedy"]), remedy) {
		t.Fatalf("fatal line %v: want level fatal, the segment file and the remedy", f)
	}
	t.Logf("fatal line: %v", f)

	armed.Store(false)
	m2 := startHooked(t, args, client, nil, storageHooks{})
	defer m2.stop(t)
	checkAcked(t, m2, acked)
	if _, err := m2.kv.Put(ctx, &pb.PutRequest{Key: []byte("after"), Value: []byte("restart")}); err != nil {
		t.Fatalf("put after restart: %v", err)
	}
}

// metricValue returns the value of an unlabelled metric in a scrape.
func metricValue(t *testing.T, scrape, name string) float64 {
	t.Helper()
	for _, line := range strings.Split(scrape, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

func alarmList(t *testing.T, m *testMember) []*pb.AlarmMember {
	t.Helper()
	resp, err := m.maint.Alarm(context.Background(), &pb.AlarmRequest{Action: pb.AlarmRequest_GET})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Alarms
}

// fillUntilRefused puts 4 KiB values until the member refuses one,
// recording the acknowledged ones; it fails the test if more than max are
// accepted.
func fillUntilRefused(t *testing.T, m *testMember, prefix string, max int, acked map[string]string) error {
	t.Helper()
	val := string(incompressible(4096, 3))
	for i := 0; i < max; i++ {
		k := fmt.Sprintf("%s%05d", prefix, i)
		_, err := m.kv.Put(context.Background(), &pb.PutRequest{Key: []byte(k), Value: []byte(val)})
		if err != nil {
			return err
		}
		acked[k] = val
	}
	t.Fatalf("%d writes of 4 KiB accepted with every backend commit failing", max)
	return nil
}

// TestPageStoreFailureStopsMember: a commit whose meta page can be neither
// written nor restored leaves the page store failed for good
// (pagestore.ErrFailed); retrying can never succeed, so the member must
// stop with one fatal line, as for a failed WAL write, rather than stay up
// with its alarm raised forever. Everything acknowledged is in the WAL
// and comes back at the restart.
func TestPageStoreFailureStopsMember(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	dbPath := filepath.Join(dir, "member", "snap", "db")
	var armed atomic.Bool
	ffs := vfs.NewFaultFS(vfs.Default, func(ev vfs.Event) *vfs.Fault {
		// The meta pages (the first two pages): the commit's meta write
		// fails, and so does the write restoring the slot.
		if armed.Load() && ev.Path == dbPath && ev.Op == vfs.OpWrite && ev.Off < 2*int64(os.Getpagesize()) {
			return &vfs.Fault{Err: syscall.EIO}
		}
		return nil
	})
	logs := &jsonLog{}
	args, client := memberArgs(t, dir, "--disk-probe=false", "--backend-batch-interval", "10ms")
	m := startHooked(t, args, client, logs.logger(), storageHooks{dbFS: ffs})
	ctx := context.Background()
	acked := map[string]string{}
	put := func(k, v string) error {
		_, err := m.kv.Put(ctx, &pb.PutRequest{Key: []byte(k), Value: []byte(v)})
		if err == nil {
			acked[k] = v
		}
		return err
	}
	for i := 0; i < 20; i++ {
		if err := put(fmt.Sprintf("k%02d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	armed.Store(true)
	// The next backend commit fails at its meta page, and the meta
	// restore fails too: the page store is failed.
	for i := 0; ; i++ {
		if err := put(fmt.Sprintf("f%04d", i), "v"); err != nil {
			t.Logf("the client saw: %v", err)
			break
		}
		select {
		case <-m.s.Done():
		default:
			continue
		}
		break
	}
	select {
	case <-m.s.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("the member is still up 30 s after its page store failed (alarms %v): a half-alive process", alarmList(t, m))
	}
	m.conn.Close()
	if err := m.s.Err(); !errors.Is(err, pagestore.ErrFailed) {
		t.Fatalf("member error %v, want pagestore.ErrFailed", err)
	}
	errs := logs.errorRecords(t)
	var fatal []map[string]any
	for _, r := range errs {
		if r["level"] == "ERROR+8" {
			fatal = append(fatal, r)
		}
	}
	if len(fatal) != 1 {
		t.Fatalf("%d fatal records, want exactly one: %v", len(fatal), errs)
	}
	t.Logf("fatal line: %v", fatal[0])

	armed.Store(false)
	m2 := startHooked(t, args, client, nil, storageHooks{})
	defer m2.stop(t)
	checkAcked(t, m2, acked)
}

// TestBackendDiskFullRaisesNOSPACE: backend commits
// failing with ENOSPC raise NOSPACE (writes refused with etcd's error,
// reads and deletes served), the backlog stays under
// --backend-backlog-bytes, the failure is logged once and exported, and
// once a commit succeeds the alarm clears by itself with nothing lost.
func TestBackendDiskFullRaisesNOSPACE(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	dbPath := filepath.Join(dir, "member", "snap", "db")
	var full atomic.Bool
	// A full disk refuses what needs new blocks: growing the file and
	// writing past its end. Overwriting pages the file already has (the
	// meta pages, reused free pages) still works on a full disk, as it
	// does on ext4 or xfs; a fault on those too would fail the page
	// store for good, which TestPageStoreFailureStopsMember covers.
	ffs := vfs.NewFaultFS(vfs.Default, func(ev vfs.Event) *vfs.Fault {
		if !full.Load() || ev.Path != dbPath {
			return nil
		}
		switch ev.Op {
		case vfs.OpTruncate, vfs.OpPreallocate:
			return &vfs.Fault{Err: vfs.ENOSPC}
		case vfs.OpWrite:
			if fi, err := os.Stat(dbPath); err != nil || ev.Off+int64(ev.Len) > fi.Size() {
				return &vfs.Fault{Err: vfs.ENOSPC}
			}
		}
		return nil
	})
	const limit = 1 << 20
	logs := &jsonLog{}
	args, client := memberArgs(t, dir, "--disk-probe=false", "--backend-backlog-bytes", fmt.Sprint(limit),
		"--backend-batch-interval", "10ms")
	m := startHooked(t, args, client, logs.logger(), storageHooks{dbFS: ffs})
	ctx := context.Background()
	acked := map[string]string{}
	for i := 0; i < 10; i++ {
		k := fmt.Sprintf("pre%02d", i)
		if _, err := m.kv.Put(ctx, &pb.PutRequest{Key: []byte(k), Value: []byte(k)}); err != nil {
			t.Fatal(err)
		}
		acked[k] = k
	}
	full.Store(true)
	before := len(acked)
	err := fillUntilRefused(t, m, "full", 4*limit/4096, acked)
	wantErr(t, err, rpctypes.ErrGRPCNoSpace)
	t.Logf("with the data disk full: %d puts acknowledged, then the client saw %q", len(acked)-before, err)
	if p := m.s.be.PendingBytes(); p > limit {
		t.Fatalf("backlog %d bytes, past --backend-backlog-bytes %d", p, limit)
	}
	poll.Until(t, "the NOSPACE alarm", func() bool {
		as := alarmList(t, m)
		return len(as) == 1 && as[0].Alarm == pb.AlarmType_NOSPACE && as[0].MemberID == m.s.ID()
	})
	st, err := m.maint.Status(ctx, &pb.StatusRequest{})
	if err != nil || len(st.Errors) != 1 || !strings.Contains(st.Errors[0], "alarm:NOSPACE") {
		t.Fatalf("status errors %v (%v), want the NOSPACE alarm", st.GetErrors(), err)
	}
	_, err = m.kv.Put(ctx, &pb.PutRequest{Key: []byte("refused"), Value: []byte("x")})
	wantErr(t, err, rpctypes.ErrGRPCNoSpace)
	// Reads and deletes are served.
	rr, err := m.kv.Range(ctx, &pb.RangeRequest{Key: []byte("full"), RangeEnd: []byte("fulm"), CountOnly: true})
	if err != nil || rr.Count != int64(len(acked)-before) {
		t.Fatalf("range while full: count %d, err %v; want %d", rr.GetCount(), err, len(acked)-before)
	}
	if _, err := m.kv.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte("pre00")}); err != nil {
		t.Fatalf("delete while full: %v", err)
	}
	delete(acked, "pre00")
	poll.Until(t, "commit retries", func() bool { return m.s.be.CommitFailures() >= 3 })
	if n := len(logs.records(t, "backend commit failed;")); n != 1 {
		t.Fatalf("commit failure logged %d times over %d failed commits, want once", n, m.s.be.CommitFailures())
	}
	if n := len(logs.records(t, "raised NOSPACE")); n != 1 {
		t.Fatalf("alarm raise logged %d times, want once", n)
	}
	metrics := scrape(t, m)
	for name, want := range map[string]float64{"strata_backend_commit_failing": 1, "strata_server_disk_full_alarm": 1,
		"strata_backend_backlog_limit_bytes": limit} {
		if got := metricValue(t, metrics, name); got != want {
			t.Fatalf("metric %s = %v, want %v", name, got, want)
		}
	}
	for _, name := range []string{"strata_backend_backlog_bytes", "strata_backend_commit_failures_total"} {
		if metricValue(t, metrics, name) <= 0 {
			t.Fatalf("metric %s is not positive while the disk is full", name)
		}
	}

	// Space returns: the alarm clears by itself and nothing is lost.
	full.Store(false)
	poll.Until(t, "the alarm to clear", func() bool { return len(alarmList(t, m)) == 0 })
	if _, err := m.kv.Put(ctx, &pb.PutRequest{Key: []byte("after"), Value: []byte("space")}); err != nil {
		t.Fatalf("put once space returned: %v", err)
	}
	acked["after"] = "space"
	checkAcked(t, m, acked)
	if n := len(logs.records(t, "cleared the NOSPACE alarm")); n != 1 {
		t.Fatalf("alarm clear logged %d times, want once", n)
	}
	if metricValue(t, scrape(t, m), "strata_backend_commit_failing") != 0 {
		t.Fatal("commit_failing still set after recovery")
	}
	m.stop(t)
	m = startWithArgs(t, args, client)
	defer m.stop(t)
	checkAcked(t, m, acked)
	if as := alarmList(t, m); len(as) != 0 {
		t.Fatalf("alarms after restart: %v", as)
	}
	rr, _ = m.kv.Range(ctx, &pb.RangeRequest{Key: []byte("pre00")})
	if len(rr.GetKvs()) != 0 {
		t.Fatal("the key deleted while the disk was full is back")
	}
}

// TestDiskFullAlarmOrigin: a NOSPACE raised for a full disk clears by
// itself, but once an operator (or the quota) raises NOSPACE for the same
// member it is an ordinary alarm that only `alarm disarm` ends; and a
// client cannot forge the disk-full mark.
func TestDiskFullAlarmOrigin(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	dbPath := filepath.Join(dir, "member", "snap", "db")
	var full atomic.Bool
	ffs := vfs.NewFaultFS(vfs.Default, func(ev vfs.Event) *vfs.Fault {
		if full.Load() && ev.Path == dbPath && (ev.Op == vfs.OpWrite || ev.Op == vfs.OpTruncate || ev.Op == vfs.OpPreallocate) {
			return &vfs.Fault{Err: vfs.ENOSPC}
		}
		return nil
	})
	args, client := memberArgs(t, dir, "--disk-probe=false", "--backend-batch-interval", "10ms")
	m := startHooked(t, args, client, nil, storageHooks{dbFS: ffs})
	defer m.stop(t)
	ctx := context.Background()
	if _, err := m.kv.Put(ctx, &pb.PutRequest{Key: []byte("a"), Value: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	// Nothing pending (the start-up writes, the put) when the disk fills:
	// a commit already past its page writes would fail at its meta page,
	// which needs a reopen, not the retry this test is about.
	if err := m.s.be.ForceCommit(); err != nil {
		t.Fatal(err)
	}
	full.Store(true)
	// A put: its commit fails and raises the disk-full alarm.
	if _, err := m.kv.Put(ctx, &pb.PutRequest{Key: []byte("b"), Value: []byte("2")}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the disk-full alarm", func() bool { return m.s.diskFull.raisedFor(m.s.ID()) })
	// The operator raises NOSPACE too: it becomes an ordinary alarm.
	if _, err := m.maint.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: m.s.ID(), Alarm: pb.AlarmType_NOSPACE}); err != nil {
		t.Fatal(err)
	}
	if m.s.diskFull.raisedFor(m.s.ID()) {
		t.Fatal("an operator's NOSPACE left the alarm marked as raised for the disk")
	}
	full.Store(false)
	poll.Until(t, "a successful commit", func() bool { return !m.s.be.CommitFailing() })
	// The reconcile loop would clear a disk-full alarm within a second;
	// give it a pass and check the ordinary alarm is still there.
	m.s.diskFull.reconcile()
	if as := alarmList(t, m); len(as) != 1 {
		t.Fatalf("alarms %v after the disk recovered, want the operator's NOSPACE to stay", as)
	}
	if _, err := m.maint.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_DEACTIVATE, MemberID: m.s.ID(), Alarm: pb.AlarmType_NOSPACE}); err != nil {
		t.Fatal(err)
	}
	if as := alarmList(t, m); len(as) != 0 {
		t.Fatalf("alarms %v after disarm", as)
	}
	// A client request carrying the mark is an ordinary request.
	forged := markDiskFull(&pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: m.s.ID(), Alarm: pb.AlarmType_NOSPACE})
	if _, err := m.maint.Alarm(ctx, forged); err != nil {
		t.Fatal(err)
	}
	if m.s.diskFull.raisedFor(m.s.ID()) {
		t.Fatal("a client's request was taken for the member's own disk-full alarm")
	}
	m.s.diskFull.reconcile()
	if as := alarmList(t, m); len(as) != 1 {
		t.Fatalf("alarms %v: a forged mark let the member clear an operator's alarm", as)
	}
}

// TestBacklogBoundRefusesWrites: while a backend commit cannot finish (a
// stalled disk: the commit's first write blocks), applied writes pile up
// in memory; the member refuses new writes with NOSPACE before the backlog
// passes --backend-backlog-bytes, and takes them again once the commit
// goes through.
func TestBacklogBoundRefusesWrites(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	dbPath := filepath.Join(dir, "member", "snap", "db")
	var stall atomic.Bool
	release := make(chan struct{})
	ffs := vfs.NewFaultFS(vfs.Default, func(ev vfs.Event) *vfs.Fault {
		if stall.Load() && ev.Path == dbPath && ev.Op == vfs.OpWrite {
			<-release
		}
		return nil
	})
	const limit = 512 << 10
	args, client := memberArgs(t, dir, "--disk-probe=false", "--backend-backlog-bytes", fmt.Sprint(limit),
		"--backend-batch-interval", "10ms")
	m := startHooked(t, args, client, nil, storageHooks{dbFS: ffs})
	defer m.stop(t)
	var unblock sync.Once
	defer unblock.Do(func() { close(release) }) // before stop, also on failure
	stall.Store(true)
	acked := map[string]string{}
	err := fillUntilRefused(t, m, "s", 4*limit/4096, acked)
	wantErr(t, err, rpctypes.ErrGRPCNoSpace)
	if p := m.s.be.PendingBytes(); p > limit || p < limit/2 {
		t.Fatalf("backlog %d bytes when the first write was refused, want just under %d", p, limit)
	}
	if as := alarmList(t, m); len(as) != 0 {
		t.Fatalf("alarms %v: a stalled (not failing) commit raised an alarm", as)
	}
	t.Logf("stalled commit: %d puts of 4 KiB acknowledged, backlog %d bytes, then %q", len(acked), m.s.be.PendingBytes(), err)
	stall.Store(false)
	unblock.Do(func() { close(release) })
	poll.Until(t, "the backlog to drain", func() bool { return m.s.be.PendingBytes() == 0 })
	if _, err := m.kv.Put(context.Background(), &pb.PutRequest{Key: []byte("after"), Value: []byte("x")}); err != nil {
		t.Fatalf("put after the commit went through: %v", err)
	}
	acked["after"] = "x"
	checkAcked(t, m, acked)
}

// TestLeaderFdatasyncStall stalls a disk: the
// leader's WAL fdatasync hangs for 5 s under writers on every member.
// Leadership moves to a member whose disk works; requests meanwhile fail
// only with etcd's errors (or the client's own deadline); once the stall
// ends, every acknowledged write is on every member.
func TestLeaderFdatasyncStall(t *testing.T) {
	var stallDir atomic.Value // string: the WAL directory whose next fdatasync stalls
	stallDir.Store("")
	stalled := make(chan time.Time, 1)
	ffs := vfs.NewFaultFS(vfs.Default, func(ev vfs.Event) *vfs.Fault {
		if d := stallDir.Load().(string); d != "" && ev.Op == vfs.OpSync && strings.HasPrefix(ev.Path, d) && stallDir.CompareAndSwap(d, "") {
			stalled <- time.Now().Add(5 * time.Second)
			return &vfs.Fault{Delay: 5 * time.Second} // a hung device
		}
		return nil
	})
	c := newTestClusterHooked(t, 3, storageHooks{walFS: ffs})
	lead := c.leader()
	oldTerm := lead.s.node.Status().Term

	var mu sync.Mutex
	acked := map[string]string{}
	errs := map[string]int{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, m := range c.members {
		for j := 0; j < 2; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; ; n++ {
					select {
					case <-stop:
						return
					default:
					}
					k := fmt.Sprintf("w%d.%d/%05d", i, j, n)
					ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
					_, err := m.kv.Put(ctx, &pb.PutRequest{Key: []byte(k), Value: []byte(k)})
					cancel()
					mu.Lock()
					if err == nil {
						acked[k] = k
					} else {
						errs[status.Convert(err).Message()]++
					}
					mu.Unlock()
				}
			}()
		}
	}
	poll.Until(t, "writes before the stall", func() bool { mu.Lock(); defer mu.Unlock(); return len(acked) > 50 })
	stallDir.Store(filepath.Join(lead.dir, "member", "wal"))
	until := <-stalled
	mu.Lock()
	atStall := len(acked)
	mu.Unlock()
	// Leadership moves to a member whose disk works while the leader's
	// fdatasync hangs (its raft goroutine waits for it: no heartbeats).
	poll.Until(t, "a new leader while the old one's fdatasync hangs", func() bool {
		for _, m := range c.members {
			if m != lead && m.s.node.IsLeader() {
				return true
			}
		}
		return false
	})
	movedIn := time.Until(until)
	mu.Lock()
	duringStall := len(acked) - atStall
	mu.Unlock()
	poll.Until(t, "writes to go on after the stall", func() bool { mu.Lock(); defer mu.Unlock(); return len(acked) > atStall+duringStall+50 })
	close(stop)
	wg.Wait()

	allowed := []string{"etcdserver: request timed out", "etcdserver: leader changed", "etcdserver: no leader",
		"etcdserver: request timed out, possibly due to previous leader failure", "context deadline exceeded",
		"etcdserver: request timed out, possibly due to connection lost", "etcdserver: too many requests",
		// The same 3 s deadline as "context deadline exceeded", when the
		// server's copy of it (grpc-timeout) fires a moment before the
		// client's: grpc-go's server resets the stream first.
		"stream terminated by RST_STREAM with error code: CANCEL"}
	for msg, n := range errs {
		if !slices.Contains(allowed, msg) {
			t.Errorf("%d requests failed with %q, which is not one of etcd's errors for a slow leader", n, msg)
		}
	}
	newLead := c.leader()
	if st := newLead.s.node.Status(); st.Term <= oldTerm {
		t.Fatalf("term %d after the stall, %d before", st.Term, oldTerm)
	}
	last := mustPut(t, newLead, "after-stall", "x")
	for _, m := range c.members {
		poll.Until(t, m.name+" to apply every write", func() bool { return m.s.kv.Rev() >= last.Header.Revision })
		resp, err := m.kv.Range(ctxT(t), &pb.RangeRequest{Key: []byte("w"), RangeEnd: []byte("x"), Serializable: true})
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]bool{}
		for _, kv := range resp.Kvs {
			have[string(kv.Key)] = true
		}
		for k := range acked {
			if !have[k] {
				t.Fatalf("%s lost acknowledged %s", m.name, k)
			}
		}
	}
	t.Logf("leader %s's fdatasync stalled 5 s: leadership moved to %s with %v of the stall left; %d writes acknowledged (%d from the stall until the move), none lost; failures %v",
		lead.name, newLead.name, movedIn.Round(time.Millisecond), len(acked), duringStall, errs)
}
