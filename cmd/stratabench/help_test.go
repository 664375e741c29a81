package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/strata-db/strata/bench/load"
)

func call(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, nil, &out, &errb)
	return code, out.String(), errb.String()
}

// TestHelp: stratabench and each of its commands answer -h, --help and
// `help ...` on stdout with exit status 0, with flags and examples; no
// arguments or a bad flag is a usage error (exit 2, on stderr).
func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--help"}, {"-help"}, {"help"}, {"--endpoints=x:1", "-h"}} {
		code, out, errs := call(args...)
		if code != 0 || errs != "" {
			t.Errorf("%q: exit %d, stderr %q", args, code, errs)
		}
		for _, want := range append(load.WorkloadNames(), "stratabench disk --dir", "stratabench disk compare", "stratabench floor-server", "Global flags:", "-endpoints", "-clients", "Examples:") {
			if !strings.Contains(out, want) {
				t.Errorf("%q: help lacks %q:\n%s", args, want, out)
			}
		}
	}
	if code, out, errs := call(); code != 2 || out != "" || !strings.Contains(errs, "Usage:") {
		t.Errorf("no arguments: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	for _, w := range load.WorkloadNames() {
		for _, args := range [][]string{{w, "-h"}, {w, "--help"}, {"help", w}, {"--conns=2", w, "-h"}} {
			code, out, errs := call(args...)
			if code != 0 || errs != "" {
				t.Errorf("%q: exit %d, stderr %q", args, code, errs)
			}
			for _, want := range []string{"Usage: stratabench [global flags] " + w, "-endpoints", "-write-out", "Examples:\n  stratabench " + w} {
				if !strings.Contains(out, want) {
					t.Errorf("%q: help lacks %q:\n%s", args, want, out)
				}
			}
		}
		// The examples are valid command lines.
		if len(load.Examples[w]) == 0 {
			t.Errorf("%s: no examples", w)
		}
		for _, e := range load.Examples[w] {
			f := strings.Fields(e)
			g, name, rest, err := load.ParseGlobal(f[1:], nil)
			if err == nil {
				_, err = load.Parse(name, g, rest, nil)
			}
			if err != nil || name != w {
				t.Errorf("example %q: %v", e, err)
			}
		}
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"disk", "-h"}, []string{"Usage: stratabench disk --dir DIR", "-dir", "-plot", "-duration", "-write-out", "Examples:\n  stratabench disk --dir"}},
		{[]string{"help", "disk"}, []string{"Usage: stratabench disk --dir DIR", "-dir"}},
		{[]string{"disk", "compare", "--help"}, []string{"Usage: stratabench disk compare", "-fio", "-bench", "-tolerance", "-write-out", "Examples:\n"}},
		{[]string{"help", "disk", "compare"}, []string{"Usage: stratabench disk compare", "-fio"}},
		{[]string{"floor-server", "-h"}, []string{"Usage: stratabench floor-server", "-listen", "-data-dir", "Examples:\n  stratabench floor-server"}},
	} {
		code, out, errs := call(c.args...)
		if code != 0 || errs != "" {
			t.Errorf("%q: exit %d, stderr %q", c.args, code, errs)
		}
		for _, want := range c.want {
			if !strings.Contains(out, want) {
				t.Errorf("%q: help lacks %q:\n%s", c.args, want, out)
			}
		}
	}
	for _, args := range [][]string{{"nope"}, {"put", "--nope"}, {"disk", "--nope"}, {"disk", "compare", "--nope"}, {"floor-server", "--nope"}, {"floor-server"}, {"--nope"}} {
		if code, out, errs := call(args...); code != 2 || out != "" || !strings.Contains(errs, "-h") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out, errs)
		}
	}
}

// TestWriteOutDefaults: every command takes -w/--write-out with the same
// values, simple (the default) and json.
func TestWriteOutDefaults(t *testing.T) {
	for _, args := range [][]string{{"put", "-h"}, {"disk", "-h"}, {"disk", "compare", "-h"}} {
		_, out, _ := call(args...)
		if !strings.Contains(out, "-write-out string") || !strings.Contains(out, `output format: simple`) || !strings.Contains(out, `(default "simple")`) {
			t.Errorf("%q: -w not documented as simple|json, default simple:\n%s", args, out)
		}
	}
	o, err := load.Parse("put", load.DefaultGlobal(), nil, nil)
	if err != nil || o.WriteOut != "simple" {
		t.Fatalf("put default -w: %v %+v", err, o)
	}
	for _, args := range [][]string{{"put", "-w", "text"}, {"disk", "--dir", ".", "-w", "text"}} {
		if code, _, _ := call(args...); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
}
