// Command stratabench is Strata's load generator and disk qualifier.
//
//	stratabench [global flags] put|range|txn-put|txn-mixed|watch|watch-latency|lease-keepalive [flags]
//	stratabench disk --dir DIR [--plot FILE]
//	stratabench disk compare --fio FIO.json... --bench BENCH.json...
//	stratabench floor-server --listen HOST:PORT --data-dir DIR
//	stratabench help [COMMAND]
//
// Help asked for (-h, --help, help) goes to stdout with exit status 0;
// bad usage goes to stderr with exit status 2.
package main

import (
	"io"
	"os"

	"github.com/strata-db/strata/bench/load"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		load.Usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		if args[0] == "help" && len(args) > 1 {
			// help COMMAND [SUBCOMMAND] is COMMAND [SUBCOMMAND] -h.
			return run(append(append([]string(nil), args[1:]...), "-h"), stdin, stdout, stderr)
		}
		load.Usage(stdout)
		return 0
	case "disk":
		return runDisk(args[1:], stdout, stderr)
	case "floor-server":
		return runFloor(args[1:], stdout, stderr)
	}
	return load.Main(args[0], args[1:], stdin, stdout, stderr)
}
