package server

import (
	"os/exec"
	"strings"
	"testing"
)

const modulePath = "github.com/strata-db/strata"

// goListDeps returns the packages of this module in the dependency closure
// of pkgs (go list -deps), test files excluded.
func goListDeps(t *testing.T, pkgs ...string) []string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list dependencies: %v", err)
	}
	out, err := exec.Command(goBin, append([]string{"list", "-deps"}, pkgs...)...).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list -deps %s: %v\n%s", strings.Join(pkgs, " "), err, ee.Stderr)
		}
		t.Fatalf("go list -deps %s: %v", strings.Join(pkgs, " "), err)
	}
	var ours []string
	for _, p := range strings.Fields(string(out)) {
		if p == modulePath || strings.HasPrefix(p, modulePath+"/") {
			ours = append(ours, p)
		}
	}
	if len(ours) == 0 {
		t.Fatalf("go list -deps %s listed no package of %s:\n%s", strings.Join(pkgs, " "), modulePath, out)
	}
	return ours
}

// TestLayering keeps the arrows pointing down: the production server (the
// server package and the strata binary) links no benchmark and no offline
// tool code, and the benchmarks link no offline tool code. Shared pieces
// live below both: diskprobe (fdatasync measurement), progress (the bar).
func TestLayering(t *testing.T) {
	for _, c := range []struct {
		from      []string
		forbidden []string
	}{
		{[]string{modulePath + "/server", modulePath + "/cmd/strata"}, []string{"bench", "tools", "cmd/stratabench", "cmd/stratautl"}},
		{[]string{modulePath + "/bench/..."}, []string{"tools", "cmd"}},
	} {
		for _, p := range goListDeps(t, c.from...) {
			for _, f := range c.forbidden {
				if dir := modulePath + "/" + f; p == dir || strings.HasPrefix(p, dir+"/") {
					t.Errorf("%s depends on %s (nothing under %s/ may be in its closure)", strings.Join(c.from, " and "), p, f)
				}
			}
		}
	}
}
