// Package load is stratabench's load generator: etcd's benchmark workloads
// (put, range, txn-put, txn-mixed, watch, watch-latency, lease-keepalive)
// with the same flags and the same summary, driven through the v3 gRPC
// stubs of go.etcd.io/etcd/api directly.
//
// Clients (--clients) are concurrent workers in a closed loop, spread round
// robin over --conns connections, and the connections round robin over
// --endpoints. Connections are ready (and authenticated) before the clock
// starts. Failed requests are counted per error message and reported; they
// do not stop the run.
package load

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/strata-db/strata/progress"
)

// Exit statuses of Main.
const (
	ExitOK    = 0
	ExitFail  = 1 // could not connect, or no request succeeded
	ExitUsage = 2 // bad command line
)

// Main runs stratabench's load workload with its arguments. When workload
// is a flag, the global flags precede the workload name (etcd's
// `benchmark --endpoints=X put` order).
func Main(workload string, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	g := DefaultGlobal()
	if len(workload) > 0 && workload[0] == '-' {
		var err error
		g, workload, args, err = ParseGlobal(append([]string{workload}, args...), stdout)
		if err != nil {
			return usageExit(err, "", stderr)
		}
	}
	o, err := Parse(workload, g, args, stdout)
	if err != nil {
		return usageExit(err, workload, stderr)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s, err := Run(ctx, o, stdin, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "stratabench %s: %v\n", o.Workload, err)
		return ExitFail
	}
	f := Format{Precise: o.Precise}
	if o.WriteOut == "json" {
		if err := WriteJSON(stdout, s); err != nil {
			fmt.Fprintf(stderr, "stratabench %s: %v\n", o.Workload, err)
			return ExitFail
		}
	} else {
		writeTextFraming(stdout, o, func() { f.WriteText(stdout, s) })
	}
	if s.Requests == 0 {
		fmt.Fprintf(stderr, "stratabench %s: no request succeeded\n", o.Workload)
		return ExitFail
	}
	return ExitOK
}

// writeTextFraming prints the lines etcd's benchmark prints around the
// summary of a single-report workload, so its whole output reads the
// same: range names its consistency first; put and txn-put end with a
// blank line.
func writeTextFraming(w io.Writer, o *Options, summary func()) {
	switch o.Workload {
	case "range":
		kind := "linearizable"
		if o.Consistency == "s" {
			kind = "serializable"
		}
		fmt.Fprintf(w, "bench with %s range\n", kind)
	}
	summary()
	switch o.Workload {
	case "put", "txn-put":
		fmt.Fprintln(w)
	}
}

func usageExit(err error, workload string, stderr io.Writer) int {
	if errors.Is(err, ErrHelp) {
		return ExitOK
	}
	fmt.Fprintln(stderr, err)
	if _, ok := Workloads[workload]; !ok {
		fmt.Fprintln(stderr, "Run 'stratabench -h' for the commands.")
		return ExitUsage
	}
	fmt.Fprintf(stderr, "Run 'stratabench %s -h' for the flags.\n", workload)
	return ExitUsage
}

// env is a running workload's connections and progress.
type env struct {
	o       *Options
	conns   []*conn
	clients []*conn // client i uses conns[i mod len(conns)]
	dialer  *dialer
	stderr  io.Writer
	done    atomic.Int64 // requests finished in the current phase
}

// Run connects, runs o's workload and returns its summary. It returns an
// error only when the run could not start (no connection, bad TLS files).
func Run(ctx context.Context, o *Options, stdin io.Reader, stderr io.Writer) (*Summary, error) {
	d, err := newDialer(o.Global, stdin, stderr)
	if err != nil {
		return nil, err
	}
	conns, err := d.dialAll(ctx, o.Conns)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, c := range conns {
			c.close()
		}
	}()
	e := &env{o: o, conns: conns, dialer: d, stderr: stderr}
	e.clients = make([]*conn, o.Clients)
	for i := range e.clients {
		e.clients[i] = conns[i%len(conns)]
	}
	switch o.Workload {
	case "put":
		return e.put(ctx), nil
	case "range":
		return e.rangeLoad(ctx), nil
	case "txn-put":
		return e.txnPut(ctx), nil
	case "txn-mixed":
		return e.txnMixed(ctx), nil
	case "lease-keepalive":
		return e.leaseKeepalive(ctx), nil
	case "watch":
		return e.watchLoad(ctx)
	case "watch-latency":
		return e.watchLatency(ctx)
	}
	return nil, fmt.Errorf("unknown workload %q", o.Workload)
}

// phase starts a progress bar over total units of work, fed by e.done; the
// returned function finishes it.
func (e *env) phase(label string, total int64, unit string) func() {
	e.done.Store(0)
	bar := progress.NewTo(e.stderr, label, total, unit)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				bar.Set(e.done.Load())
			}
		}
	})
	return func() {
		close(stop)
		wg.Wait()
		bar.Set(e.done.Load())
		bar.Finish()
	}
}

// pool runs total requests in a closed loop on the clients: each client
// is a goroutine taking the next request number and running it. newWorker
// is called for every client before the clock starts (so per-client setup,
// such as a lease grant, is not measured) and returns that client's request
// function. pool returns the measured interval.
func (e *env) pool(ctx context.Context, total int, newWorker func(c *conn) func(i int)) (time.Time, time.Time) {
	workers := make([]func(int), len(e.clients))
	for i, c := range e.clients {
		workers[i] = newWorker(c)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for _, w := range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= int64(total) {
					return
				}
				w(int(i))
			}
		})
	}
	wg.Wait()
	return start, time.Now()
}

// randBytes returns n random bytes (a value to put).
func randBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}
