package main

import (
	"fmt"
	"os"
)

// loadMain runs one load workload against a server.
func loadMain(workload string, args []string) int {
	fmt.Fprintf(os.Stderr, "stratabench %s: not built yet\n", workload)
	return 2
}
