package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// TLS holds etcdctl's client TLS flags; empty fields are not passed.
type TLS struct {
	CACert, Cert, Key  string
	InsecureSkipVerify bool
}

func (t TLS) flags() []string {
	var f []string
	if t.CACert != "" {
		f = append(f, "--cacert="+t.CACert)
	}
	if t.Cert != "" {
		f = append(f, "--cert="+t.Cert)
	}
	if t.Key != "" {
		f = append(f, "--key="+t.Key)
	}
	if t.InsecureSkipVerify {
		f = append(f, "--insecure-skip-tls-verify")
	}
	return f
}

// Ctl runs etcdctl against a set of endpoints.
type Ctl struct {
	Bin       string   // etcdctl binary
	Endpoints []string // client URLs
	TLS       TLS
	// Timeout bounds each command. Default 30s.
	Timeout time.Duration
	// Env is added to etcdctl's environment (any ETCDCTL_* of the test's
	// own environment is removed first).
	Env []string
}

// Result is what one command produced.
type Result struct {
	Stdout, Stderr string
	// Code is the exit status; -1 when the process was killed by a signal
	// (see Signal) or could not be started.
	Code     int
	Signal   string // signal name when killed, e.g. "interrupt"
	TimedOut bool   // killed by the harness after its timeout
}

// String is a compact rendering for test logs.
func (r Result) String() string {
	return fmt.Sprintf("exit=%d signal=%q timedout=%v\nstdout:\n%s\nstderr:\n%s", r.Code, r.Signal, r.TimedOut, r.Stdout, r.Stderr)
}

// Args is the full etcdctl argument list for a command: the connection
// flags, then args.
func (c *Ctl) Args(args ...string) []string {
	a := []string{"--endpoints=" + strings.Join(c.Endpoints, ",")}
	a = append(a, c.TLS.flags()...)
	return append(a, args...)
}

func (c *Ctl) command(ctx context.Context, args []string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, c.Bin, c.Args(args...)...)
	// etcdctl 3.7 speaks only the v3 API and warns about ETCDCTL_API, so
	// it is not set; any ETCDCTL_* of the caller is dropped.
	cmd.Env = append(cleanEnv("ETCDCTL_"), c.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cmd
}

func (c *Ctl) timeout() time.Duration {
	if c.Timeout == 0 {
		return 30 * time.Second
	}
	return c.Timeout
}

// Run runs etcdctl with args, feeding stdin (may be empty), and waits for it
// to exit or for the timeout.
func (c *Ctl) Run(stdin string, args ...string) Result {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout())
	defer cancel()
	cmd := c.command(ctx, args)
	var out, errb bytes.Buffer
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := Result{Stdout: out.String(), Stderr: errb.String()}
	r.Code, r.Signal = exitStatus(err)
	r.TimedOut = ctx.Err() != nil
	return r
}

func exitStatus(err error) (int, string) {
	if err == nil {
		return 0, ""
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return -1, ws.Signal().String()
		}
		return ee.ExitCode(), ""
	}
	return -1, err.Error()
}

// Proc is a long-running etcdctl command (watch, elect, lock) whose output
// is read while it runs.
type Proc struct {
	cmd    *exec.Cmd
	cancel context.CancelFunc
	mu     sync.Mutex
	out    bytes.Buffer
	errb   bytes.Buffer
	done   chan struct{}
	err    error // cmd.Wait's result; written before done closes
}

// lockedWriter appends to a buffer under the Proc's mutex.
type lockedWriter struct {
	mu  *sync.Mutex
	buf *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

// Start launches etcdctl with args in the background. It is killed after
// the Ctl's timeout at the latest.
func (c *Ctl) Start(stdin string, args ...string) (*Proc, error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout())
	p := &Proc{cancel: cancel, done: make(chan struct{})}
	p.cmd = c.command(ctx, args)
	p.cmd.Stdin = strings.NewReader(stdin)
	p.cmd.Stdout = lockedWriter{&p.mu, &p.out}
	p.cmd.Stderr = lockedWriter{&p.mu, &p.errb}
	if err := p.cmd.Start(); err != nil {
		cancel()
		return nil, err
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Stdout is the output so far.
func (p *Proc) Stdout() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// WaitOutput waits until cond holds for the output so far, the process
// exits, or timeout passes; it reports whether cond held.
func (p *Proc) WaitOutput(cond func(stdout string) bool, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond(p.Stdout()) {
			return true
		}
		select {
		case <-p.done:
			return cond(p.Stdout())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// Stop interrupts the process (SIGINT, as ^C would), waits up to grace for
// it to exit, kills it otherwise, and returns what it produced. The exit
// code after an interrupt is whatever the tool chose; callers comparing two
// runs usually ignore it.
func (p *Proc) Stop(grace time.Duration) Result {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-p.done:
		case <-time.After(grace):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	p.cancel()
	return p.result()
}

// Wait waits for the process to exit by itself (or the Ctl timeout).
func (p *Proc) Wait() Result {
	<-p.done
	p.cancel()
	return p.result()
}

func (p *Proc) result() Result {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := Result{Stdout: p.out.String(), Stderr: p.errb.String()}
	r.Code, r.Signal = exitStatus(p.err)
	return r
}
