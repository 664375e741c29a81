// Package stacks keeps the server's goroutine stacks at the size they grew
// to: the runtime's shrinking of stacks at each garbage collection is
// turned off (GODEBUG gcshrinkstackoff=1) by re-executing the binary once,
// before it does anything else, with that setting added to its
// environment.
//
// Why: a request runs on one of gRPC's stream workers, or on a new
// goroutine when every worker is busy. Its handler needs 8-16 KiB of
// stack. A new goroutine starts at the runtime's estimate of a typical
// stack, which the member's many idle goroutines keep near 2 KiB, so it
// grows two or three times, and every growth copies the stack. A worker
// keeps its grown stack between requests, but each collection (about 9 a
// second under 1000 clients' puts, with a live heap near 20 MiB) halves
// the stack of every worker idle at that moment, so most requests pay a
// growth again. CPU profiles of a member under etcd's benchmark put 8.7%
// of its CPU in runtime.copystack for puts from 1000 clients (mostly new
// goroutines) and 5% for 1-key serializable ranges (mostly workers).
// With enough workers for the requests in flight (server/serve.go) the
// puts' share fell to 3.6%, all of it workers regrowing; with shrinking
// off as well, to nothing in either profile. Six alternating pairs of
// 50,000 puts from 1000 clients, against a member with neither change:
// the member's CPU per put 6% lower (29.4 against 31.4 us) and 5% more
// puts a second; the same for 1-key serializable reads measured 1.5%
// lower (21.2 against 21.5 us), inside the pairs' spread. The RSS after
// the runs was not higher (46 against 88 MiB after the puts).
//
// The cost is memory that an idle goroutine no longer gives back: a
// goroutine keeps the largest stack it ever needed. The member's
// goroutines are its workers, one reader and one writer per connection,
// and a few per watch stream; at 8-16 KiB each that is a few MiB.
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
