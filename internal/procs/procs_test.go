package procs

import (
	"io"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/strata-db/strata/internal/poll"
)

const ms = time.Millisecond

// feed observes n samples of 20 ms and returns the Ps after the last.
func feed(p *Policy, n int, cpus, waiting float64) int {
	got := p.Procs()
	for i := 0; i < n; i++ {
		got = p.Observe(Sample{D: 20 * ms, CPUs: cpus, Waiting: waiting})
	}
	return got
}

func TestPolicyMovesWithTheLoad(t *testing.T) {
	p := NewPolicy(4, Options{})
	// A load that needs more than DownCPU on average keeps every P, even
	// with quiet samples among the busy ones.
	for i := 0; i < 100; i++ {
		cpus := 1.5
		if i%2 == 1 {
			cpus = 0.5
		}
		if got := p.Observe(Sample{D: 20 * ms, CPUs: cpus}); got != 4 {
			t.Fatalf("sample %d: %d Ps under a 1.0-CPU load, want 4", i, got)
		}
	}
	// One client's puts: 0.7 CPUs on average, with samples above 0.9. The
	// move comes at the end of the first whole window (500 ms, 25
	// samples), not before.
	for i := 1; i <= 25; i++ {
		cpus := 0.6
		if i%3 == 0 {
			cpus = 0.95
		}
		got := p.Observe(Sample{D: 20 * ms, CPUs: cpus})
		if want := map[bool]int{true: 1, false: 4}[i == 25]; got != want {
			t.Fatalf("light sample %d: %d Ps, want %d", i, got, want)
		}
	}
	// On one P, the light load's waiting goroutines (about 1 on average)
	// keep it there.
	if got := feed(p, 500, 0.7, 1.0); got != 1 {
		t.Fatalf("%d Ps with 1 goroutine waiting on average, want 1", got)
	}
	// 4 goroutines waiting on average: the smoothed figure passes 3 after
	// a few samples, not the first one.
	if got := feed(p, 1, 0.7, 4); got != 1 {
		t.Fatalf("moved back after one sample of 4 waiting (smoothed, it is below 3)")
	}
	n := 1
	for ; p.Procs() == 1; n++ {
		if n > 10 {
			t.Fatal("still on one P after 10 samples with 4 goroutines waiting")
		}
		feed(p, 1, 0.7, 4)
	}
	if got := p.DownAfter(); got != time.Second {
		t.Fatalf("DownAfter %v after moving back up, want doubled to 1s", got)
	}
	// The next move down needs a quiet window of the doubled length.
	if got := feed(p, 49, 0.1, 0); got != 4 {
		t.Fatal("moved down before the doubled window ended")
	}
	if got := feed(p, 1, 0.1, 0); got != 1 {
		t.Fatal("did not move down at the end of the doubled window")
	}
	// A burst: one sample with more than 4 x UpWaiting moves at once.
	if got := feed(p, 1, 1.0, 13); got != 4 {
		t.Fatalf("%d Ps after a sample with 13 goroutines waiting, want 4", got)
	}
}

func TestPolicyBackoffIsCappedAndResets(t *testing.T) {
	o := Options{DownAfter: 100 * ms, MaxDownAfter: 400 * ms, ResetAfter: time.Second}
	p := NewPolicy(2, o)
	var seen []time.Duration
	for i := 0; i < 5; i++ {
		// Quiet until it moves down, then a burst that moves it up.
		for n := 0; p.Procs() != 1; n++ {
			if n > 1000 {
				t.Fatal("never moved down")
			}
			feed(p, 1, 0, 0)
		}
		feed(p, 1, 1, 20)
		seen = append(seen, p.DownAfter())
	}
	want := []time.Duration{200 * ms, 400 * ms, 400 * ms, 400 * ms, 400 * ms}
	for i := range want {
		if seen[i] != want[i] {
			t.Fatalf("DownAfter after each flip %v, want %v", seen, want)
		}
	}
	// A second on one P without a move up forgets the backoff.
	for p.Procs() != 1 {
		feed(p, 1, 0, 0)
	}
	feed(p, 50, 0.5, 0.5)
	if got := p.DownAfter(); got != 100*ms {
		t.Fatalf("DownAfter %v after %v on one P, want back to 100ms", got, o.ResetAfter)
	}
}

// TestPolicyNeedsRoomToMoveUp: on one P, goroutines waiting move the
// process back to all Ps only when there is a CPU to run them on (the
// machine has UpIdle CPUs idle) or the P is lost to system calls; when
// other processes keep every CPU busy, it stays on one P.
func TestPolicyNeedsRoomToMoveUp(t *testing.T) {
	p := NewPolicy(2, Options{})
	down := func() {
		t.Helper()
		for n := 0; p.Procs() != 1; n++ {
			if n > 10000 {
				t.Fatal("never moved down")
			}
			p.Observe(Sample{D: 20 * ms, CPUs: 0.4, Waiting: 0.5, HasIdle: true})
		}
	}
	busy := Sample{D: 20 * ms, CPUs: 0.4, Waiting: 60, HasIdle: true, Idle: 0.1}
	down()
	for i := 0; i < 1000; i++ {
		if got := p.Observe(busy); got != 1 {
			t.Fatalf("sample %d: %d Ps with 60 goroutines waiting on a machine with no CPU idle, want 1", i, got)
		}
	}
	moves := func(s Sample) int {
		t.Helper()
		for n := 1; n <= 10; n++ {
			if p.Observe(s) == 2 {
				return n
			}
		}
		t.Fatalf("still on one P after 10 samples of %+v", s)
		return 0
	}
	idle := busy
	idle.Idle = 0.8
	if n := moves(idle); n < 2 {
		t.Fatalf("moved up after %d sample of idle CPU; want the smoothed figure to decide", n)
	}
	down()
	sys := busy
	sys.Syscalls = 1
	moves(sys)
	down()
	unknown := busy
	unknown.HasIdle = false
	moves(unknown)
}

// TestSyscallFloor: a goroutine that never leaves its system call
// (os/signal's) is not counted, and a WAL's fdatasync that is in flight
// in every sample of a long write load still is.
func TestSyscallFloor(t *testing.T) {
	f := newSyscallFloor()
	if got := f.above(1, false); got != 1 {
		t.Fatalf("before any light sample: %v above the floor, want 1 (no floor yet)", got)
	}
	for i := 0; i < 300; i++ {
		if got := f.above(1, true); got != 0 {
			t.Fatalf("idle sample %d: %v above the floor, want 0", i, got)
		}
	}
	// A write load: busy samples, an fdatasync in flight in each.
	for i := 0; i < 2000; i++ {
		if got := f.above(2, false); got != 1 {
			t.Fatalf("busy sample %d: %v above the floor, want 1", i, got)
		}
	}
	// A light load whose samples never see the signal goroutine leave:
	// the floor stays.
	for i := 0; i < 300; i++ {
		f.above(1, true)
	}
	if got := f.above(3, false); got != 2 {
		t.Fatalf("%v above the floor, want 2", got)
	}
}

func TestParseIdle(t *testing.T) {
	stat := []byte("cpu  4705 150 1120 16250 520 0 30 0 0 0\ncpu0 2000 70 500 8100 260 0 15 0 0 0\n")
	if got, ok := parseIdle(stat); !ok || got != 16250+520 {
		t.Fatalf("parseIdle = %d, %v; want %d", got, ok, 16250+520)
	}
	for _, bad := range []string{"", "cpu0 1 2 3 4 5\n", "cpu  1 2 3 x 5\n", "cpu  1 2 3\n"} {
		if _, ok := parseIdle([]byte(bad)); ok {
			t.Fatalf("parseIdle(%q) accepted", bad)
		}
	}
}

// TestMachineIdleReadsProcStat: the governor's reader gives the machine's
// idle time between two reads, no more than every CPU for the whole
// interval.
func TestMachineIdleReadsProcStat(t *testing.T) {
	m := openMachineIdle()
	defer m.close()
	if m.f == nil {
		t.Fatal("cannot open /proc/stat")
	}
	start := time.Now()
	var idle time.Duration
	poll.Until(t, "a clock tick between two reads of /proc/stat", func() bool {
		d, ok := m.read()
		if !ok {
			t.Fatal("/proc/stat gave no idle time")
		}
		idle += d
		return time.Since(start) > 50*ms
	})
	// One tick of slack for each CPU at each end.
	limit := time.Duration(runtime.NumCPU()) * (time.Since(start) + 2*time.Second/clockTicks)
	if idle < 0 || idle > limit {
		t.Fatalf("idle %v over %v on %d CPUs", idle, time.Since(start), runtime.NumCPU())
	}
}

func TestPolicyWithOneP(t *testing.T) {
	p := NewPolicy(1, Options{})
	if got := feed(p, 1000, 0, 0); got != 1 {
		t.Fatalf("%d Ps", got)
	}
	if got := feed(p, 10, 2, 50); got != 1 {
		t.Fatalf("%d Ps", got)
	}
}

// TestGovernorFollowsTheProcess runs the governor on this test process:
// idle, it moves to one P; with goroutines spinning, they queue for the
// P and it moves back to the default; Stop leaves the default.
func TestGovernorFollowsTheProcess(t *testing.T) {
	def := runtime.GOMAXPROCS(0)
	lg := slog.New(slog.NewTextHandler(io.Discard, nil))
	g := Start(lg, Options{Sample: 5 * ms, DownAfter: 50 * ms})
	if def == 1 {
		if g != nil {
			t.Fatal("a governor started for a process with one P")
		}
		return
	}
	if g == nil {
		t.Fatalf("no governor with GOMAXPROCS %d and no GOMAXPROCS in the environment", def)
	}
	defer g.Stop()
	poll.Until(t, "GOMAXPROCS 1 while the process is idle", func() bool { return runtime.GOMAXPROCS(0) == 1 })
	var stop atomic.Bool
	var wg sync.WaitGroup
	// A goroutine that spends its time in a system call, as a WAL's
	// fdatasync does: that gives a second P room even on a machine whose
	// CPUs other processes keep busy (see Policy.Observe).
	wg.Add(1)
	go func() {
		defer wg.Done()
		ts := syscall.Timespec{Nsec: int64(ms)}
		for !stop.Load() {
			syscall.Syscall(syscall.SYS_NANOSLEEP, uintptr(unsafe.Pointer(&ts)), 0, 0)
		}
	}()
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				for j := 0; j < 1000; j++ {
				}
				runtime.Gosched()
			}
		}()
	}
	poll.Until(t, "GOMAXPROCS back to the default with 16 goroutines runnable", func() bool { return runtime.GOMAXPROCS(0) == def })
	stop.Store(true)
	wg.Wait()
	g.Stop()
	if got := runtime.GOMAXPROCS(0); got != def {
		t.Fatalf("GOMAXPROCS %d after Stop, want the default %d", got, def)
	}
}

func TestGovernorLeavesAnOperatorsChoice(t *testing.T) {
	t.Setenv("GOMAXPROCS", "2")
	if g := Start(slog.New(slog.NewTextHandler(io.Discard, nil)), Options{}); g != nil {
		g.Stop()
		t.Fatal("a governor started although GOMAXPROCS is set in the environment")
	}
}
