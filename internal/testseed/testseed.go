// Package testseed is the tests' one way to seed a randomized test: the
// seed comes from the environment when set (to replay a failure), else
// from the clock, and is always logged with the command that replays it.
package testseed

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// Env is the variable that replays any randomized test.
const Env = "STRATA_SEED"

// Seed returns t's seed: the value of the first of envs that is set
// (default: STRATA_SEED), else the clock. A value that is not a number
// fails the test.
func Seed(t testing.TB, envs ...string) uint64 {
	t.Helper()
	if len(envs) == 0 {
		envs = []string{Env}
	}
	seed, from := uint64(time.Now().UnixNano()), envs[0]
	for _, name := range envs {
		v := os.Getenv(name)
		if v == "" {
			continue
		}
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want a non-negative number", name, v)
		}
		seed, from = s, name
		break
	}
	Log(t, seed, from)
	return seed
}

// Log logs seed with the command that replays t with it.
func Log(t testing.TB, seed uint64, env string) {
	t.Helper()
	t.Logf("seed=%d (replay: %s=%d go test -run '^%s$' on this package)", seed, env, seed, t.Name())
}
