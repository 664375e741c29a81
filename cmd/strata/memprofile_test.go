package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
)

// TestMemProfileRate runs this test binary again with and without
// GODEBUG=memprofilerate and reads the heap sampling rate it had after
// its package initialisation and after profileMemory(false) and (true):
// off unless /debug/pprof is served, the runtime's default when it is,
// and the operator's rate whenever GODEBUG sets one.
func TestMemProfileRate(t *testing.T) {
	if os.Getenv("STRATA_MEMPROF_CHILD") == "1" {
		fmt.Printf("init=%d", runtime.MemProfileRate)
		profileMemory(false)
		fmt.Printf(" without=%d", runtime.MemProfileRate)
		profileMemory(true)
		fmt.Printf(" with=%d\n", runtime.MemProfileRate)
		return
	}
	def := fmt.Sprint(defaultMemProfileRate)
	for _, c := range []struct{ godebug, want string }{
		{"", "init=0 without=0 with=" + def},
		{"madvdontneed=1", "init=0 without=0 with=" + def},
		{"memprofilerate=4096", "init=4096 without=4096 with=4096"},
		{"madvdontneed=1,memprofilerate=1", "init=1 without=1 with=1"},
		// The runtime ignores a setting after a space, and so does the member.
		{"madvdontneed=1, memprofilerate=1", "init=0 without=0 with=" + def},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMemProfileRate$")
		cmd.Env = append(os.Environ(), "STRATA_MEMPROF_CHILD=1", "GODEBUG="+c.godebug)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("GODEBUG=%q: %v\n%s", c.godebug, err, out)
		}
		if got := strings.SplitN(string(out), "\n", 2)[0]; got != c.want {
			t.Errorf("GODEBUG=%q: %s, want %s", c.godebug, got, c.want)
		}
	}
	if defaultMemProfileRate != 512*1024 {
		t.Errorf("the runtime's default heap sampling rate is %d; the package doc says 512 KiB", defaultMemProfileRate)
	}
}
