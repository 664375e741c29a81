package config

import (
	"bytes"
	"flag"
	"iter"
	"maps"
	"strings"
	"testing"
)

type flagT = flag.Flag

func mapKeysOf[V any](m map[string]V) iter.Seq[string] { return maps.Keys(m) }

// mustParse parses and fails the test on error, returning stderr too.
func mustParse(t *testing.T, args, env []string) (*Config, string) {
	t.Helper()
	var stderr bytes.Buffer
	c, err := Parse(args, env, &stderr)
	if err != nil {
		t.Fatalf("Parse(%q, %q): %v\nstderr:\n%s", args, env, err, stderr.String())
	}
	return c, stderr.String()
}

// parseErr parses and requires an error containing want.
func parseErr(t *testing.T, args, env []string, want string) (error, string) {
	t.Helper()
	var stderr bytes.Buffer
	_, err := Parse(args, env, &stderr)
	if err == nil {
		t.Fatalf("Parse(%q, %q) succeeded; want error containing %q", args, env, want)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("Parse(%q, %q) error %q; want it to contain %q", args, env, err, want)
	}
	return err, stderr.String()
}
