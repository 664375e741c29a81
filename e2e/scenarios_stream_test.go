package e2e

import (
	"crypto/sha256"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/strata-db/strata/e2e/harness"
)

// digest is an etcdctl step whose stdout is too large to record: it
// records the output's size and SHA-256 instead (stderr and the exit
// status as they are).
func digest(name string, args ...string) step {
	return step{name: name, show: "etcdctl " + shellJoin(args) + " | sha256sum",
		run: func(t *testing.T, s *side) harness.Result {
			expanded := make([]string, len(args))
			for i, a := range args {
				expanded[i] = s.expand(a)
			}
			r := s.ctl.Run("", expanded...)
			out := s.norm.Normalize(r.Stdout)
			r.Stdout = fmt.Sprintf("%d bytes, sha256 %x\n", len(out), sha256.Sum256([]byte(out)))
			return r
		}}
}

// bigPuts puts n values of size bytes under prefix, one etcdctl put each,
// recording their outputs together.
func bigPuts(prefix string, n, size int) step {
	return step{name: fmt.Sprintf("put %d values of %d bytes under %s", n, size, prefix), show: "(etcdctl put, repeated)",
		run: func(t *testing.T, s *side) harness.Result {
			var all harness.Result
			for i := 0; i < n; i++ {
				v := strings.Repeat(string(rune('a'+i%26)), size)
				r := s.ctl.Run(v, "put", fmt.Sprintf("%s%02d", prefix, i))
				all.Stdout += r.Stdout
				all.Stderr += r.Stderr
				if r.Code != 0 {
					all.Code = r.Code
				}
			}
			return all
		}}
}

// streamScenario is etcdctl get --stream (etcd 3.7's RangeStream RPC)
// with each option etcdctl has, each refusal, a compaction and a leased
// key, beside the unary get of the same range. Through the grpc-proxies
// (TestProxyDiff) every --stream step is refused, with etcd's words.
func streamScenario() scenario {
	steps := []step{
		{name: "lease grant", ctl: []string{"lease", "grant", "600"}, capture: map[string]*regexp.Regexp{"l1": reLeaseID}},
	}
	for i := 0; i < 40; i++ {
		steps = append(steps, c(fmt.Sprintf("put s/%02d", i), "put", fmt.Sprintf("s/%02d", i), fmt.Sprintf("v%d-%s", (i*7)%40, strings.Repeat("x", i*10))))
	}
	steps = append(steps,
		c("put a leased key", "put", "--lease=${l1}", "s/leased", "lv"),
		c("overwrite s/05", "put", "s/05", "again"),
		c("delete s/06", "del", "s/06"),
		step{name: "revision before compaction", ctl: []string{"get", "s/00", "-w", "json"}, after: revVars},
	)
	for _, args := range [][]string{
		{"s/00"},
		{"s/06"},
		{"nope"},
		{"s/00", "-w", "json"},
		{"--prefix", "s/"},
		{"--prefix", "s/", "-w", "json"},
		{"s/10", "s/20", "-w", "json"},
		{"--from-key", "s/3"},
		{"--from-key", ""},
		{"--prefix", "s/", "--limit", "5", "-w", "json"},
		{"--prefix", "s/", "--limit", "10", "-w", "json"},
		{"--prefix", "s/", "--limit", "41", "-w", "json"},
		{"--prefix", "s/", "--limit", "1000", "-w", "json"},
		{"--prefix", "s/", "--keys-only", "-w", "json"},
		{"--prefix", "s/", "--keys-only", "--limit", "3"},
		{"--prefix", "s/", "--count-only", "-w", "fields"},
		{"--prefix", "s/", "--count-only", "--limit", "3", "-w", "fields"},
		{"--prefix", "s/", "--print-value-only"},
		{"--prefix", "s/", "--consistency", "s", "-w", "json"},
		{"--prefix", "s/", "--hex", "--limit", "2"},
		{"--prefix", "s/", "-w", "fields", "--limit", "2"},
		{"--prefix", "s/", "--rev", "5", "-w", "json"},
		{"--prefix", "s/", "--rev", "${rev}", "--limit", "15", "-w", "json"},
		{"--prefix", "s/", "--rev", "1000"},
		// A sort target with no order is accepted, and sorted chunk by
		// chunk.
		{"--prefix", "s/", "--sort-by", "VALUE", "-w", "json"},
		{"--prefix", "s/", "--sort-by", "MODIFY", "--keys-only"},
		{"--prefix", "s/", "--sort-by", "VERSION", "--keys-only", "-w", "json"},
		{"--prefix", "s/", "--sort-by", "CREATE", "--limit", "12"},
		{"--prefix", "s/", "--sort-by", "KEY", "--order", "ASCEND", "--limit", "3"},
		{"--prefix", "s/", "--sort-by", "VALUE", "--keys-only", "-w", "json"},
		// Refused.
		{"--prefix", "s/", "--order", "DESCEND"},
		{"--prefix", "s/", "--sort-by", "MODIFY", "--order", "ASCEND"},
		{"--prefix", "s/", "--sort-by", "VALUE", "--order", "DESCEND"},
		{"--prefix", "s/", "--min-mod-rev", "3"},
		{"--prefix", "s/", "--max-mod-rev", "3"},
		{"--prefix", "s/", "--min-create-rev", "3"},
		{"--prefix", "s/", "--max-create-rev", "3"},
		{""},
	} {
		unary := append([]string{"get"}, args...)
		steps = append(steps,
			c(shellJoin(unary), unary...),
			c(shellJoin(unary)+" --stream", append(unary, "--stream")...))
	}
	steps = append(steps,
		c("compact", "compact", "${prevrev}"),
		c("get --stream at a compacted revision", "get", "--prefix", "s/", "--rev", "3", "--stream"),
		c("get --stream at the compact revision", "get", "--prefix", "s/", "--rev", "${prevrev}", "--stream", "-w", "json"),
		c("get --stream after the compaction", "get", "--prefix", "s/", "--stream", "--keys-only"),
	)
	return scenario{name: "stream", steps: steps}
}

// streamLargeScenario is get --stream of a result of 12 MiB of values
// (16 MB as etcdctl's JSON), beside the unary get.
func streamLargeScenario() scenario {
	return scenario{name: "stream-large", steps: []step{
		bigPuts("big/", 12, 1<<20),
		digest("get --prefix big/ (12 MiB)", "get", "--prefix", "big/", "-w", "json"),
		digest("get --stream --prefix big/ (12 MiB)", "get", "--prefix", "big/", "-w", "json", "--stream"),
		digest("get --stream --from-key '' (all)", "get", "--from-key", "", "--stream"),
		c("get --stream --prefix big/ --limit 3 --keys-only", "get", "--prefix", "big/", "--limit", "3", "--keys-only", "--stream", "-w", "json"),
		c("get --stream --prefix big/ --count-only", "get", "--prefix", "big/", "--count-only", "--stream", "-w", "fields"),
	}}
}
