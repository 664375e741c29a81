package main

import (
	"errors"
	"regexp"
	"strings"
	"testing"
)

func TestParseList(t *testing.T) {
	in := `# comment
must-pass      TestA         short
must-pass      TestB         note for the reader
cluster        TestC         3 members
by-design      TestD/sub_1   runs etcdutl on our data dir
not-applicable TestE         needs a failpoint build
`
	got, err := parseList(strings.NewReader(in), "l")
	if err != nil {
		t.Fatal(err)
	}
	want := []entry{
		{Name: "TestA", Part: partMustPass, Short: true, Line: 2},
		{Name: "TestB", Part: partMustPass, Reason: "note for the reader", Line: 3},
		{Name: "TestC", Part: partCluster, Reason: "3 members", Line: 4},
		{Name: "TestD/sub_1", Part: partByDesign, Reason: "runs etcdutl on our data dir", Line: 5},
		{Name: "TestE", Part: partNotApplicable, Reason: "needs a failpoint build", Line: 6},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d entries, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestParseListRejects(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"cluster TestA", "gives no reason"},
		{"wrong TestA why", "unknown part"},
		{"must-pass NotATest", "is not a test name"},
		{"cluster TestA short reason", "only must-pass tests"},
		{"must-pass TestA\nmust-pass TestA", "listed twice (first on line 1)"},
		{"must-pass TestA\ncluster TestA/sub why", "listed whole on line 1 and by its subtest"},
		{"must-pass", "want PART TEST"},
	} {
		_, err := parseList(strings.NewReader(c.in), "l")
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, errList) {
			t.Errorf("%q: got %v, want an errList error containing %q", c.in, err, c.want)
		}
	}
}

func TestRunPatternSelectsExactlyTheTest(t *testing.T) {
	e := entry{Name: "TestHTTP/3_members.x"}
	p := e.RunPattern()
	if p != `^TestHTTP$/^3_members\.x$` {
		t.Fatalf("pattern %q", p)
	}
	// go test matches each level of the pattern against one level of the
	// name.
	levels := strings.Split(p, "/")
	for _, c := range []struct {
		name string
		want bool
	}{
		{"TestHTTP/3_members.x", true},
		{"TestHTTPS/3_members.x", false},
		{"TestHTTP/3_membersXx", false},
		{"TestHTTP/3_members.x2", false},
	} {
		parts := strings.Split(c.name, "/")
		ok := len(parts) == len(levels)
		for i := 0; ok && i < len(levels); i++ {
			ok = regexp.MustCompile(levels[i]).MatchString(parts[i])
		}
		if ok != c.want {
			t.Errorf("%s: matched %v, want %v", c.name, ok, c.want)
		}
	}
}

func TestCoverage(t *testing.T) {
	list := []entry{{Name: "TestA"}, {Name: "TestB/x"}, {Name: "TestB/y"}, {Name: "TestGone"}}
	missing, unknown := coverage(list, []string{"TestA", "TestB", "TestNew", "TestNew2"})
	if strings.Join(missing, ",") != "TestNew,TestNew2" || strings.Join(unknown, ",") != "TestGone" {
		t.Fatalf("missing %v unknown %v", missing, unknown)
	}
}

func TestSelectEntries(t *testing.T) {
	list := []entry{
		{Name: "TestA", Part: partMustPass, Short: true},
		{Name: "TestB", Part: partMustPass},
		{Name: "TestC", Part: partCluster},
	}
	names := func(es []entry) string {
		var s []string
		for _, e := range es {
			s = append(s, e.Name)
		}
		return strings.Join(s, ",")
	}
	if got := names(selectEntries(list, map[string]bool{partMustPass: true}, nil, false)); got != "TestA,TestB" {
		t.Errorf("must-pass: %s", got)
	}
	if got := names(selectEntries(list, nil, nil, true)); got != "TestA" {
		t.Errorf("short: %s", got)
	}
	if got := names(selectEntries(list, nil, regexp.MustCompile("B|C"), false)); got != "TestB,TestC" {
		t.Errorf("run: %s", got)
	}
}
