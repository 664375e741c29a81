package main

import (
	"os"
	"runtime"
	"strings"
)

// Heap profiling is off unless the process serves /debug/pprof.
//
// The Go runtime samples one allocation in every 512 KiB for the heap
// profile by default, recording its stack, and the first sample allocates
// the profiler's stack-bucket table (1.5 MiB, most of it resident once a
// busy member has filled it: go_memstats_buck_hash_sys_bytes). Nothing
// reads that profile unless --enable-pprof serves it, so a member turns
// sampling off as its first step and back on (at the runtime's default
// rate, from then on) when the flag is given. GODEBUG=memprofilerate=N
// set by the operator is left as it is.
var (
	defaultMemProfileRate = runtime.MemProfileRate
	operatorMemProfile    = memProfileRateFromEnv()
)

func init() {
	if !operatorMemProfile {
		runtime.MemProfileRate = 0
	}
}

// profileMemory turns heap sampling back on for a process that serves
// /debug/pprof.
func profileMemory(enablePprof bool) {
	if enablePprof && !operatorMemProfile {
		runtime.MemProfileRate = defaultMemProfileRate
	}
}

func memProfileRateFromEnv() bool {
	for _, kv := range strings.Split(os.Getenv("GODEBUG"), ",") {
		if strings.HasPrefix(kv, "memprofilerate=") { // as the runtime reads it: no spaces
			return true
		}
	}
	return false
}
