// Command stratautl is Strata's offline tool: it inspects WALs, defrags
// page-store files and handles snapshots, like etcdutl and etcd-dump-logs.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

type command struct {
	name    string
	summary string
	// example is one typical command line, shown in the command lists
	// (stratautl -h, stratautl wal -h); the command's own -h has more.
	example string
	run     func(args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{}

func register(c command) { commands[c.name] = c }

// exitCode is returned by commands that print their own errors and only
// need the process to exit with a status.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// intCommand adapts a command written as func(...) int.
func intCommand(f func(args []string, stdout, stderr io.Writer) int) func([]string, io.Writer, io.Writer) error {
	return func(args []string, stdout, stderr io.Writer) error {
		if code := f(args, stdout, stderr); code != 0 {
			return exitCode(code)
		}
		return nil
	}
}

// errUsage means the arguments were wrong; the message was printed.
var errUsage = errors.New("usage")

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: stratautl COMMAND [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-22s %s\n", n, commands[n].summary)
	}
	printExamples(w, names)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'stratautl COMMAND -h' (or 'stratautl help COMMAND') for a command's flags and examples.")
}

// printExamples prints the example lines of the named commands.
func printExamples(w io.Writer, names []string) {
	fmt.Fprintln(w, "\nExamples:")
	for _, n := range names {
		if e := commands[n].example; e != "" {
			fmt.Fprintln(w, "  "+e)
		}
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// isHelp reports whether a is a request for help.
func isHelp(a string) bool { return a == "-h" || a == "-help" || a == "--help" }

// helpAsked reports whether args ask for help before any "--".
func helpAsked(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if isHelp(a) {
			return true
		}
	}
	return false
}

// groupUsage lists the commands of a group ("wal", "snapshot").
func groupUsage(w io.Writer, group string) {
	fmt.Fprintf(w, "Usage: stratautl %s COMMAND [flags]\n\nCommands:\n", group)
	var names []string
	for n := range commands {
		if strings.HasPrefix(n, group+" ") {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-22s %s\n", n, commands[n].summary)
	}
	printExamples(w, names)
	fmt.Fprintf(w, "\nRun 'stratautl %s COMMAND -h' for a command's flags and examples.\n", group)
}

// isGroup reports whether name is the first word of two-word commands.
func isGroup(name string) bool {
	for n := range commands {
		if strings.HasPrefix(n, name+" ") {
			return true
		}
	}
	return false
}

// run runs a command line. Help asked for (-h, --help, help [COMMAND])
// goes to stdout with exit status 0; bad usage to stderr with status 2.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	if isHelp(args[0]) || args[0] == "help" {
		if args[0] == "help" && len(args) > 1 {
			return run(append(append([]string(nil), args[1:]...), "-h"), stdout, stderr)
		}
		usage(stdout)
		return 0
	}
	// Commands may be two words ("wal dump").
	name := args[0]
	rest := args[1:]
	if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		if _, ok := commands[name+" "+rest[0]]; ok {
			name, rest = name+" "+rest[0], rest[1:]
		}
	}
	c, ok := commands[name]
	if !ok {
		if isGroup(name) && (len(rest) == 0 || isHelp(rest[0])) {
			if len(rest) == 0 {
				groupUsage(stderr, name)
				return 2
			}
			groupUsage(stdout, name)
			return 0
		}
		fmt.Fprintf(stderr, "stratautl: unknown command %q\n\n", strings.Join(args[:min(2, len(args))], " "))
		usage(stderr)
		return 2
	}
	// A command prints its help where it prints usage errors; when help
	// was asked for, that is stdout.
	if helpAsked(rest) {
		stderr = stdout
	}
	if err := c.run(rest, stdout, stderr); err != nil {
		var ec exitCode
		if errors.As(err, &ec) {
			return int(ec)
		}
		if errors.Is(err, errUsage) || errors.Is(err, flag.ErrHelp) {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			return 2
		}
		fmt.Fprintf(stderr, "Error: %v\n", err)
		return 1
	}
	return 0
}

// newFlags makes a flag set whose -h prints the usage line, the flags and
// examples.
func newFlags(name, synopsis string, examples []string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: stratautl %s %s\n\nFlags:\n", name, synopsis)
		fs.PrintDefaults()
		if len(examples) > 0 {
			fmt.Fprintln(stderr, "\nExamples:")
			for _, e := range examples {
				fmt.Fprintln(stderr, "  "+e)
			}
		}
	}
	return fs
}

// parse parses flags and rejects stray positional arguments unless
// allowed.
func parse(fs *flag.FlagSet, args []string, positional int) ([]string, error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, errUsage
	}
	rest := fs.Args()
	// Allow flags after positional arguments (FILE --data-dir D).
	var pos []string
	for len(rest) > 0 {
		pos = append(pos, rest[0])
		if err := fs.Parse(rest[1:]); err != nil {
			return nil, errUsage
		}
		rest = fs.Args()
	}
	if len(pos) != positional {
		fmt.Fprintf(fs.Output(), "stratautl %s: expected %d argument(s), got %d\n", fs.Name(), positional, len(pos))
		fs.Usage()
		return nil, errUsage
	}
	return pos, nil
}
