package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The guard is tested on the real thing: a throwaway module whose tests
// pass, skip, fail or do not build, run with the same `go test -json` the
// Makefile uses.
var fixture = map[string]string{
	"go.mod": "module strata.local/guardfixture\n\ngo 1.24\n",
	"ok/ok_test.go": `package ok
import "testing"
func TestOne(t *testing.T) { t.Log("noise a passing test prints") }
func TestTwo(t *testing.T) {
	t.Run("sub", func(t *testing.T) {})
}
`,
	"skips/skips_test.go": `package skips
import (
	"os"
	"testing"
)
func TestRuns(t *testing.T) {}
// TestChild is a child-mode helper: it skips unless re-executed.
func TestChild(t *testing.T) {
	if os.Getenv("FIXTURE_CHILD") == "" {
		t.Skip("only runs as TestRuns's child")
	}
}
// TestNeedsSources skips on a fresh machine, the defect the guard is for.
func TestNeedsSources(t *testing.T) {
	t.Skip("no etcd server sources in the module cache")
}
`,
	"fails/fails_test.go": `package fails
import "testing"
func TestOK(t *testing.T) {}
func TestBroken(t *testing.T) { t.Fatal("the evidence: want 2, got 3") }
`,
	"nobuild/nobuild_test.go": `package nobuild
import "testing"
func TestX(t *testing.T) { undefinedThing() }
`,
	"empty/empty.go": "package empty\n",
}

func fixtureDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range fixture {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// goTestJSON runs go test -json on pkgs in dir and returns the stream;
// go test's own exit status is the Makefile's pipefail's business.
func goTestJSON(t *testing.T, dir string, pkgs ...string) []byte {
	t.Helper()
	cmd := exec.Command("go", append([]string{"test", "-json", "-count=1"}, pkgs...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if len(out) == 0 {
		t.Fatalf("go test -json %v: no output: %v\n%s", pkgs, err, stderr.String())
	}
	return out
}

func guard(t *testing.T, stream []byte, allow string) (string, error) {
	t.Helper()
	cfg := config{}
	if allow != "" {
		var err error
		if cfg.allow, err = parseAllowlist(strings.NewReader(allow), "allow"); err != nil {
			t.Fatal(err)
		}
	}
	var out strings.Builder
	err := run(bytes.NewReader(stream), &out, cfg)
	return out.String(), err
}

func TestGuard(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatalf("the go command is needed to run the fixture: %v", err)
	}
	dir := fixtureDir(t)
	const childOnly = "strata.local/guardfixture/skips TestChild child-mode helper of TestRuns\n"
	const both = childOnly + "strata.local/guardfixture/skips TestNeedsSources reason given\n"

	t.Run("pass", func(t *testing.T) {
		out, err := guard(t, goTestJSON(t, dir, "./ok"), "")
		if err != nil {
			t.Fatalf("a passing run failed: %v\n%s", err, out)
		}
		if strings.Contains(out, "noise a passing test prints") {
			t.Errorf("a passing test's output was printed:\n%s", out)
		}
		if !strings.Contains(out, "ok  \tstrata.local/guardfixture/ok") || !strings.Contains(out, "3 tests passed") {
			t.Errorf("no package line or wrong count:\n%s", out)
		}
	})
	stream := goTestJSON(t, dir, "./ok", "./skips")
	t.Run("unlisted skip fails", func(t *testing.T) {
		out, err := guard(t, stream, childOnly)
		if err == nil {
			t.Fatalf("a skip outside the allowlist passed:\n%s", out)
		}
		for _, want := range []string{
			"SKIP not allowed: strata.local/guardfixture/skips TestNeedsSources: skips_test.go:15: no etcd server sources in the module cache",
			"allowed skip: strata.local/guardfixture/skips TestChild (child-mode helper of TestRuns)",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
		if !strings.Contains(err.Error(), "TestNeedsSources") || strings.Contains(err.Error(), "TestChild") {
			t.Errorf("error names the wrong tests: %v", err)
		}
	})
	t.Run("no allowlist: every skip fails", func(t *testing.T) {
		if out, err := guard(t, stream, ""); err == nil || !strings.Contains(err.Error(), "TestChild") {
			t.Fatalf("err = %v\n%s", err, out)
		}
	})
	t.Run("allowlisted skips pass", func(t *testing.T) {
		if out, err := guard(t, stream, both); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	})
	t.Run("failure", func(t *testing.T) {
		out, err := guard(t, goTestJSON(t, dir, "./fails"), "")
		if err == nil || !strings.Contains(err.Error(), "fails TestBroken") {
			t.Fatalf("err = %v\n%s", err, out)
		}
		if !strings.Contains(out, "the evidence: want 2, got 3") {
			t.Errorf("the failing test's output is missing:\n%s", out)
		}
	})
	t.Run("build failure", func(t *testing.T) {
		out, err := guard(t, goTestJSON(t, dir, "./ok", "./nobuild"), "")
		if err == nil || !strings.Contains(err.Error(), "nobuild") {
			t.Fatalf("err = %v\n%s", err, out)
		}
		if !strings.Contains(out, "undefined: undefinedThing") {
			t.Errorf("the compiler's message is missing:\n%s", out)
		}
	})
	t.Run("nothing ran", func(t *testing.T) {
		out, err := guard(t, goTestJSON(t, dir, "./empty"), "")
		if err == nil || !strings.Contains(err.Error(), "no test passed") {
			t.Fatalf("err = %v\n%s", err, out)
		}
	})
	t.Run("killed mid-test", func(t *testing.T) {
		// The stream of a go test that was killed while a test ran.
		cut := []byte(`{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"output","Package":"p","Test":"TestA","Output":"    a_test.go:9: waiting for the server\n"}
`)
		out, err := guard(t, cut, "")
		if err == nil || !strings.Contains(err.Error(), "p TestA (never finished)") || !strings.Contains(out, "waiting for the server") {
			t.Fatalf("err = %v\n%s", err, out)
		}
	})
}

func TestParseAllowlist(t *testing.T) {
	got, err := parseAllowlist(strings.NewReader("# comment\n\nexample.com/p  TestX  child of TestY # trailing\n"), "f")
	if err != nil || got["example.com/p TestX"] != "child of TestY" || len(got) != 1 {
		t.Fatalf("%v %q", err, got)
	}
	if _, err := parseAllowlist(strings.NewReader("example.com/p TestX\n"), "f"); err == nil || !strings.Contains(err.Error(), "f:1") {
		t.Fatalf("an entry without a reason was accepted: %v", err)
	}
}
