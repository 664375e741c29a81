// Command stratabench is Strata's load generator and disk qualifier.
//
//	stratabench put|range|txn-put|txn-mixed|watch|watch-latency|lease-keepalive [flags]
//	stratabench disk --dir DIR [--plot FILE]
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		fmt.Fprintln(os.Stderr, "usage: stratabench <put|range|txn-put|txn-mixed|watch|watch-latency|lease-keepalive|disk> [flags]")
		os.Exit(2)
	}
	if os.Args[1] == "disk" {
		os.Exit(diskMain(os.Args[2:]))
	}
	os.Exit(loadMain(os.Args[1], os.Args[2:]))
}
