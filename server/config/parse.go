package config

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
)

// ErrHelp is returned by Parse for -h/--help. The usage line has been
// written to stderr; the caller prints Help() to stdout and exits 0, as
// etcd does.
var ErrHelp = flag.ErrHelp

// UsageError is a command-line syntax error: an unknown flag or a value
// the flag's type rejects. The flag package has already written
// "flag provided but not defined: -x" (or the bad value) and the usage
// line to stderr. etcd exits 2 for these.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// ExitCode maps a Parse error to etcd's exit status: 0 for help, 2 for
// command-line syntax errors, 1 for everything else (bad environment,
// unreadable or invalid config file, failed validation).
func ExitCode(err error) int {
	var ue *UsageError
	switch {
	case err == nil, errors.Is(err, ErrHelp):
		return 0
	case errors.As(err, &ue):
		return 2
	}
	return 1
}

// parseState is what Parse needs besides the Config: legacy spellings,
// the raw --feature-gates text, and log records made before the logger
// exists.
type parseState struct {
	legacyCfg       *Config          // receives --experimental-* values
	expBools        map[string]*bool // 3.5 boolean experimental flags
	removed         map[string]*removedValue
	featureGatesRaw string
	configFile      string
	notes           []note
}

type note struct {
	level slog.Level
	msg   string
	args  []any
}

func (p *parseState) log(level slog.Level, msg string, args ...any) {
	p.notes = append(p.notes, note{level, msg, args})
}

// Parse builds the Config from command-line args (without the program
// name), the environment (os.Environ() form) and, when --config-file or
// ETCD_CONFIG_FILE names one, a YAML file. It follows etcd 3.7's etcdmain
// precedence:
//
//  1. Flags are parsed first. -h returns ErrHelp; a syntax error returns a
//     *UsageError; --version returns a Config with PrintVersion set and
//     nothing else considered.
//  2. If --config-file is empty, ETCD_CONFIG_FILE is consulted.
//  3. With a config file, the Config is built from defaults and the file
//     only: every other flag and every ETCD_* variable is ignored, and an
//     info record says so.
//  4. Otherwise each flag not given on the command line takes ETCD_<FLAG>
//     (upper case, '-' to '_') when that variable is non-empty. A variable
//     whose flag was also given on the command line is an error (etcd logs
//     it fatally); unknown ETCD_* variables are warned about; ETCD_VERSION
//     is never honoured.
//
// Validate runs once at the end. Messages made while parsing are written
// to stderr as JSON records, filtered by the parsed --log-level.
func Parse(args []string, env []string, stderr io.Writer) (*Config, error) {
	c, p, err := parse(args, env, stderr)
	level := slog.LevelInfo
	if c != nil && err == nil {
		if l, lerr := c.SlogLevel(); lerr == nil {
			level = l
		}
	}
	p.flush(stderr, level)
	if err != nil {
		return nil, err
	}
	return c, nil
}

func newParseState() *parseState {
	return &parseState{
		legacyCfg: Default(),
		expBools:  map[string]*bool{},
		removed:   map[string]*removedValue{},
	}
}

func parse(args, env []string, stderr io.Writer) (*Config, *parseState, error) {
	c := Default()
	p := newParseState()
	fs := newFlagSet(c, p, stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, p, ErrHelp
		}
		return nil, p, &UsageError{err}
	}
	if fs.NArg() != 0 {
		return nil, p, fmt.Errorf("%q is not a valid flag", fs.Arg(0))
	}
	if c.PrintVersion {
		return c, p, nil
	}

	vars := envMap(env)
	file := p.configFile
	if file == "" {
		file = vars["ETCD_CONFIG_FILE"]
	}
	var err error
	if file != "" {
		c, err = fromFile(file, p)
		p.log(slog.LevelInfo, "loaded server configuration, other configuration command line flags and environment variables will be ignored if provided", "path", file)
	} else {
		err = fromCommandLine(c, fs, p, env)
	}
	if err != nil {
		return nil, p, err
	}
	finish(c, p)
	if err := c.Validate(); err != nil {
		return nil, p, err
	}
	return c, p, nil
}

// fromCommandLine applies the environment under the flags already parsed,
// then the etcdmain rules that depend on which flags were given.
func fromCommandLine(c *Config, fs *flag.FlagSet, p *parseState, env []string) error {
	if err := setFlagsFromEnv(fs, p, env); err != nil {
		return err
	}
	if c.RaftReadTimeout < DefaultRaftReadTimeout {
		c.RaftReadTimeout = DefaultRaftReadTimeout
		p.log(slog.LevelInfo, fmt.Sprintf("raft-read-timeout increased to minimum value: %v", DefaultRaftReadTimeout))
	}
	if c.RaftWriteTimeout < DefaultRaftWriteTimeout {
		c.RaftWriteTimeout = DefaultRaftWriteTimeout
		p.log(slog.LevelInfo, fmt.Sprintf("raft-write-timeout increased to minimum value: %v", DefaultRaftWriteTimeout))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	// Listening somewhere new without saying where clients should connect
	// is an error in etcd rather than advertising localhost.
	if set["listen-client-urls"] && !set["advertise-client-urls"] {
		c.AdvertiseClientURLs = nil
	}
	// Discovery replaces the default initial cluster unless one was given.
	if (c.DiscoverySRV != "" || c.DiscoverySRVName != "" || len(c.Discovery.Endpoints) > 0) && !set["initial-cluster"] {
		c.InitialCluster = ""
	}
	if err := mergeLegacy(c, fs, p, set); err != nil {
		return err
	}
	for name := range set {
		c.ExplicitlySet[name] = true
	}
	return nil
}

// EnvName is the environment variable for a flag: ETCD_ plus the name in
// upper case with '-' as '_' (etcd's flags.FlagToEnv).
func EnvName(flagName string) string {
	return "ETCD_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func envMap(env []string) map[string]string {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

// setFlagsFromEnv is etcd's flags.SetFlagsFromEnv over an explicit
// environment: flags given on the command line win; a variable for such a
// flag is an error; empty variables are skipped.
func setFlagsFromEnv(fs *flag.FlagSet, p *parseState, env []string) error {
	vars := envMap(env)
	if v := vars["ETCD_VERSION"]; v != "" {
		// etcd unsets it so it can never turn a server start into --version.
		p.log(slog.LevelWarn, "cannot set special environment variable", "key", "ETCD_VERSION", "value", v)
		delete(vars, "ETCD_VERSION")
		env = slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, "ETCD_VERSION=") })
	}
	onCommandLine := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCommandLine[EnvName(f.Name)] = true })
	used := map[string]bool{}
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		key := EnvName(f.Name)
		val := vars[key]
		if err != nil || onCommandLine[key] || val == "" {
			return
		}
		used[key] = true
		if serr := fs.Set(f.Name, val); serr != nil {
			err = fmt.Errorf("invalid value %q for %s: %w", val, key, serr)
			return
		}
		p.log(slog.LevelInfo, "recognized and used environment variable", "variable-name", key, "variable-value", val)
	})
	if err != nil {
		return err
	}
	for _, kv := range env {
		key, _, ok := strings.Cut(kv, "=")
		if !ok {
			p.log(slog.LevelWarn, "found invalid environment variable", "environment-variable", kv)
			continue
		}
		if used[key] {
			continue
		}
		if onCommandLine[key] {
			return fmt.Errorf("conflicting environment variable %q is shadowed by corresponding command-line flag (either unset environment variable or disable flag)", key)
		}
		if strings.HasPrefix(key, "ETCD_") {
			p.log(slog.LevelWarn, "unrecognized environment variable", "environment-variable", kv)
		}
	}
	return nil
}

// mergeLegacy moves 3.5 --experimental-* values onto their 3.6 names with
// etcd 3.6's rules (both spellings at once is an error), applies the
// boolean ones to feature gates, and vets flags etcd has removed.
func mergeLegacy(c *Config, fs *flag.FlagSet, p *parseState, set map[string]bool) error {
	for _, d := range flagDefs {
		for _, old := range d.legacy {
			if !set[old] {
				continue
			}
			if set[d.name] {
				return fmt.Errorf("cannot set --%s and --%s at the same time, please use --%s only", old, d.name, d.name)
			}
			if err := fs.Set(d.name, fs.Lookup(old).Value.String()); err != nil {
				return fmt.Errorf("--%s: %w", old, err)
			}
			set[d.name] = true
			p.log(slog.LevelWarn, fmt.Sprintf("--%s is deprecated in v3.6 and removed in v3.7; use --%s instead", old, d.name))
		}
	}
	for _, old := range slices.Sorted(maps.Keys(p.expBools)) {
		if !set[old] {
			continue
		}
		if err := applyExperimentalGate(c, old, *p.expBools[old], p.featureGatesRaw); err != nil {
			return err
		}
		p.log(slog.LevelWarn, fmt.Sprintf("--%s is deprecated in v3.6 and removed in v3.7; use --feature-gates=%s=%t instead", old, experimentalFeatureFlags[old], *p.expBools[old]))
	}
	return checkRemoved(p, set)
}

// applyExperimentalGate sets the gate that replaced a 3.5 boolean flag,
// refusing, like etcd 3.6, a --feature-gates value that names it too.
func applyExperimentalGate(c *Config, old string, val bool, gatesRaw string) error {
	feature := experimentalFeatureFlags[old]
	if strings.Contains(gatesRaw, feature) {
		return fmt.Errorf("cannot specify both flags: --%s=%v and --feature-gates=%s=%v at the same time, please just use --feature-gates=%s=%v",
			old, val, feature, c.FeatureGates[feature], feature, c.FeatureGates[feature])
	}
	c.FeatureGates[feature] = val
	c.FeatureGatesGiven[feature] = val
	return nil
}

func checkRemoved(p *parseState, set map[string]bool) error {
	for _, name := range ignoredFlags {
		if set[name] {
			p.log(slog.LevelDebug, "flag is no longer supported - ignoring", "flag-name", name)
		}
	}
	for _, name := range removedFlags {
		if !set[name] {
			continue
		}
		v := p.removed[name].val
		switch {
		case name == "proxy" && v != "off":
			return fmt.Errorf("--proxy=%s: the v2 proxy was removed in etcd v3.6 and is not supported", v)
		case name == "discovery" && v != "":
			return errors.New("--discovery (v2 discovery) was removed in etcd v3.6 and is not supported; use --discovery-endpoints and --discovery-token")
		case name == "enable-v2" && v == "true":
			p.log(slog.LevelWarn, "the v2 API is not served; ignoring --enable-v2", "flag-name", name)
		default:
			p.log(slog.LevelDebug, "flag was removed in etcd v3.6 - ignoring", "flag-name", name)
		}
	}
	return nil
}

// deprecatedFlags are etcd 3.7's warnings for flags still accepted but on
// their way out (etcdmain deprecatedFlags).
var deprecatedFlags = map[string]string{
	"max-snapshots":  "--max-snapshots is deprecated in 3.6 and will be decommissioned in 3.8.",
	"v2-deprecation": "--v2-deprecation is deprecated and scheduled for removal in v3.8. The default value is enforced, ignoring user input.",
}

// finish applies what etcd does after parsing in either mode: the
// data-dir and initial-cluster defaults that depend on --name, values where
// 0 means "built-in default", and deprecation warnings.
func finish(c *Config, p *parseState) {
	defaultIC := Default().InitialCluster
	if c.Name != DefaultName && c.InitialCluster == defaultIC {
		c.InitialCluster = initialClusterFromName(c.Name, c.AdvertisePeerURLs)
	}
	if c.DataDir == "" {
		c.DataDir = c.Name + ".strata"
		if c.ExplicitlySet["data-dir"] {
			p.log(slog.LevelWarn, "'data-dir' was empty; using default", "data-dir", c.DataDir)
		}
	}
	if c.SnapshotCount == 0 {
		c.SnapshotCount = DefaultSnapshotCount
	}
	if c.BackendBatchInterval == 0 {
		c.BackendBatchInterval = DefaultBackendBatchInterval
	}
	if c.BackendBatchLimit == 0 {
		c.BackendBatchLimit = DefaultBackendBatchLimit
	}
	if c.BackendBacklogBytes == 0 {
		c.BackendBacklogBytes = DefaultBackendBacklogBytes
	}
	if c.CompactionBatchLimit == 0 {
		c.CompactionBatchLimit = DefaultCompactionBatchLimit
	}
	if c.CompactionSleepInterval == 0 {
		c.CompactionSleepInterval = DefaultCompactionSleepInterval
	}
	if c.WatchProgressNotifyInterval == 0 {
		c.WatchProgressNotifyInterval = DefaultWatchProgressNotifyInterval
	}
	if c.WarningUnaryRequestDuration == 0 {
		c.WarningUnaryRequestDuration = DefaultWarningUnaryRequestDuration
	}
	if c.SelfSignedCertValidity == 0 {
		c.SelfSignedCertValidity = DefaultSelfSignedCertValidity
	}
	for _, name := range slices.Sorted(maps.Keys(deprecatedFlags)) {
		if c.ExplicitlySet[name] {
			p.log(slog.LevelWarn, deprecatedFlags[name])
		}
	}
	if c.Name == DefaultName {
		p.log(slog.LevelWarn, "it isn't recommended to use default name, please set a value for --name. Note that etcd might run into issue when multiple members have the same default name", "name", c.Name)
	}
	if c.QuotaBackendBytes > MaxSuggestedQuotaBackendBytes {
		p.log(slog.LevelWarn, "quota exceeds the maximum value", "quota-size-bytes", c.QuotaBackendBytes, "quota-maximum-size-bytes", MaxSuggestedQuotaBackendBytes)
	}
}

// flush writes the records gathered while parsing, at or above level.
func (p *parseState) flush(w io.Writer, level slog.Level) {
	if w == nil || len(p.notes) == 0 {
		return
	}
	lg := slog.New(newJSONHandler(w, level))
	for _, n := range p.notes {
		lg.Log(context.Background(), n.level, n.msg, n.args...)
	}
}
