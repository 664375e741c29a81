package main

import (
	"os"

	"github.com/strata-db/strata/bench/load"
)

// loadMain runs one load workload against a server (bench/load). When
// workload is a flag, global flags come first, as in etcd's benchmark:
// `stratabench --endpoints=X put --total=100`.
func loadMain(workload string, args []string) int {
	return load.Main(workload, args, os.Stdin, os.Stdout, os.Stderr)
}
