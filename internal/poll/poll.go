// Package poll is the tests' one way to wait for a condition: it checks
// the condition every millisecond or so until it holds, and fails the test
// after a generous deadline. The deadline only bounds a hang; what a test
// decides never depends on how long the wait took, so a loaded machine
// makes it slower, never red.
package poll

import (
	"fmt"
	"testing"
	"time"
)

// Deadline is how long Until waits before it fails the test.
const Deadline = 30 * time.Second

// Until returns once cond() is true, or fails t (naming what it waited
// for) after Deadline.
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Deadline)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", Deadline, what)
		}
		time.Sleep(time.Millisecond)
	}
}

// UntilNil returns once check() returns nil, or fails t after Deadline
// with what it waited for and the last error check returned (what was
// still missing).
func UntilNil(t testing.TB, what string, check func() error) {
	t.Helper()
	UntilNilWithin(t, Deadline, time.Millisecond, what, check)
}

// UntilNilWithin is UntilNil with its own bound and interval, for a
// condition that depends on a clock outside the test (a Prometheus rule
// that looks at whole minutes) and so cannot hold within Deadline.
func UntilNilWithin(t testing.TB, bound, every time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s: %v", bound, what, err)
		}
		time.Sleep(every)
	}
}

// Check waits like Until but returns an error after Deadline instead of
// failing the test: for goroutines other than the test's own, which may
// not call t.Fatal.
func Check(cond func() bool) error {
	deadline := time.Now().Add(Deadline)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v", Deadline)
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}
