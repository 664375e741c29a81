// Package stacks keeps the server's goroutine stacks at the size they grew
// to: the runtime's shrinking of stacks at each garbage collection is
// turned off (GODEBUG gcshrinkstackoff=1) by re-executing the binary once,
// before it does anything else, with that setting added to its
// environment.
//
// Why: a request runs on one of gRPC's stream workers, or on a new
// goroutine when every worker is busy (server/serve.go). Its handler
// needs about 8 KiB of stack. A worker keeps its grown stack between
// requests, but each collection (about 9 a second under load, with a
// live heap near 20 MiB) halves the stack of every worker idle at that
// moment, so the next request on it grows it again, and every growth
// copies the stack. A new goroutine starts at the runtime's estimate of
// a typical stack, which shrunk idle goroutines keep small. CPU profiles
// of a member under etcd's benchmark: runtime.copystack 5% of the
// member's CPU under 1-key serializable ranges from 1000 clients, 1.4%
// with shrinking off; 8.7% under puts from 1000 clients (mostly new
// goroutines), 5.8% with it off. Six alternating pairs of 150,000 reads
// against a member without this: its CPU per read 8% lower (19.1
// against 20.9 us) and 6% more reads a second; for puts, no difference
// beyond the pairs' spread.
//
// The cost is memory that an idle goroutine no longer gives back: a
// goroutine keeps the largest stack it ever needed, 8 KiB or so for the
// 256 workers. bench/compare.sh's RSS after its run was 45.1 MiB, against
// 43.7-44.4 MiB without.
//
// Go reads its runtime debug variables from GODEBUG only as the process
// starts, and neither a //go:debug directive nor go.mod's godebug lines
// accept this one, hence the re-execution. It keeps the pid, the
// arguments and the rest of the environment. A GODEBUG that already names
// gcshrinkstackoff is left as it is, so GODEBUG=gcshrinkstackoff=0 turns
// this off; so does a failed exec, which leaves the process running as it
// started.
package stacks

import (
	"os"
	"runtime"
	"strings"
	"syscall"
)

// Setting is the GODEBUG entry Keep adds.
const Setting = "gcshrinkstackoff=1"

// Keep re-executes the running binary with Setting in GODEBUG unless
// GODEBUG already names gcshrinkstackoff. It returns only when no
// re-execution was needed or it failed; the error is nil in the first
// case.
func Keep() error {
	env, ok := withSetting(os.Environ())
	if !ok {
		return nil
	}
	exe := "/proc/self/exe" // still the binary if its file was replaced since
	if runtime.GOOS != "linux" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return err
		}
	}
	return syscall.Exec(exe, os.Args, env)
}

// withSetting returns env with Setting added to GODEBUG, and whether it
// had to be added. Only the first GODEBUG counts, as for the runtime.
func withSetting(env []string) ([]string, bool) {
	out := append(make([]string, 0, len(env)+1), env...)
	for i, kv := range env {
		v, isDebug := strings.CutPrefix(kv, "GODEBUG=")
		if !isDebug {
			continue
		}
		for _, s := range strings.Split(v, ",") {
			if name, _, _ := strings.Cut(s, "="); strings.TrimSpace(name) == "gcshrinkstackoff" {
				return env, false
			}
		}
		if v == "" {
			out[i] = "GODEBUG=" + Setting
		} else {
			out[i] = kv + "," + Setting
		}
		return out, true
	}
	return append(out, "GODEBUG="+Setting), true
}
