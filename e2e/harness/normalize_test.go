package harness

import (
	"strconv"
	"strings"
	"testing"
)

// Two etcd runs differ in ids, ports, paths and timings; after
// normalization they must be equal.
func TestNormalizeMasksRunDifferences(t *testing.T) {
	cases := []struct{ a, b string }{
		{`{"header":{"cluster_id":324952591200643719,"member_id":3319814642761637952,"revision":2,"raft_term":2},"count":1}`,
			`{"header":{"cluster_id":111,"member_id":222,"revision":2,"raft_term":3},"count":1}`},
		{"lease 2040a201da6aa70a granted with TTL(60s)", "lease 694d7aa1c5e8c10a granted with TTL(60s)"},
		{"lease 2040a201da6aa70a granted with TTL(60s), remaining(59s), attached keys([b a])",
			"lease 694d7aa1c5e8c10a granted with TTL(60s), remaining(60s), attached keys([a b])"},
		{"found 1 leases\n2040a201da6aa70a\n", "found 1 leases\n694d7aa1c5e8c10a\n"},
		{"http://127.0.0.1:40001, 2e1259d415f2a040, 3.7.3, 3.7.0, 20 kB, 16 kB, 20%, 2.1 GB, true, false, 2, 5, 5, , , false",
			"http://127.0.0.1:50002, 8e9e05c52164694d, 3.7.0, 3.7.0, 25 kB, 12 kB, 52%, 2.1 GB, true, false, 3, 9, 9, , , false"},
		{"┌───┐\n│ ENDPOINT │ ID │ VERSION │\n├───┤\n│ http://127.0.0.1:40001 │ 2e1259d415f2a040 │   3.7.3 │\n└───┘\n",
			"+--+\n| ENDPOINT | ID | VERSION |\n+--+\n| http://127.0.0.1:50002 | 8e9e05c5 | 3.7.1 |\n+--+\n"},
		{"Snapshot saved at /tmp/x1/snap.db", "Snapshot saved at /tmp/y2/snap.db"},
		{"<client> is healthy: successfully committed proposal: took = 16.3ms", "<client> is healthy: successfully committed proposal: took = 2µs"},
		{`{"level":"warn","ts":"2026-11-22T06:03:52.108021Z","caller":"x.go:1","msg":"retrying","target":"etcd-endpoints://0x3f363b132600/127.0.0.1:23790","error":"boom"}`,
			`{"level":"warn","ts":"2026-11-22T07:00:00.1Z","caller":"y.go:9","msg":"retrying","target":"etcd-endpoints://0xc000123456/127.0.0.1:1234","error":"boom"}`},
		{"memberID:3319814642761637952 alarm:NOSPACE", "memberID:42 alarm:NOSPACE"},
		{"Member f19ddbe6fe830bf1 added as learner to cluster 148276a8f75b6a87", "Member  9ddbe6fe830bf1 added as learner to cluster  48276a8f75b6a87"},
		{`"RaftTerm" : 2`, `"RaftTerm" : 7`},
		{"[+]b ok\n[+]a ok\nok", "[+]a ok\n[+]b ok\nok"},
		{`{"etcdcluster":"3.7.0","etcdserver":"3.7.x","storage":"3.5.0"}`, `{"etcdcluster":"3.7.0","etcdserver":"3.7.x","storage":"3.7.0"}`},
	}
	for _, c := range cases {
		a := NewNormalizer()
		a.Literal("http://127.0.0.1:40001", "<client>")
		a.Literal("/tmp/x1", "<dir>")
		b := NewNormalizer()
		b.Literal("http://127.0.0.1:50002", "<client>")
		b.Literal("/tmp/y2", "<dir>")
		na, nb := a.Normalize(c.a), b.Normalize(c.b)
		if na != nb {
			t.Errorf("not equal after normalization:\nA: %s\nB: %s\n%s", na, nb, UnifiedDiff("A", "B", na, nb))
		}
	}
}

// What a client can observe must survive normalization: a difference in a
// revision, value, count, key, error or granted TTL is still a difference.
func TestNormalizeKeepsSemantics(t *testing.T) {
	cases := []struct{ a, b string }{
		{`{"header":{"cluster_id":1,"member_id":2,"revision":2,"raft_term":2}}`, `{"header":{"cluster_id":1,"member_id":2,"revision":3,"raft_term":2}}`},
		{`{"kvs":[{"key":"Zm9v","create_revision":2,"mod_revision":2,"version":1,"value":"YmFy"}],"count":1}`,
			`{"kvs":[{"key":"Zm9v","create_revision":2,"mod_revision":3,"version":1,"value":"YmFy"}],"count":1}`},
		{`{"count":1}`, `{"count":2}`},
		{"foo\nbar", "foo\nbaz"},
		{"Error: etcdserver: request is too large", "Error: etcdserver: request too large"},
		{"lease 2040a201da6aa70a granted with TTL(60s)", "lease 2040a201da6aa70a granted with TTL(61s)"},
		{"compacted revision 22", "compacted revision 23"},
		// The same lease id twice on one side but two ids on the other.
		{"lease 1111111111111111 granted with TTL(60s)\nlease 1111111111111111 revoked",
			"lease 1111111111111111 granted with TTL(60s)\nlease 2222222222222222 revoked"},
		{`{"dbSizeQuota":2147483648}`, `{"dbSizeQuota":1073741824}`},
		{"3.7.3", "3.8.0"}, // free text is not a version column
		{`{"version":"3.7.3"}`, `{"version":"3.6.0"}`},
	}
	for _, c := range cases {
		na, nb := NewNormalizer().Normalize(c.a), NewNormalizer().Normalize(c.b)
		if na == nb {
			t.Errorf("normalization hid a real difference:\nA: %s\nB: %s\nboth: %s", c.a, c.b, na)
		}
	}
}

func TestUnifiedDiff(t *testing.T) {
	if d := UnifiedDiff("a", "b", "x\ny\n", "x\ny\n"); d != "" {
		t.Fatalf("equal texts gave a diff: %q", d)
	}
	a := strings.Join([]string{"1", "2", "3", "4", "5", "6", "7", "8", "9", "10"}, "\n")
	b := strings.Join([]string{"1", "2", "3", "4", "five", "6", "7", "8", "9", "10", "11"}, "\n")
	d := UnifiedDiff("a", "b", a, b)
	for _, want := range []string{"--- a\n+++ b\n", "@@ -2,9 +2,10 @@\n", "-5\n+five\n", "+11\n"} {
		if !strings.Contains(d, want) {
			t.Errorf("diff lacks %q:\n%s", want, d)
		}
	}
}

func TestUnifiedDiffSeparateHunks(t *testing.T) {
	var a, b []string
	for i := 0; i < 30; i++ {
		a = append(a, strconv.Itoa(i))
		b = append(b, strconv.Itoa(i))
	}
	b[3], b[25] = "three", "twenty-five"
	d := UnifiedDiff("a", "b", strings.Join(a, "\n"), strings.Join(b, "\n"))
	if strings.Count(d, "@@ -") != 2 || !strings.Contains(d, "@@ -1,7 +1,7 @@") || !strings.Contains(d, "@@ -23,7 +23,7 @@") {
		t.Errorf("want two hunks:\n%s", d)
	}
}
