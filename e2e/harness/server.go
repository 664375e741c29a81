package harness

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/strata-db/strata/internal/testport"
)

// ReadyLine is etcd's lifecycle log message once the client port serves
// requests. strata logs the same message; scripts and this harness wait for it.
const ReadyLine = "ready to serve client requests"

// ServerConfig describes one member to start. Both sides of a differential
// test get the same config except for Bin.
type ServerConfig struct {
	// Bin is the server binary: etcd or strata.
	Bin string
	// Name is the member name (--name). Default "m1".
	Name string
	// Dir is a directory owned by this server; the data dir and the log go
	// inside it. Required.
	Dir string
	// DataDir overrides the data dir (default Dir/<name>.data), for a data
	// dir on a file system of its own while the log stays in Dir.
	DataDir string
	// Flags are extra flags appended after the ones the harness sets
	// (--name, --data-dir, the URLs and --initial-cluster*).
	Flags []string
	// Env is added to the server's environment.
	Env []string
	// Scheme is "http" or "https" for the client URL. Default "http".
	Scheme string
	// ReadyTimeout bounds the wait for ReadyLine. Default 30s.
	ReadyTimeout time.Duration
	// StopTimeout is how long Stop waits after SIGTERM before SIGKILL.
	// Default 10s.
	StopTimeout time.Duration
	// ReadyOnPort accepts a TCP connect on the client port as readiness when
	// the binary does not log ReadyLine. Off by default: etcd accepts
	// connections before it serves them.
	ReadyOnPort bool
	// PeerScheme is "http" or "https" for the peer URL. Default "http".
	PeerScheme string
	// InitialCluster, when set, is --initial-cluster (a member of a
	// Cluster); the default is this member alone. Ports are then fixed:
	// they are in the other members' flags.
	InitialCluster string
	// Subcommand, when set, comes before the flags ("statefulset",
	// "start"): a member started through one of strata's entry points.
	Subcommand []string
	// AdvertisePeerURL, when set, is --initial-advertise-peer-urls (and
	// this member's URL in the default --initial-cluster) while the
	// member still listens on PeerURL: the URL of a proxy in front of the
	// peer port (Network).
	AdvertisePeerURL string
}

// ClusterToken is the --initial-cluster-token of every server the harness
// starts; member ids derive from it and the advertised peer URLs.
const ClusterToken = "strata-e2e"

// Server is a running (or stopped) member. Ports and the data dir are fixed at
// creation so Restart comes back at the same addresses on the same data.
type Server struct {
	cfg        ServerConfig
	DataDir    string
	LogPath    string
	ClientURL  string // e.g. http://127.0.0.1:41234
	PeerURL    string
	MetricsURL string
	ClientAddr string // host:port of ClientURL
	// AdvertisePeerURL is the peer URL the member advertises: PeerURL,
	// or its proxy's URL (ServerConfig.AdvertisePeerURL).
	AdvertisePeerURL string

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{} // closed when cmd exits
	waitErr error         // cmd.Wait's result; written before done closes, read after
	starts  int
}

// NewServer allocates ports and directories; it does not start the process.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Bin == "" || cfg.Dir == "" {
		return nil, errors.New("harness: ServerConfig needs Bin and Dir")
	}
	if cfg.Name == "" {
		cfg.Name = "m1"
	}
	if cfg.Scheme == "" {
		cfg.Scheme = "http"
	}
	if cfg.PeerScheme == "" {
		cfg.PeerScheme = "http"
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 30 * time.Second
	}
	if cfg.StopTimeout == 0 {
		cfg.StopTimeout = 10 * time.Second
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	dataDir := cfg.DataDir
	if dataDir == "" {
		dataDir = filepath.Join(cfg.Dir, cfg.Name+".data")
	}
	s := &Server{
		cfg:     cfg,
		DataDir: dataDir,
		LogPath: filepath.Join(cfg.Dir, cfg.Name+".log"),
	}
	if err := s.pickPorts(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Server) pickPorts() error {
	ports, err := FreePorts(3)
	if err != nil {
		return err
	}
	s.ClientAddr = "127.0.0.1:" + strconv.Itoa(ports[0])
	s.PeerURL = s.cfg.PeerScheme + "://127.0.0.1:" + strconv.Itoa(ports[1])
	s.MetricsURL = "http://127.0.0.1:" + strconv.Itoa(ports[2])
	s.ClientURL = s.cfg.Scheme + "://" + s.ClientAddr
	s.AdvertisePeerURL = s.PeerURL
	if s.cfg.AdvertisePeerURL != "" {
		s.AdvertisePeerURL = s.cfg.AdvertisePeerURL
	}
	return nil
}

// Start launches the server and waits until it is ready. The log file is
// appended to across restarts. On the first start only, a port taken by
// another process between FreePorts and the bind ("address already in use")
// is retried on fresh ports, so read the URLs after Start.
func (s *Server) Start() error {
	for try := 0; ; try++ {
		err := s.start()
		if err == nil || try == 2 || s.starts > try+1 || s.cfg.InitialCluster != "" || !strings.Contains(err.Error(), "address already in use") {
			return err
		}
		if err := os.RemoveAll(s.DataDir); err != nil {
			return fmt.Errorf("harness: %w", err)
		}
		if err := s.pickPorts(); err != nil {
			return err
		}
	}
}

// Name is the member name.
func (s *Server) Name() string { return s.cfg.Name }

// Bin is the server binary.
func (s *Server) Bin() string { return s.cfg.Bin }

// SetBin makes the next start run bin on the same data dir, ports and
// flags: a member upgraded or downgraded in place. Stop it first.
func (s *Server) SetBin(bin string) { s.cfg.Bin = bin }

// Pid is the running process's id, 0 when it is not running.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Args is the full flag list the server is started with.
func (s *Server) Args() []string {
	initial := s.cfg.Name + "=" + s.AdvertisePeerURL
	if s.cfg.InitialCluster != "" {
		initial = s.cfg.InitialCluster
	}
	args := append(slices.Clone(s.cfg.Subcommand),
		"--name="+s.cfg.Name,
		"--data-dir="+s.DataDir,
		"--listen-client-urls="+s.ClientURL,
		"--advertise-client-urls="+s.ClientURL,
		"--listen-peer-urls="+s.PeerURL,
		"--initial-advertise-peer-urls="+s.AdvertisePeerURL,
		"--initial-cluster="+initial,
		"--initial-cluster-token="+ClusterToken,
		"--initial-cluster-state=new",
		"--listen-metrics-urls="+s.MetricsURL,
	)
	return append(args, s.cfg.Flags...)
}

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return errors.New("harness: server already running")
	}
	logf, err := os.OpenFile(s.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	st, err := logf.Stat()
	if err != nil {
		logf.Close()
		return fmt.Errorf("harness: %w", err)
	}
	from := st.Size()
	s.starts++
	fmt.Fprintf(logf, "=== harness: start #%d: %s %q\n", s.starts, s.cfg.Bin, s.Args())

	cmd := exec.Command(s.cfg.Bin, s.Args()...)
	cmd.Dir = s.cfg.Dir
	cmd.Env = append(cleanEnv("ETCD_"), s.cfg.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, so a terminal ^C reaches only the test; and
	// killed with the test process, so a crashed test leaves no server.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("harness: start %s: %w", s.cfg.Bin, err)
	}
	done := make(chan struct{})
	s.cmd, s.done = cmd, done
	go func() {
		err := cmd.Wait()
		logf.Close()
		// Written before close(done); read only after <-done.
		s.waitErr = err
		close(done)
	}()
	// Not holding mu while waiting: Kill and Stop must be able to end a
	// member that never becomes ready.
	s.mu.Unlock()
	err = s.waitReady(from, done)
	if err != nil {
		s.signalAndWait(syscall.SIGKILL, 5*time.Second)
	}
	s.mu.Lock()
	return err
}

// waitReady polls the log (from byte offset from on) for ReadyLine.
func (s *Server) waitReady(from int64, done <-chan struct{}) error {
	deadline := time.Now().Add(s.cfg.ReadyTimeout)
	for {
		if logContains(s.LogPath, from, ReadyLine) {
			return nil
		}
		if s.cfg.ReadyOnPort {
			if c, err := net.DialTimeout("tcp", s.ClientAddr, 100*time.Millisecond); err == nil {
				c.Close()
				return nil
			}
		}
		select {
		case <-done:
			return fmt.Errorf("harness: %s exited before it was ready; log tail:\n%s", s.cfg.Bin, s.LogTail(40))
		case <-time.After(25 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("harness: %s not ready after %v (no %q in log); log tail:\n%s",
				s.cfg.Bin, s.cfg.ReadyTimeout, ReadyLine, s.LogTail(40))
		}
	}
}

func logContains(path string, from int64, needle string) bool {
	b, err := os.ReadFile(path)
	if err != nil || int64(len(b)) < from {
		return false
	}
	return bytes.Contains(b[from:], []byte(needle))
}

// LogTail returns the last n lines of the server log.
func (s *Server) LogTail(n int) string {
	b, _ := os.ReadFile(s.LogPath)
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// Stop sends SIGTERM, waits up to StopTimeout for a graceful exit, then
// SIGKILLs. Stopping a stopped server is a no-op.
func (s *Server) Stop() error {
	return s.signalAndWait(syscall.SIGTERM, s.cfg.StopTimeout)
}

// Kill SIGKILLs the server at once, as a crash would.
func (s *Server) Kill() error {
	return s.signalAndWait(syscall.SIGKILL, 10*time.Second)
}

// Restart stops the server gracefully and starts it again on the same data
// dir and ports.
func (s *Server) Restart() error {
	if err := s.Stop(); err != nil {
		return err
	}
	return s.start()
}

// WaitExit waits up to timeout for the process to exit by itself (a server
// that stops on a fatal error) and returns its exit code (-1 if a signal
// ended it). The server can then be started again, as a supervisor would.
func (s *Server) WaitExit(timeout time.Duration) (int, error) {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return 0, errors.New("harness: server not running")
	}
	select {
	case <-done:
	case <-time.After(timeout):
		return 0, fmt.Errorf("harness: %s still running after %v", s.cfg.Bin, timeout)
	}
	s.mu.Lock()
	s.cmd, s.done = nil, nil
	s.mu.Unlock()
	return cmd.ProcessState.ExitCode(), nil
}

// Running reports whether the process is alive.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

func (s *Server) signalAndWait(sig syscall.Signal, timeout time.Duration) error {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(sig)
	escalated := false
	select {
	case <-done:
	case <-time.After(timeout):
		escalated = true
		_ = cmd.Process.Kill()
		<-done
	}
	err := s.waitErr
	s.mu.Lock()
	s.cmd, s.done = nil, nil
	s.mu.Unlock()
	if escalated {
		return fmt.Errorf("harness: %s did not exit within %v of %v and was killed", s.cfg.Bin, timeout, sig)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		// Dying of the signal we sent is a normal end: etcd re-raises
		// SIGTERM after its cleanup.
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == sig {
			return nil
		}
	}
	if err != nil {
		return fmt.Errorf("harness: %s exited: %w", s.cfg.Bin, err)
	}
	return nil
}

// cleanEnv is the test's environment without variables that start with any
// of prefixes, so a developer's ETCD_* or ETCDCTL_* settings cannot leak in.
func cleanEnv(prefixes ...string) []string {
	var env []string
outer:
	for _, kv := range os.Environ() {
		for _, p := range prefixes {
			if len(kv) >= len(p) && kv[:len(p)] == p {
				continue outer
			}
		}
		env = append(env, kv)
	}
	return env
}

// FreePorts returns n distinct loopback TCP ports reserved for this test
// process: outside the kernel's ephemeral range and never handed to
// another test process running at the same time (internal/testport).
func FreePorts(n int) ([]int, error) {
	return testport.Ports(n)
}
