// Package procs runs the process on one P (GOMAXPROCS 1) while its work
// is a chain of hand-offs that one CPU can carry, and on all of them as
// soon as goroutines queue for a P.
//
// Why: a lightly loaded member hands every request between several
// goroutines: gRPC's connection reader, the handler, the raft loop, the
// apply loop, and back. Each time a goroutine becomes runnable while a P
// is idle, Go's scheduler wakes a sleeping thread to run it on that P.
// On a virtual machine that wake-up is an inter-processor interrupt the
// hypervisor delivers, tens of microseconds, paid in the waker's futex
// call and again before the woken goroutine runs. The execution trace of
// a member serving one client's puts (go tool trace -pprof=sched) showed
// about 117 us per put spent runnable and not running, of about 560 us
// per put. With one P there is no idle P to wake: the next goroutine runs
// on the P the previous one leaves. Measured with etcd's benchmark on a
// 2-vCPU VM (GOMAXPROCS=1 against the default, alternating rounds): one
// client's puts 16% faster on one member; 4 clients' puts within the
// run-to-run spread (-12% to +10%); 16 clients' half as fast. So one P
// is only for the lightest loads. (On a 3-member cluster, one client's
// puts to the leader gained 25-36% in one set of rounds and nothing
// beyond the spread in another.)
//
// The governor samples every Sample:
//   - on all Ps, the process's CPU time (getrusage, which also counts a
//     disk that is polled for completion, as fdatasync is on this VM):
//     when it used less than DownCPU CPUs on average over a window of
//     DownAfter, it moves to one P (one client's puts used 0.7-0.75 on
//     two Ps, 4 clients' 0.9, 16 clients' 1.0);
//   - on one P, the time goroutines spent runnable and waiting for the P
//     (runtime/metrics /sched/latencies:seconds), as the average number
//     of goroutines waiting: once it is above UpWaiting, smoothed over a
//     few samples, or four times that in one sample, it moves back to all
//     Ps, and doubles DownAfter (up to MaxDownAfter) so that a load that
//     needs two CPUs now and then does not keep flipping; DownAfter
//     returns to its start after ResetAfter on one P;
//   - but only when a second P has room to run: the machine has UpIdle
//     CPUs idle (/proc/stat), or UpSyscalls goroutines are in system
//     calls (/sched/goroutines/not-in-go:goroutines, above its floor),
//     which hold the one P until the runtime hands it over. On a machine
//     whose CPUs other processes keep busy (members of one cluster and
//     their clients on one host), more Ps only compete for the same CPUs
//     and make every hand-off wake a thread: a 3-member cluster on two
//     vCPUs served linearizable reads from 1000 clients with 12% less
//     member CPU per read, and about 5% more reads per second, on one P.
//
// The thresholds come from the same VM, one P, etcd's benchmark putting
// from N clients: the average number of goroutines waiting (median of
// the samples) was 0.7 with 1 client, 0.9 with 2, 1.9 with 4, 7.7 with
// 16 and 36 with 100; one P was faster than two up to 4 clients (2650
// puts/s against 2200 with 1 client, 4680 against 4450 with 4) and half
// as fast with 16 (5530 against 10480).
//
// It never runs when GOMAXPROCS is set in the environment (the operator
// chose), or when there is only one P to begin with. Changing GOMAXPROCS
// stops the world for a few microseconds.
package procs

import (
	"bytes"
	"log/slog"
	"math"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Defaults for Options.
const (
	DefaultSample       = 20 * time.Millisecond
	DefaultDownCPU      = 0.9
	DefaultUpWaiting    = 3
	DefaultDownAfter    = 500 * time.Millisecond
	DefaultMaxDownAfter = 16 * time.Second
	DefaultResetAfter   = 30 * time.Second
	DefaultUpIdle       = 0.5
	DefaultUpSyscalls   = 0.5
)

// Options tunes a Governor; zero fields take the defaults.
type Options struct {
	Sample       time.Duration
	DownCPU      float64 // CPUs
	UpWaiting    float64 // goroutines waiting for the one P, on average (smoothed; 4x in one sample)
	DownAfter    time.Duration
	MaxDownAfter time.Duration
	ResetAfter   time.Duration
	// UpIdle and UpSyscalls gate the move back to all Ps (see Observe).
	UpIdle     float64 // CPUs idle on the machine (smoothed)
	UpSyscalls float64 // goroutines in system calls, on average (smoothed)
}

func (o Options) withDefaults() Options {
	if o.Sample <= 0 {
		o.Sample = DefaultSample
	}
	if o.DownCPU <= 0 {
		o.DownCPU = DefaultDownCPU
	}
	if o.UpWaiting <= 0 {
		o.UpWaiting = DefaultUpWaiting
	}
	if o.DownAfter <= 0 {
		o.DownAfter = DefaultDownAfter
	}
	if o.MaxDownAfter < o.DownAfter {
		o.MaxDownAfter = max(DefaultMaxDownAfter, o.DownAfter)
	}
	if o.ResetAfter <= 0 {
		o.ResetAfter = DefaultResetAfter
	}
	if o.UpIdle <= 0 {
		o.UpIdle = DefaultUpIdle
	}
	if o.UpSyscalls <= 0 {
		o.UpSyscalls = DefaultUpSyscalls
	}
	return o
}

// Sample is what the governor measured over one sample.
type Sample struct {
	D       time.Duration // the sample's length
	CPUs    float64       // CPU time used / D
	Waiting float64       // time goroutines spent runnable, not running / D
	// Idle is the CPU time the whole machine left idle / D, known when
	// HasIdle; Syscalls the goroutines in system calls when sampled.
	Idle     float64
	HasIdle  bool
	Syscalls float64
}

// Policy is the governor's decision, apart from the clock and the
// runtime: Observe takes one sample and returns the number of Ps to run
// on.
type Policy struct {
	opts      Options
	max       int
	cur       int
	downAfter time.Duration // current; doubles after each move back up
	window    time.Duration // on all Ps: length of the current window
	windowCPU float64       // on all Ps: CPU time (in D units) in it
	oneFor    time.Duration // on one P: time since the move
	waiting   float64       // on one P: Waiting, smoothed over the samples
	idle      float64       // on one P: Idle, smoothed (while HasIdle)
	syscalls  float64       // on one P: Syscalls, smoothed
}

// smoothing is the weight of a new sample in Policy.waiting: the runtime
// records one scheduling in eight, so one 20 ms sample of a light load
// holds only a few dozen, and its figure jumps.
const smoothing = 0.3

// NewPolicy starts on max Ps.
func NewPolicy(max int, o Options) *Policy {
	o = o.withDefaults()
	return &Policy{opts: o, max: max, cur: max, downAfter: o.DownAfter}
}

// Procs is the number of Ps the policy runs on now.
func (p *Policy) Procs() int { return p.cur }

// DownAfter is how long a quiet spell must last now before one P.
func (p *Policy) DownAfter() time.Duration { return p.downAfter }

// Observe records one sample and returns the number of Ps to run on from
// now.
//
// On one P, goroutines waiting for it ask for more Ps, but more Ps only
// help if there is a CPU to run them on, or if the one P is lost to
// system calls (a WAL's fdatasync holds it until the runtime hands it
// over). When every CPU of the machine is busy (a member sharing it with
// other members or with its clients), a second P competes with those
// processes for the same CPUs and adds the cost of waking threads to every
// hand-off (see the package doc for the measurement). So the move back
// needs, as well as the waiting goroutines, a machine with UpIdle CPUs idle or
// UpSyscalls goroutines in system calls (both smoothed), or a machine
// whose idle time is unknown.
func (p *Policy) Observe(s Sample) int {
	if p.max <= 1 {
		return p.cur
	}
	if p.cur == 1 {
		p.waiting = smoothing*s.Waiting + (1-smoothing)*p.waiting
		p.syscalls = smoothing*s.Syscalls + (1-smoothing)*p.syscalls
		if s.HasIdle {
			p.idle = smoothing*s.Idle + (1-smoothing)*p.idle
		}
		room := !s.HasIdle || p.idle >= p.opts.UpIdle || p.syscalls >= p.opts.UpSyscalls
		if room && (p.waiting > p.opts.UpWaiting || s.Waiting > 4*p.opts.UpWaiting) {
			p.cur, p.window, p.windowCPU, p.waiting = p.max, 0, 0, 0
			p.downAfter = min(2*p.downAfter, p.opts.MaxDownAfter)
			return p.cur
		}
		p.oneFor += s.D
		if p.oneFor >= p.opts.ResetAfter {
			p.downAfter = p.opts.DownAfter
		}
		return p.cur
	}
	p.window += s.D
	p.windowCPU += s.CPUs * float64(s.D)
	if p.window < p.downAfter {
		return p.cur
	}
	if p.windowCPU/float64(p.window) < p.opts.DownCPU {
		// The smoothed figures start from nothing, so a move back up
		// needs a few samples of room, as of waiting.
		p.cur, p.oneFor, p.waiting, p.syscalls, p.idle = 1, 0, 0, 0, 0
	}
	p.window, p.windowCPU = 0, 0
	return p.cur
}

// Governor applies a Policy to the running process.
type Governor struct {
	lg    *slog.Logger
	pol   *Policy // used only by run
	stopc chan struct{}
	done  chan struct{}
	once  sync.Once
}

// Start starts governing GOMAXPROCS, unless the environment sets
// GOMAXPROCS or the process has one P; it returns nil then. Stop gives
// the process its Ps back.
func Start(lg *slog.Logger, o Options) *Governor {
	if _, set := os.LookupEnv("GOMAXPROCS"); set {
		lg.Debug("GOMAXPROCS is set in the environment; not adapting it")
		return nil
	}
	max := runtime.GOMAXPROCS(0)
	if max <= 1 {
		return nil
	}
	g := &Governor{lg: lg, pol: NewPolicy(max, o), stopc: make(chan struct{}), done: make(chan struct{})}
	go g.run()
	return g
}

// Stop ends the governor and restores the process's default GOMAXPROCS.
func (g *Governor) Stop() {
	if g == nil {
		return
	}
	g.once.Do(func() { close(g.stopc) })
	<-g.done
}

func (g *Governor) run() {
	defer close(g.done)
	defer runtime.SetDefaultGOMAXPROCS()
	pol := g.pol
	t := time.NewTicker(pol.opts.Sample)
	defer t.Stop()
	w := newWaitMeter()
	m := openMachineIdle()
	defer m.close()
	lastCPU, lastAt := cpuTime(), time.Now()
	for {
		select {
		case <-g.stopc:
			return
		case now := <-t.C:
			c, waited := cpuTime(), w.read()
			d := now.Sub(lastAt)
			if d <= 0 || c < lastCPU {
				lastCPU, lastAt = c, now
				continue
			}
			s := Sample{D: d, CPUs: float64(c-lastCPU) / float64(d), Waiting: float64(waited) / float64(d),
				Syscalls: w.syscalls(c-lastCPU < d/10)}
			before := pol.Procs()
			// The machine's idle time only matters on one P; the read on
			// the move there starts the interval.
			if before == 1 {
				if idle, ok := m.read(); ok {
					s.Idle, s.HasIdle = float64(idle)/float64(d), true
				}
			}
			lastCPU, lastAt = c, now
			after := pol.Observe(s)
			if after == before {
				continue
			}
			if after == 1 {
				m.read()
			}
			if after == pol.max {
				// The default, so that Go keeps following the CPU
				// limit of the container.
				runtime.SetDefaultGOMAXPROCS()
			} else {
				runtime.GOMAXPROCS(after)
			}
			g.lg.Debug("changed GOMAXPROCS with the load", "from", before, "to", runtime.GOMAXPROCS(0),
				"cpus", s.CPUs, "waiting-goroutines", s.Waiting, "machine-idle-cpus", s.Idle,
				"goroutines-in-syscalls", s.Syscalls, "next-down-after", pol.DownAfter().String())
		}
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// waitMeter reads the time goroutines spent runnable before running, from
// the runtime's scheduling-latency histogram: each bucket's new count
// times the bucket's middle (its lower bound for the last, unbounded
// one), times the runtime's sampling period (it records one goroutine
// transition in trackingPeriod: gTrackingPeriod in runtime2.go).
type waitMeter struct {
	s    []metrics.Sample
	prev []uint64
	sys  syscallFloor
}

const (
	schedLatencies = "/sched/latencies:seconds"
	notInGo        = "/sched/goroutines/not-in-go:goroutines"
	trackingPeriod = 8
)

func newWaitMeter() *waitMeter {
	w := &waitMeter{s: []metrics.Sample{{Name: schedLatencies}, {Name: notInGo}}, sys: newSyscallFloor()}
	w.read()
	return w
}

// syscalls is the number of goroutines in system calls (or cgo) at the
// last read, above their floor (see syscallFloor).
func (w *waitMeter) syscalls(light bool) float64 {
	if w.s[1].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return w.sys.above(w.s[1].Value.Uint64(), light)
}

// syscallFloor tracks the goroutines that stay in a system call for good
// (os/signal's loop): the least count seen in light samples (the process
// used little CPU) over the last 128 to 256 samples, or the floor before
// them when there were none. Under a steady write load a WAL's fdatasync
// is nearly always in flight, and a floor taken then would hide it.
type syscallFloor struct {
	samples, floor, blockMin uint64
	blockLight               bool
}

func newSyscallFloor() syscallFloor {
	return syscallFloor{floor: math.MaxUint64, blockMin: math.MaxUint64}
}

// above records a sample of v goroutines in system calls and returns
// how many are above the floor (all of them before a light sample).
func (f *syscallFloor) above(v uint64, light bool) float64 {
	if light {
		f.blockMin, f.blockLight = min(f.blockMin, v), true
	}
	f.samples++
	if f.samples%128 == 0 && f.blockLight {
		f.floor, f.blockMin, f.blockLight = f.blockMin, math.MaxUint64, false
	}
	floor := min(f.floor, f.blockMin)
	if floor == math.MaxUint64 || v < floor {
		return float64(v)
	}
	return float64(v - floor)
}

// read returns the waiting time since the previous read.
func (w *waitMeter) read() time.Duration {
	metrics.Read(w.s)
	if w.s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return 0
	}
	h := w.s[0].Value.Float64Histogram()
	if len(w.prev) != len(h.Counts) {
		w.prev = append(w.prev[:0], h.Counts...)
		return 0
	}
	var total float64
	for i, c := range h.Counts {
		n := c - w.prev[i]
		w.prev[i] = c
		if n == 0 {
			continue
		}
		lo, hi := h.Buckets[i], h.Buckets[i+1]
		mid := lo
		switch {
		case math.IsInf(lo, -1):
			mid = 0
		case !math.IsInf(hi, 1):
			mid = (lo + hi) / 2
		}
		total += float64(n) * mid
	}
	return time.Duration(total * trackingPeriod * float64(time.Second))
}

// machineIdle reads the CPU time the whole machine spent idle (idle and
// iowait in /proc/stat's first line), kept open and re-read from the
// start each time.
type machineIdle struct {
	f    *os.File
	buf  []byte
	last uint64 // clock ticks
	ok   bool   // last is valid
}

// clockTicks is /proc/stat's unit, USER_HZ: 100 on every Linux ABI Go
// runs on.
const clockTicks = 100

func openMachineIdle() *machineIdle {
	m := &machineIdle{buf: make([]byte, 512)}
	f, err := os.Open("/proc/stat")
	if err != nil {
		return m
	}
	m.f = f
	m.read()
	return m
}

func (m *machineIdle) close() {
	if m.f != nil {
		m.f.Close()
	}
}

// read returns the idle time since the previous read; false when it is
// unknown (no /proc/stat, or the first read).
func (m *machineIdle) read() (time.Duration, bool) {
	if m.f == nil {
		return 0, false
	}
	n, err := m.f.ReadAt(m.buf, 0)
	if n == 0 && err != nil {
		return 0, false
	}
	ticks, ok := parseIdle(m.buf[:n])
	if !ok {
		return 0, false
	}
	prev, had := m.last, m.ok
	m.last, m.ok = ticks, true
	if !had || ticks < prev {
		return 0, false
	}
	return time.Duration(ticks-prev) * time.Second / clockTicks, true
}

// parseIdle reads idle + iowait from the "cpu" line that starts
// /proc/stat: "cpu  user nice system idle iowait irq ...".
func parseIdle(b []byte) (uint64, bool) {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		b = b[:i]
	}
	f := bytes.Fields(b)
	if len(f) < 6 || string(f[0]) != "cpu" {
		return 0, false
	}
	var sum uint64
	for _, field := range f[4:6] {
		v, err := strconv.ParseUint(string(field), 10, 64)
		if err != nil {
			return 0, false
		}
		sum += v
	}
	return sum, true
}
