// Package config is the Strata server's configuration: one Config struct
// with every setting, filled the way etcd 3.7 fills its own, so an etcd
// command line, environment or config file starts Strata unchanged.
//
// # Entry point
//
//	cfg, err := config.Parse(os.Args[1:], os.Environ(), os.Stderr)
//	switch {
//	case errors.Is(err, config.ErrHelp):
//		fmt.Print(config.Help()) // to stdout, exit 0
//	case err != nil:
//		os.Exit(config.ExitCode(err)) // 2: bad flag syntax; 1: the rest
//	case cfg.PrintVersion:
//		// print versions, exit 0
//	}
//
// # Precedence (etcd 3.7.3 etcdmain/config.go, config.parse and
// configFromCmdLine; pkg/v3/flags/flag.go SetFlagsFromEnv)
//
//  1. Command-line flags, Go flag package syntax: -flag and --flag, values
//     as --flag=value or --flag value, bool flags as --flag or
//     --flag=true. An unknown flag prints "flag provided but not defined:
//     -x" and the usage line to stderr and Parse returns a *UsageError
//     (exit 2). A non-flag argument is an error (exit 1):
//     "\"x\" is not a valid flag".
//  2. --version short-circuits: nothing else is read or validated.
//  3. --config-file, or ETCD_CONFIG_FILE when the flag is empty, selects
//     file mode: defaults plus the YAML file, and nothing else. All other
//     flags and ETCD_* variables are ignored (an info record says so).
//  4. Otherwise, each flag absent from the command line takes ETCD_<NAME>
//     (NAME upper-cased, '-' to '_') when that is non-empty. A variable for
//     a flag that is also on the command line is an error (etcd exits via
//     a fatal log). Unused ETCD_* variables are warned about. ETCD_VERSION
//     is refused with a warning so the environment cannot turn a start
//     into --version.
//  5. Command-line mode only: --listen-client-urls given (flag or env)
//     without --advertise-client-urls is an error rather than advertising
//     localhost; discovery (--discovery-srv, --discovery-endpoints) clears
//     the default --initial-cluster unless one was given.
//  6. Both modes: if --name changed and --initial-cluster is still the
//     default, it becomes name=<initial-advertise-peer-urls>; an empty
//     --data-dir becomes <name>.strata (etcd: <name>.etcd); values where
//     etcd treats 0 as "built-in default" are replaced by that default.
//  7. Validate runs once.
//
// # Compatibility spellings
//
// All etcd 3.7.3 server flags are accepted. The 3.5 --experimental-*
// flags removed in 3.7 are accepted too, with etcd 3.6's rules: a
// non-boolean one sets its renamed flag (giving both spellings is an
// error), a boolean one sets its feature gate (naming that gate in
// --feature-gates as well is an error). The same holds for the keys of a
// config file. Flags etcd ignores are ignored; 3.5 flags for the v2 API,
// v2 proxy and v2 discovery are accepted, and refused only when their
// value would need that machinery (--proxy=on, --discovery=URL).
//
// # Config file
//
// The YAML keys are etcd's (sigs.k8s.io/yaml, so YAML is read as JSON with
// the json tags): URL lists are comma-separated strings, TLS settings sit
// in client-transport-security and peer-transport-security blocks,
// durations are integer nanoseconds, feature-gates is "A=true,B=false",
// log-outputs and cipher-suites are YAML lists. Unknown keys are ignored,
// as in etcd, with a warning.
//
// # Where Strata differs from etcd, on purpose
//
//   - The default data dir is <name>.strata.
//   - Insecure TLS cipher suites and --bcrypt-cost outside 4..31 are
//     refused (etcd accepts the suites, and logs and replaces the cost).
//   - --initial-cluster is checked against --name and
//     --initial-advertise-peer-urls while parsing (etcd checks at
//     bootstrap, and resolves host names when comparing).
//   - Logs are slog JSON records shaped like etcd's zap output.
//   - --disk-probe, --backend-backlog-bytes and --adaptive-procs are
//     Strata's own.
package config
