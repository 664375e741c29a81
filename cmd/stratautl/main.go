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
	"time"

	"github.com/strata-db/strata/tools"
)

type command struct {
	name    string
	summary string
	// example is one typical command line, shown in the command lists
	// (stratautl -h, stratautl wal -h); the command's own -h has more.
	example string
	run     func(args []string, stdout, stderr io.Writer) error
	// args says what the command's positional arguments are, for the
	// shell completion: "file", "dir", a list of words ("bash zsh"), or
	// "" for none.
	args string
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

// Exit statuses of etcdutl (go.etcd.io/etcd/pkg/v3/cobrautl), which the
// commands etcdutl also has use for the same failures.
const (
	exitError      = 1
	exitBadFeature = 4   // a valid flag with an unsupported value (-w)
	exitBadArgs    = 128 // arguments etcdutl's checks refuse
)

// codedError is an error printed as etcdutl prints it ("Error: ...") that
// ends the process with a given status.
type codedError struct {
	code int
	err  error
}

func (e codedError) Error() string { return e.err.Error() }
func (e codedError) Unwrap() error { return e.err }

// globalFlags are etcdutl's persistent flags, accepted before or after
// the command on every command line.
type globalFlags struct {
	// format is -w/--write-out as given; "" when not given (each command
	// then takes its default: "simple" where etcdutl has the command).
	format string
	// timeout is how long a command waits for the db file's lock (0:
	// forever), etcdutl's --timeout.
	timeout time.Duration
	// timeoutSet is true when --timeout was given: the commands etcdutl
	// does not have wait only then, and otherwise fail at once, as they
	// always did.
	timeoutSet bool
}

// defaultTimeout is etcdutl's --timeout default.
const defaultTimeout = 10 * time.Second

var global = globalFlags{timeout: defaultTimeout}

// globalUsage describes the global flags in every help text.
const globalUsage = `Global flags (before or after the command):
  -w, --write-out FORMAT   output format: simple (default), table, json, fields or protobuf, as etcdutl's
                           (commands etcdutl does not have take their own formats: see their help)
  --timeout DURATION       time to wait for the lock on the db file a running server holds, 0 to wait
                           forever (default 10s for etcdutl's commands: defrag, hashkv, migrate and
                           snapshot status; the others fail at once unless it is given)
`

// takeGlobalFlags removes the global flags from args (up to a "--") and
// returns the rest. Both Go's flag spellings (-w json, -write-out=json)
// and etcdutl's (--write-out json, --timeout=5s) are accepted.
func takeGlobalFlags(args []string, stderr io.Writer) ([]string, globalFlags, error) {
	g := globalFlags{timeout: defaultTimeout}
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			rest = append(rest, args[i:]...)
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || (name != "w" && name != "write-out" && name != "timeout") {
			rest = append(rest, a)
			continue
		}
		if !hasValue {
			if i+1 >= len(args) {
				fmt.Fprintf(stderr, "stratautl: flag needs an argument: %s\n", a)
				return nil, g, errUsage
			}
			i++
			value = args[i]
		}
		if name == "timeout" {
			d, err := time.ParseDuration(value)
			if err != nil || d < 0 {
				fmt.Fprintf(stderr, "stratautl: invalid value %q for flag --timeout: want a duration such as 10s, 1m or 0\n", value)
				return nil, g, errUsage
			}
			g.timeout, g.timeoutSet = d, true
		} else {
			g.format = value
		}
	}
	return rest, g, nil
}

// retryLocked runs fn, a command etcdutl does not have that opens a db
// file, again while the file is locked, if --timeout was given.
func retryLocked(path string, fn func() error) error {
	if !global.timeoutSet {
		return fn()
	}
	return tools.RetryLocked(path, global.timeout, fn)
}

// outputFormat is -w, or def when it was not given.
func outputFormat(def string) string {
	if global.format == "" {
		return def
	}
	return global.format
}

// ownFormat is the -w of a command that etcdutl does not have, whose
// formats are table and json: etcdutl's default name "simple" means the
// command's table.
func ownFormat(stderr io.Writer, name string) (string, error) {
	switch f := outputFormat("table"); f {
	case "table", "simple":
		return "table", nil
	case "json":
		return f, nil
	default:
		fmt.Fprintf(stderr, "stratautl %s: -w must be table or json, not %q\n", name, f)
		return "", errUsage
	}
}

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
	fmt.Fprint(w, globalUsage)
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
	args, g, err := takeGlobalFlags(args, stderr)
	if err != nil {
		return 2
	}
	global = g
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
		var ce codedError
		if errors.As(err, &ce) {
			fmt.Fprintf(stderr, "Error: %v\n", ce.err)
			return ce.code
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
		fmt.Fprintln(stderr)
		fmt.Fprint(stderr, globalUsage)
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
	if collecting != nil {
		*collecting = fs
		return nil, errCollected
	}
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

// collecting, when set, makes parse (and parseUpTo) store the command's
// flag set there and stop with errCollected instead of parsing: the
// shell completion learns each command's flags from the command itself.
var collecting **flag.FlagSet

var errCollected = errors.New("flags collected")

// flagsOf returns the flag set a command defines.
func flagsOf(name string) *flag.FlagSet {
	var fs *flag.FlagSet
	collecting = &fs
	defer func() { collecting = nil }()
	commands[name].run(nil, io.Discard, io.Discard)
	return fs
}
