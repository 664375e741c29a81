package harness

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// Bins holds the paths of the reference binaries built by build-etcd.sh.
type Bins struct {
	Dir       string // the cache directory
	Etcd      string // etcd server 3.7.3
	Etcdctl   string // etcdctl 3.7.3
	Etcdutl   string // etcdutl 3.7.3
	Benchmark string // etcd's benchmark tool (module go.etcd.io/etcd/v3 v3.6.8)
	// Etcd36 and Etcdutl36 are the last release before 3.7 (3.6.16),
	// for the downgrade tests.
	Etcd36, Etcdutl36 string
}

// ErrNoBinaries means the reference binaries are absent and could not be
// built; tests skip on it rather than fail.
var ErrNoBinaries = errors.New("harness: etcd reference binaries unavailable")

// BinDir is the cache directory for the reference binaries: $STRATA_E2E_BIN
// when set, else $(go env GOCACHE)/../strata-e2e-bin, the same default as
// build-etcd.sh, so every worktree on the machine shares one build.
func BinDir() (string, error) {
	if d := os.Getenv("STRATA_E2E_BIN"); d != "" {
		return filepath.Abs(d)
	}
	out, err := exec.Command("go", "env", "GOCACHE").Output()
	if err != nil {
		return "", fmt.Errorf("harness: go env GOCACHE: %w", err)
	}
	cache := strings.TrimSpace(string(out))
	if cache == "" || cache == "off" {
		return "", errors.New("harness: GOCACHE is unset; set STRATA_E2E_BIN")
	}
	return filepath.Join(filepath.Dir(cache), "strata-e2e-bin"), nil
}

// FindBinaries returns the reference binaries. When some are missing and
// build is true it runs build-etcd.sh (a few minutes of CPU, once per
// machine); the script's output goes to logw. It returns an error wrapping
// ErrNoBinaries when the binaries are still unavailable.
func FindBinaries(build bool, logw *bytes.Buffer) (*Bins, error) {
	dir, err := BinDir()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoBinaries, err)
	}
	b := &Bins{
		Dir:       dir,
		Etcd:      filepath.Join(dir, "etcd"),
		Etcdctl:   filepath.Join(dir, "etcdctl"),
		Etcdutl:   filepath.Join(dir, "etcdutl"),
		Benchmark: filepath.Join(dir, "benchmark"),
		Etcd36:    filepath.Join(dir, "etcd-3.6"),
		Etcdutl36: filepath.Join(dir, "etcdutl-3.6"),
	}
	if b.missing() == "" {
		return b, nil
	}
	if !build {
		return nil, fmt.Errorf("%w: %s missing in %s; run e2e/build-etcd.sh", ErrNoBinaries, b.missing(), dir)
	}
	script, err := buildScript()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoBinaries, err)
	}
	cmd := exec.Command("bash", script)
	cmd.Env = append(os.Environ(), "STRATA_E2E_BIN="+dir)
	if logw != nil {
		cmd.Stdout, cmd.Stderr = logw, logw
	}
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%w: build-etcd.sh failed: %v", ErrNoBinaries, err)
	}
	if m := b.missing(); m != "" {
		return nil, fmt.Errorf("%w: %s still missing after build-etcd.sh", ErrNoBinaries, m)
	}
	return b, nil
}

func (b *Bins) missing() string {
	for _, p := range []string{b.Etcd, b.Etcdctl, b.Etcdutl, b.Benchmark, b.Etcd36, b.Etcdutl36} {
		if fi, err := os.Stat(p); err != nil || fi.Mode()&0o111 == 0 {
			return filepath.Base(p)
		}
	}
	return ""
}

// buildScript locates e2e/build-etcd.sh next to this package's source.
func buildScript() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("harness: cannot locate source directory")
	}
	p := filepath.Join(filepath.Dir(file), "..", "build-etcd.sh")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("harness: %w", err)
	}
	return p, nil
}

// Stratautl returns the stratautl binary that goes with the strata server
// binary target: $STRATA_E2E_STRATAUTL when set (absolute, or relative to
// the working directory), else the stratautl next to target, where
// 'make build' writes both.
func Stratautl(target string) (string, error) {
	p := os.Getenv("STRATA_E2E_STRATAUTL")
	if p == "" {
		p = filepath.Join(filepath.Dir(target), "stratautl")
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("harness: %w", err)
	}
	if fi, err := os.Stat(abs); err != nil || fi.Mode()&0o111 == 0 {
		return "", fmt.Errorf("harness: stratautl not found at %s (run make build, or set STRATA_E2E_STRATAUTL)", abs)
	}
	return abs, nil
}
