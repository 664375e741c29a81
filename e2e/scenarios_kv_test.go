package e2e

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/strata-db/strata/e2e/harness"
)

// scenarios lists every differential scenario, in run order. Each gets a
// fresh pair of servers.
func scenarios() []scenario {
	return []scenario{
		kvScenario(),
		streamScenario(),
		streamLargeScenario(),
		downgradeScenario(),
		stopOnDefragScenario(true),
		stopOnDefragScenario(false),
		watchScenario(),
		leaseScenario(),
		concurrencyScenario(),
		maintenanceScenario(),
		clusterScenario(),
		httpScenario(),
		quotaScenario(),
		authScenario(),
		tlsScenario(),
		gatewayMaintenanceScenario(),
		accessScenario(),
		startupScenario(),
	}
}

// c is shorthand for an etcdctl step.
func c(name string, args ...string) step { return step{name: name, ctl: args} }

// in is an etcdctl step fed stdin.
func in(name, stdin string, args ...string) step { return step{name: name, ctl: args, stdin: stdin} }

var reHeaderRev = regexp.MustCompile(`"revision":(\d+)`)

// revVars captures the header revision of a -w json output as ${rev} and
// ${nextrev}.
func revVars(stdout string, vars map[string]string) {
	if m := reHeaderRev.FindStringSubmatch(stdout); m != nil {
		n, _ := strconv.Atoi(m[1])
		vars["rev"] = m[1]
		vars["prevrev"] = strconv.Itoa(n - 1)
		vars["nextrev"] = strconv.Itoa(n + 1)
	}
}

// txnOps is a non-interactive txn body with no compares and n puts.
func txnOps(n int) string {
	var b strings.Builder
	b.WriteString("\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "put op%03d v\n", i)
	}
	b.WriteString("\n\n")
	return b.String()
}

// restartStep stops a side with SIGTERM and starts it on the same data dir.
func restartStep() step {
	return step{
		name: "restart server (SIGTERM, same data dir)",
		show: "(restart)",
		run: func(t *testing.T, s *side) harness.Result {
			if err := s.srv.Restart(); err != nil {
				t.Fatalf("%s: %v", s.label, err)
			}
			return harness.Result{}
		},
	}
}

// kvScenario: KV reads and writes, their flags and output
// formats, txn, compaction, limits, member list and endpoint status.
func kvScenario() scenario {
	big := strings.Repeat("x", 1600*1024) // over the 1.5 MiB request limit
	return scenario{name: "kv", steps: []step{
		c("put", "put", "foo", "bar"),
		c("put foo1", "put", "foo1", "bar1"),
		c("put foo2", "put", "foo2", "bar2"),
		c("put foo3", "put", "foo3", "bar3"),
		c("put zoo", "put", "zoo", "zval"),
		c("put a/b", "put", "a/b", "ab"),
		c("overwrite foo", "put", "foo", "bar-v2"),
		c("put --prev-kv", "put", "foo1", "bar1-v2", "--prev-kv"),
		c("put -w json", "put", "foo2", "bar2-v2", "-w", "json"),
		c("put --ignore-value", "put", "foo2", "--ignore-value"),
		c("get", "get", "foo"),
		c("get missing", "get", "nope"),
		c("get --hex", "get", "foo", "--hex"),
		c("get --rev=0", "get", "foo", "--rev=0"),
		c("get -wjson shorthand", "get", "foo", "-wjson"),
		c("get -w json", "get", "foo", "-w", "json"),
		c("get range", "get", "foo", "foo3"),
		c("get --prefix", "get", "--prefix", "foo"),
		c("get --prefix --limit", "get", "--prefix", "foo", "--limit", "2"),
		c("get --limit -w json (more)", "get", "--prefix", "foo", "--limit", "2", "-w", "json"),
		c("get --rev old", "get", "foo", "--rev", "2"),
		c("get --rev -w json", "get", "--prefix", "foo", "--rev", "4", "-w", "json"),
		c("get --from-key", "get", "--from-key", "foo2"),
		c("get --from-key empty", "get", "--from-key", ""),
		c("get --keys-only", "get", "--prefix", "foo", "--keys-only"),
		c("get --print-value-only", "get", "--prefix", "foo", "--print-value-only"),
		c("get --count-only", "get", "--prefix", "foo", "--count-only", "-w", "fields"),
		c("get -w fields", "get", "foo", "-w", "fields"),
		c("get --order DESCEND", "get", "--prefix", "foo", "--order", "DESCEND"),
		c("get --sort-by VALUE", "get", "--prefix", "foo", "--sort-by", "VALUE", "--order", "DESCEND"),
		c("get --sort-by MODIFY", "get", "--prefix", "foo", "--sort-by", "MODIFY", "--order", "ASCEND"),
		c("get --sort-by CREATE", "get", "--prefix", "foo", "--sort-by", "CREATE", "--order", "DESCEND"),
		c("get --sort-by VERSION", "get", "--prefix", "foo", "--sort-by", "VERSION", "--order", "DESCEND", "--keys-only"),
		c("get --min/max-mod-rev", "get", "--prefix", "foo", "--min-mod-rev", "3", "--max-mod-rev", "8", "--keys-only"),
		c("get --consistency s", "get", "foo", "--consistency", "s", "-w", "json"),
		c("get --min-create-rev", "get", "--prefix", "foo", "--min-create-rev", "3", "--keys-only"),
		c("get empty key", "get", ""),
		c("put empty key", "put", "", "v"),
		in("put value from stdin", "from stdin", "put", "stdinkey"),
		in("put empty value from stdin", "", "put", "emptyval"),
		c("put empty value", "put", "emptyval2", ""),
		c("get empty value -w json", "get", "emptyval2", "-w", "json"),
		c("del missing", "del", "nope"),
		c("del range", "del", "foo1", "foo3", "--range"),
		c("get after del range", "get", "--prefix", "foo"),
		c("put back", "put", "foo1", "again"),
		c("del --prefix --prev-kv", "del", "--prefix", "foo", "--prev-kv"),
		c("put p1", "put", "p1", "1"),
		c("put p2", "put", "p2", "2"),
		c("del --prefix -w json", "del", "--prefix", "p", "-w", "json", "--prev-kv"),
		c("put zz1", "put", "zz1", "1"),
		c("put zz2", "put", "zz2", "2"),
		c("del --from-key", "del", "--from-key", "zz"),
		c("get all after deletes", "get", "--from-key", "", "-w", "json"),
		in("txn success", "value(\"zoo\") = \"zval\"\n\nput zoo zval2\nput t1 x\n\nget zoo\n\n", "txn"),
		in("txn failure", "value(\"zoo\") = \"nope\"\n\nput zoo never\n\nget zoo\nput t2 y\n\n", "txn"),
		in("txn -w json", "mod(\"zoo\") > \"0\"\nversion(\"zoo\") = \"2\"\ncreate(\"t1\") != \"0\"\n\nget t1\ndel t1\n\nput t3 z\n\n", "txn", "-w", "json"),
		in("txn compare missing key", "create(\"ghost\") = \"0\"\n\nput ghost boo\n\n\n", "txn"),
		in("txn over op limit (129 ops)", txnOps(129), "txn"),
		in("txn duplicate key", "\nput d 1\nput d 2\n\n\n", "txn"),
		in("txn range ops -w json", "\nget --prefix t\nget zoo\n\n\n", "txn", "-w", "json"),
		in("put over size limit", big, "put", "bigkey"),
		{name: "revision before compaction", ctl: []string{"get", "zoo", "-w", "json"}, after: revVars},
		c("compact", "compact", "${prevrev}"),
		c("get compacted revision", "get", "zoo", "--rev", "3"),
		c("get at compact revision", "get", "zoo", "--rev", "${prevrev}"),
		c("get future revision", "get", "zoo", "--rev", "1000"),
		c("compact again (already compacted)", "compact", "3"),
		c("compact future", "compact", "1000"),
		c("compact --physical", "compact", "${rev}", "--physical"),
		c("member list", "member", "list"),
		c("member list -w table", "member", "list", "-w", "table"),
		c("member list -w json", "member", "list", "-w", "json"),
		c("member list -w fields", "member", "list", "-w", "fields"),
		c("member list -w json --hex", "member", "list", "-w", "json", "--hex"),
		c("get -w fields --hex", "get", "foo", "-w", "fields", "--hex"),
		c("endpoint status", "endpoint", "status"),
		c("endpoint status -w table", "endpoint", "status", "-w", "table"),
		c("endpoint status -w json", "endpoint", "status", "-w", "json"),
		c("endpoint status -w fields", "endpoint", "status", "-w", "fields"),
		c("endpoint health", "endpoint", "health"),
		c("endpoint status --cluster", "endpoint", "status", "--cluster", "-w", "table"),
		c("endpoint health --cluster -w json", "endpoint", "health", "--cluster", "-w", "json"),
		restartStep(),
		c("get all after restart", "get", "--from-key", "", "-w", "json"),
		c("put after restart", "put", "after", "restart", "-w", "json"),
	}}
}
