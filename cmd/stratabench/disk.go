package main

import (
	"fmt"
	"os"
)

// diskMain runs `stratabench disk`.
func diskMain(args []string) int {
	fmt.Fprintln(os.Stderr, "stratabench disk: not built yet")
	return 2
}
