package load

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"sort"
	"strings"
	"time"
)

// Workloads are the load workloads stratabench runs, with a line of help.
var Workloads = map[string]string{
	"put":             "puts of --key-size/--val-size keys over --key-space-size keys",
	"range":           "range requests for KEY [END] (or --prefix), linearizable or serializable",
	"txn-put":         "transactions of --txn-ops puts each",
	"txn-mixed":       "transactions of one put or one range, --rw-ratio reads per write",
	"watch":           "creates --streams x --watch-per-stream watches, then puts on the watched keys and counts the events",
	"watch-latency":   "puts one key at --put-rate and measures how long each event takes to reach every watcher",
	"lease-keepalive": "grants a lease per client, then sends one keep-alive per request",
}

// WorkloadNames lists the workloads in order.
func WorkloadNames() []string {
	n := make([]string, 0, len(Workloads))
	for k := range Workloads {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// Global holds the flags every workload takes (etcd benchmark's persistent
// flags).
type Global struct {
	Endpoints          []string
	Conns              int
	Clients            int
	Precise            bool
	CACert             string
	Cert               string
	Key                string
	InsecureSkipVerify bool
	User               string
	DialTimeout        time.Duration
	TargetLeader       bool
	WriteOut           string
}

// Options is a parsed command line.
type Options struct {
	Global
	Workload string

	Total        int
	Rate         int
	KeySize      int
	ValSize      int
	KeySpaceSize int
	SeqKeys      bool

	// put
	ValKind           string // "random" (etcd benchmark's) or "pod"
	KeyPrefix         string
	CompactInterval   time.Duration
	CompactIndexDelta int64

	// range, txn-mixed
	Consistency string
	Limit       int64
	CountOnly   bool
	KeysOnly    bool
	RangePrefix bool
	RangeKey    string
	RangeEnd    string

	// txn-put, txn-mixed
	TxnOps  int
	EndKey  string
	RWRatio float64

	// watch, watch-latency
	Streams         int
	WatchPerStream  int
	WatchedKeyTotal int
	PutRate         int
	PutTotal        int
	PrevKV          bool
}

// UsageError is a bad command line; stratabench exits 2 on it.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

func usagef(format string, a ...any) error { return &UsageError{Msg: fmt.Sprintf(format, a...)} }

// ErrHelp means -h was given; the help was written.
var ErrHelp = errors.New("help requested")

// listFlag is a comma-separated list; repeating the flag appends.
type listFlag struct {
	p   *[]string
	set bool
}

func (l *listFlag) String() string {
	if l.p == nil {
		return ""
	}
	return strings.Join(*l.p, ",")
}

func (l *listFlag) Set(v string) error {
	if !l.set {
		*l.p = nil
		l.set = true
	}
	for _, e := range strings.Split(v, ",") {
		if e = strings.TrimSpace(e); e != "" {
			*l.p = append(*l.p, e)
		}
	}
	return nil
}

// DefaultGlobal is the global flags' defaults (etcd benchmark's).
func DefaultGlobal() Global {
	return Global{Endpoints: []string{"127.0.0.1:2379"}, Conns: 1, Clients: 1, WriteOut: "simple"}
}

func addGlobalFlags(fs *flag.FlagSet, g *Global) {
	fs.Var(&listFlag{p: &g.Endpoints}, "endpoints", "gRPC endpoints, comma-separated (host:port, http:// or https://)")
	fs.IntVar(&g.Conns, "conns", g.Conns, "total number of gRPC connections")
	fs.IntVar(&g.Clients, "clients", g.Clients, "total number of concurrent clients (workers), spread over the connections")
	fs.BoolVar(&g.Precise, "precise", g.Precise, "print figures with full floating point precision")
	fs.StringVar(&g.CACert, "cacert", g.CACert, "verify the servers' certificates with this CA bundle")
	fs.StringVar(&g.Cert, "cert", g.Cert, "client TLS certificate file")
	fs.StringVar(&g.Key, "key", g.Key, "client TLS key file")
	fs.BoolVar(&g.InsecureSkipVerify, "insecure-skip-tls-verify", g.InsecureSkipVerify, "skip server certificate verification")
	fs.StringVar(&g.User, "user", g.User, "username[:password] for authentication; prompts for the password when it is missing")
	fs.DurationVar(&g.DialTimeout, "dial-timeout", g.DialTimeout, "how long to wait for each connection to be ready (0: 10s)")
	fs.BoolVar(&g.TargetLeader, "target-leader", g.TargetLeader, "connect only to the leader's client URLs")
	fs.StringVar(&g.WriteOut, "write-out", g.WriteOut, "output format: simple (etcd benchmark's summary) or json")
	fs.StringVar(&g.WriteOut, "w", g.WriteOut, "short for --write-out")
}

// flagSet builds the flag set of a workload; its defaults are etcd
// benchmark's for the same workload.
func flagSet(workload string, o *Options) (*flag.FlagSet, error) {
	if _, ok := Workloads[workload]; !ok {
		return nil, usagef("stratabench: unknown workload %q (want one of %s, or disk)", workload, strings.Join(WorkloadNames(), ", "))
	}
	fs := flag.NewFlagSet("stratabench "+workload, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	addGlobalFlags(fs, &o.Global)
	total := func(def int, what string) { fs.IntVar(&o.Total, "total", def, "total number of "+what) }
	rate := func(what string) { fs.IntVar(&o.Rate, "rate", 0, "maximum "+what+" per second (0 is no limit)") }
	sizes := func(key, val int) {
		fs.IntVar(&o.KeySize, "key-size", key, "key size in bytes")
		if val >= 0 {
			fs.IntVar(&o.ValSize, "val-size", val, "value size in bytes")
		}
	}
	keySpace := func() { fs.IntVar(&o.KeySpaceSize, "key-space-size", 1, "number of distinct keys") }
	consistency := func() {
		fs.StringVar(&o.Consistency, "consistency", "l", "linearizable (l) or serializable (s) reads")
	}
	switch workload {
	case "put":
		sizes(8, 8)
		rate("puts")
		total(10000, "put requests")
		keySpace()
		fs.BoolVar(&o.SeqKeys, "sequential-keys", false, "use sequential keys (else random in the key space)")
		fs.StringVar(&o.KeyPrefix, "prefix", "", "prefix for keys")
		fs.StringVar(&o.ValKind, "val-kind", "random", "values: random (one random value, as etcd's benchmark) or pod (a Kubernetes Pod in JSON, new uids and timestamps each put, cut to --val-size)")
		fs.DurationVar(&o.CompactInterval, "compact-interval", 0, "compact the store every interval while running (0: never)")
		fs.Int64Var(&o.CompactIndexDelta, "compact-index-delta", 1000, "revisions kept behind the current one by --compact-interval")
	case "range":
		rate("range requests")
		total(10000, "range requests")
		consistency()
		fs.Int64Var(&o.Limit, "limit", 0, "maximum number of keys each range returns (0 is no limit)")
		fs.BoolVar(&o.CountOnly, "count-only", false, "only return the count of keys")
		fs.BoolVar(&o.KeysOnly, "keys-only", false, "only return the keys")
		fs.BoolVar(&o.RangePrefix, "prefix", false, "range over all keys with KEY as prefix")
	case "txn-put":
		sizes(8, 8)
		fs.IntVar(&o.TxnOps, "txn-ops", 1, "number of puts per transaction")
		rate("transactions")
		total(10000, "transactions")
		keySpace()
	case "txn-mixed":
		sizes(8, 8)
		rate("transactions")
		total(10000, "transactions")
		fs.StringVar(&o.EndKey, "end-key", "", "range end of the reads (default: every key, limited by --limit)")
		fs.Int64Var(&o.Limit, "limit", 1000, "maximum number of keys each read returns")
		keySpace()
		consistency()
		fs.Float64Var(&o.RWRatio, "rw-ratio", 1, "reads per write")
	case "watch":
		fs.IntVar(&o.Streams, "streams", 10, "total watch streams")
		fs.IntVar(&o.WatchPerStream, "watch-per-stream", 100, "watches per stream")
		fs.IntVar(&o.WatchedKeyTotal, "watched-key-total", 1, "number of keys watched")
		fs.IntVar(&o.PutRate, "put-rate", 0, "puts per second on the watched keys (0 is no limit)")
		fs.IntVar(&o.PutTotal, "put-total", 1000, "number of puts on the watched keys")
		sizes(32, -1)
		keySpace()
		fs.BoolVar(&o.SeqKeys, "sequential-keys", false, "use sequential keys (else random in the key space)")
	case "watch-latency":
		fs.IntVar(&o.Streams, "streams", 10, "total watch streams")
		fs.IntVar(&o.WatchPerStream, "watchers-per-stream", 10, "watchers per stream")
		fs.BoolVar(&o.PrevKV, "prevkv", false, "ask for the previous key-value in each event")
		fs.IntVar(&o.PutTotal, "put-total", 1000, "number of puts")
		fs.IntVar(&o.PutRate, "put-rate", 100, "puts per second (0 is no limit)")
		sizes(32, 32)
	case "lease-keepalive":
		total(10000, "keep-alive requests")
	}
	return fs, nil
}

// Parse parses a workload's command line. Global flags may come before the
// workload's own (they were parsed into g) or among them; flags and
// positional arguments may be mixed, as with etcd's benchmark. On -h it
// writes the help to help and returns ErrHelp.
func Parse(workload string, g Global, args []string, help io.Writer) (*Options, error) {
	o := &Options{Global: g, Workload: workload}
	fs, err := flagSet(workload, o)
	if err != nil {
		return nil, err
	}
	var pos []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				PrintHelp(help, workload, fs)
				return nil, ErrHelp
			}
			return nil, usagef("stratabench %s: %v", workload, err)
		}
		rest = fs.Args()
		if len(rest) == 0 {
			break
		}
		pos = append(pos, rest[0])
		rest = rest[1:]
	}
	if err := o.validate(pos); err != nil {
		return nil, err
	}
	return o, nil
}

// ParseGlobal parses global flags that precede the workload name
// (`stratabench --endpoints=X put ...`, etcd's order) and returns the
// workload and the arguments after it.
func ParseGlobal(args []string, help io.Writer) (Global, string, []string, error) {
	g := DefaultGlobal()
	fs := flag.NewFlagSet("stratabench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	addGlobalFlags(fs, &g)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			PrintHelp(help, "", fs)
			return g, "", nil, ErrHelp
		}
		return g, "", nil, usagef("stratabench: %v", err)
	}
	if fs.NArg() == 0 {
		return g, "", nil, usagef("stratabench: no workload given (want one of %s)", strings.Join(WorkloadNames(), ", "))
	}
	return g, fs.Arg(0), fs.Args()[1:], nil
}

// Examples are a few command lines of each workload, for its -h.
var Examples = map[string][]string{
	"put": {
		"stratabench put --endpoints=127.0.0.1:2379 --clients=16 --conns=4 --total=10000 --key-size=8 --val-size=256",
		"stratabench put --total=100000 --sequential-keys --key-space-size=100000 --rate=5000 -w json",
	},
	"range": {
		"stratabench range foo --consistency=s --clients=16 --conns=4 --total=20000",
		"stratabench range --prefix /registry/ --limit=500 --keys-only",
	},
	"txn-put":   {"stratabench txn-put --txn-ops=4 --key-space-size=1000 --total=5000"},
	"txn-mixed": {"stratabench txn-mixed --rw-ratio=4 --key-space-size=1000 --total=10000 --consistency=s"},
	"watch":     {"stratabench watch --streams=10 --watch-per-stream=100 --watched-key-total=10 --put-total=1000"},
	"watch-latency": {
		"stratabench watch-latency --put-total=1000 --put-rate=200 --streams=10 --watchers-per-stream=10",
	},
	"lease-keepalive": {"stratabench lease-keepalive --clients=8 --total=10000"},
}

// Usage writes stratabench's help: its commands, the global flags every
// load workload takes, and examples.
func Usage(w io.Writer) {
	fmt.Fprint(w, `Usage:
  stratabench [global flags] WORKLOAD [flags]   load an etcd v3 endpoint, as etcd's benchmark does
  stratabench disk --dir DIR [flags]            measure a disk as etcd's fio profile does
  stratabench disk compare --fio F --bench B    compare stratabench disk with fio
  stratabench floor-server --listen A --data-dir D   serve the gRPC floor bench/compare.sh measures
  stratabench help [COMMAND]                    this help, or a command's flags and examples

Load workloads (etcd benchmark's, with its flags and defaults):
`)
	for _, n := range WorkloadNames() {
		fmt.Fprintf(w, "  %-16s %s\n", n, Workloads[n])
	}
	fmt.Fprintf(w, `
Each prints a progress bar on stderr, then etcd benchmark's summary (or,
with -w json, one JSON object) on stdout. Global flags may come before or
after the workload. Exit status: 0 when a request succeeded, 1 when none
did, 2 on bad flags.

Global flags:
`)
	g := DefaultGlobal()
	fs := flag.NewFlagSet("stratabench", flag.ContinueOnError)
	addGlobalFlags(fs, &g)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fmt.Fprint(w, `
Examples:
  stratabench put --endpoints=127.0.0.1:2379 --clients=16 --conns=4 --total=10000 --val-size=256
  stratabench --endpoints=127.0.0.1:2379 range foo --consistency=s --total=20000 -w json
  stratabench disk --dir /var/lib/etcd-test --plot fsync.png

Run 'stratabench COMMAND -h' for a command's flags and examples.
`)
}

// PrintHelp writes the usage of a workload (or of stratabench when
// workload is empty), its flags and examples.
func PrintHelp(w io.Writer, workload string, fs *flag.FlagSet) {
	if workload == "" {
		Usage(w)
		return
	}
	args := ""
	if workload == "range" {
		args = " KEY [END]"
	}
	fmt.Fprintf(w, "Usage: stratabench [global flags] %s [flags]%s\n\n%s\n\nFlags (global and %s):\n", workload, args, Workloads[workload], workload)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	fmt.Fprintln(w, "\nExamples:")
	for _, e := range Examples[workload] {
		fmt.Fprintln(w, "  "+e)
	}
}

// varintLen is the number of bytes binary.PutVarint writes for v.
func varintLen(v int64) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutVarint(b[:], v)
}

func (o *Options) validate(pos []string) error {
	bad := func(format string, a ...any) error {
		return usagef("stratabench %s: %s", o.Workload, fmt.Sprintf(format, a...))
	}
	if len(o.Endpoints) == 0 {
		return bad("--endpoints is empty")
	}
	for _, e := range o.Endpoints {
		if _, _, err := parseEndpoint(e); err != nil {
			return bad("%v", err)
		}
	}
	if o.Conns < 1 {
		return bad("--conns must be at least 1, got %d", o.Conns)
	}
	if o.Clients < 1 {
		return bad("--clients must be at least 1, got %d", o.Clients)
	}
	if (o.Cert == "") != (o.Key == "") {
		return bad("--cert and --key go together")
	}
	if o.DialTimeout < 0 {
		return bad("--dial-timeout must not be negative")
	}
	if o.WriteOut != "simple" && o.WriteOut != "json" {
		return bad("-w must be simple or json, got %q", o.WriteOut)
	}
	switch o.Workload {
	case "range":
		if len(pos) > 2 || (len(pos) == 0 && !o.RangePrefix) {
			return bad("want KEY [END] (or --prefix [KEY]), got %d arguments", len(pos))
		}
		if len(pos) >= 1 {
			o.RangeKey = pos[0]
		}
		if len(pos) == 2 {
			if o.RangePrefix {
				return bad("END and --prefix are exclusive")
			}
			o.RangeEnd = pos[1]
		}
		if o.RangeKey == "" && !o.RangePrefix {
			return bad("KEY must not be empty")
		}
	case "txn-mixed":
		// etcd's benchmark takes (and ignores) KEY [END] here.
		if len(pos) > 2 {
			return bad("too many arguments: %q", pos)
		}
	default:
		if len(pos) > 0 {
			return bad("unexpected arguments: %q", pos)
		}
	}
	switch o.Workload {
	case "put", "range", "txn-put", "txn-mixed", "lease-keepalive":
		if o.Total < 1 {
			return bad("--total must be at least 1, got %d", o.Total)
		}
		if o.Rate < 0 {
			return bad("--rate must not be negative, got %d", o.Rate)
		}
	}
	switch o.Workload {
	case "put", "txn-put", "txn-mixed", "watch":
		if o.KeySpaceSize < 1 {
			return bad("expected positive --key-space-size, got %d", o.KeySpaceSize)
		}
		if need := varintLen(int64(o.KeySpaceSize - 1)); o.KeySize < need {
			return bad("--key-size %d is too small for --key-space-size %d (keys need %d bytes)", o.KeySize, o.KeySpaceSize, need)
		}
	case "watch-latency":
		if o.KeySize < 1 {
			return bad("--key-size must be at least 1, got %d", o.KeySize)
		}
	}
	if o.ValSize < 0 {
		return bad("--val-size must not be negative, got %d", o.ValSize)
	}
	switch o.Workload {
	case "put":
		if o.ValKind != "random" && o.ValKind != "pod" {
			return bad("--val-kind must be random or pod, got %q", o.ValKind)
		}
		if o.CompactInterval < 0 || o.CompactIndexDelta < 0 {
			return bad("--compact-interval and --compact-index-delta must not be negative")
		}
	case "range", "txn-mixed":
		if o.Consistency != "l" && o.Consistency != "s" {
			return bad("--consistency must be l (linearizable) or s (serializable), got %q", o.Consistency)
		}
		if o.Limit < 0 {
			return bad("--limit must not be negative, got %d", o.Limit)
		}
		if o.CountOnly && o.KeysOnly {
			return bad("--keys-only and --count-only are exclusive")
		}
		if o.Workload == "txn-mixed" && (o.RWRatio < 0 || o.RWRatio != o.RWRatio) {
			return bad("--rw-ratio must not be negative, got %v", o.RWRatio)
		}
	case "txn-put":
		if o.TxnOps < 1 {
			return bad("--txn-ops must be at least 1, got %d", o.TxnOps)
		}
		if o.TxnOps > o.KeySpaceSize {
			return bad("--txn-ops %d is larger than --key-space-size %d (a transaction may not put one key twice)", o.TxnOps, o.KeySpaceSize)
		}
	case "watch", "watch-latency":
		if o.Streams < 1 || o.WatchPerStream < 1 {
			return bad("--streams and the watches per stream must be at least 1")
		}
		if o.Workload == "watch" && o.WatchedKeyTotal < 1 {
			return bad("--watched-key-total must be at least 1, got %d", o.WatchedKeyTotal)
		}
		if o.PutTotal < 1 {
			return bad("--put-total must be at least 1, got %d", o.PutTotal)
		}
		if o.PutRate < 0 {
			return bad("--put-rate must not be negative, got %d", o.PutRate)
		}
	}
	return nil
}

// parseEndpoint splits an endpoint into its host:port and whether it asks
// for TLS (an https:// or unixs:// URL). A bare host:port is accepted, as
// etcd's clients accept it.
func parseEndpoint(e string) (addr string, tls bool, err error) {
	if strings.Contains(e, "://") {
		u, err := url.Parse(e)
		if err != nil {
			return "", false, fmt.Errorf("bad endpoint %q: %v", e, err)
		}
		switch u.Scheme {
		case "http":
		case "https":
			tls = true
		default:
			return "", false, fmt.Errorf("bad endpoint %q: scheme must be http or https", e)
		}
		e = u.Host
	}
	if _, port, err := net.SplitHostPort(e); err != nil || port == "" {
		return "", false, fmt.Errorf("bad endpoint %q: want host:port", e)
	}
	return e, tls, nil
}
