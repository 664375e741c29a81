// Command stratautl holds offline maintenance tools for a Strata data
// directory. Run `stratautl -h` for the list of subcommands.
package main

import (
	"fmt"
	"io"
	"os"
)

const usage = `stratautl: offline tools for a Strata data directory

Usage:
  stratautl <command> [flags]

Commands:
  defrag    rewrite the page store (member/snap/db) into a compact file

Run "stratautl <command> -h" for a command's flags and examples.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	switch args[0] {
	case "defrag":
		return runDefrag(args[1:], stdout, stderr)
	default:
		fmt.Fprintf(stderr, "stratautl: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}
