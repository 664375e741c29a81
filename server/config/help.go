package config

import (
	"fmt"
	"strings"
)

// usageLine is what -h and a bad flag print to stderr (etcd prints its
// usage line there too; the flag list goes to stdout via Help).
const usageLine = `Usage:

  strata [flags]
    Start a Strata server (an etcd-compatible key-value store).

  strata --version
    Print the version and exit.

  strata -h | --help
    Print this help and the list of flags.

  strata gateway start [flags]
    Run etcd's stateless TCP gateway in front of the cluster's client
    endpoints ('strata gateway start -h' for its flags).

  strata --config-file FILE
    Read the configuration from a YAML file with etcd's keys. Other flags
    and ETCD_* environment variables are then ignored. Durations in the
    file are integer nanoseconds, as in etcd.

Every flag can also be set from the environment as ETCD_<FLAG>, upper
case with '-' as '_' (for example ETCD_LISTEN_CLIENT_URLS). A flag given
on the command line must not also be set in the environment.

Examples:

  strata --name node1 --data-dir /var/lib/strata
  strata --listen-client-urls http://0.0.0.0:2379 --advertise-client-urls http://10.0.0.1:2379
  ETCD_NAME=node1 ETCD_INITIAL_CLUSTER=node1=http://localhost:2380 strata
`

// Help is the flag list, grouped, with each flag's default, for -h.
func Help() string {
	var b strings.Builder
	defaults := Default()
	p := newParseState()
	for _, g := range helpGroups {
		fmt.Fprintf(&b, "\n%s:\n", g)
		for _, d := range flagDefs {
			if d.group != g {
				continue
			}
			def := d.bind(defaults, p).String()
			if d.name == "data-dir" {
				def = "${name}.strata"
			}
			fmt.Fprintf(&b, "  --%s '%s'\n", d.name, def)
			for _, line := range strings.Split(d.usage, "\n") {
				fmt.Fprintf(&b, "    %s\n", line)
			}
		}
	}
	b.WriteString("\nDeprecated spellings (accepted; each sets the flag or feature gate named):\n")
	for _, d := range flagDefs {
		for _, old := range d.legacy {
			fmt.Fprintf(&b, "  --%s -> --%s\n", old, d.name)
		}
	}
	for _, old := range sortedKeys(experimentalFeatureFlags) {
		fmt.Fprintf(&b, "  --%s -> --feature-gates=%s=true|false\n", old, experimentalFeatureFlags[old])
	}
	b.WriteString("\nRemoved in etcd 3.6 (accepted and ignored; v2 proxy and v2 discovery values are refused):\n  --")
	b.WriteString(strings.Join(removedFlags, "\n  --"))
	b.WriteString("\n\nOther:\n  --config-file ''\n    YAML configuration file; see above.\n  --version\n    Print the version and exit.\n")
	return b.String()
}
