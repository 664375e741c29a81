package main

import (
	"bytes"
	"sort"
	"strings"
	"testing"
)

// TestHelp: every command, command group and the tool itself answer -h,
// --help and `help ...` on stdout with exit status 0, with flags and
// examples; no arguments at all is a usage error (exit 2, on stderr).
func TestHelp(t *testing.T) {
	var names []string
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	call := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(args, &out, &errb)
		return code, out.String(), errb.String()
	}
	for _, args := range [][]string{{"-h"}, {"--help"}, {"-help"}, {"help"}} {
		code, out, errs := call(args...)
		if code != 0 || errs != "" || !strings.Contains(out, "Usage: stratautl COMMAND") || !strings.Contains(out, "Examples:") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out, errs)
		}
		for _, n := range names {
			if !strings.Contains(out, "  "+n+" ") {
				t.Errorf("%q does not list %s", args, n)
			}
		}
	}
	if code, out, errs := call(); code != 2 || out != "" || !strings.Contains(errs, "Usage:") {
		t.Errorf("no arguments: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	for _, n := range names {
		w := strings.Fields(n)
		for _, args := range [][]string{append(w, "-h"), append(w, "--help"), append([]string{"help"}, w...)} {
			code, out, errs := call(args...)
			if code != 0 || errs != "" {
				t.Errorf("%q: exit %d, stderr %q", args, code, errs)
			}
			for _, want := range []string{"Usage:", "stratautl " + n, "Flags:", "  -", "Examples:\n  stratautl " + n} {
				if !strings.Contains(out, want) {
					t.Errorf("%q: help lacks %q:\n%s", args, want, out)
				}
			}
		}
		if commands[n].example == "" || !strings.HasPrefix(commands[n].example, "stratautl "+n) {
			t.Errorf("%s: no example for the command lists: %q", n, commands[n].example)
		}
		if len(w) == 2 {
			for _, args := range [][]string{{w[0], "-h"}, {"help", w[0]}} {
				code, out, errs := call(args...)
				if code != 0 || errs != "" || !strings.Contains(out, "  "+n+" ") || !strings.Contains(out, "Examples:") {
					t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out, errs)
				}
			}
			if code, out, errs := call(w[0]); code != 2 || out != "" || !strings.Contains(errs, "  "+n+" ") {
				t.Errorf("%q alone: exit %d, stdout %q, stderr %q", w[0], code, out, errs)
			}
		}
	}
	if code, _, errs := call("nope"); code != 2 || !strings.Contains(errs, `unknown command "nope"`) {
		t.Errorf("unknown command: exit %d, stderr %q", code, errs)
	}
}
