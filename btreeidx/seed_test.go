package btreeidx

import (
	"flag"
	"math/rand/v2"
	"testing"

	"github.com/strata-db/strata/internal/testseed"
)

// seedFlag replays a randomized test: go test ./btreeidx -run TestX -seed N.
// STRATA_SEED=N does the same where flags are awkward (make, CI).
var seedFlag = flag.Uint64("seed", 0, "seed for randomized tests (0: STRATA_SEED or time)")

// testRand returns the generator for a randomized test and logs its seed, so
// any failure can be replayed exactly.
func testRand(t *testing.T) *rand.Rand {
	t.Helper()
	seed := *seedFlag
	if seed == 0 {
		seed = testseed.Seed(t)
	} else {
		testseed.Log(t, seed, testseed.Env)
	}
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}
