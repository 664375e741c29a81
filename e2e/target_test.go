package e2e

import (
	"os"
	"path/filepath"
	"testing"
)

// strataTarget is the strata binary a test that needs Strata itself (its
// own commands or metrics, not etcd's behaviour) runs: $STRATA_E2E_TARGET,
// which make e2e sets. Without it the test fails: a missing prerequisite
// is a failure, not a skip.
func strataTarget(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("STRATA_E2E_TARGET")
	if bin == "" {
		t.Fatalf("%s needs the strata binary: set STRATA_E2E_TARGET=../bin/strata (make e2e does)", t.Name())
	}
	abs, err := filepath.Abs(bin)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}
