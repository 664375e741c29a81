package btreeidx

import (
	"flag"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"
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
		if s := os.Getenv("STRATA_SEED"); s != "" {
			v, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				t.Fatalf("bad STRATA_SEED %q: %v", s, err)
			}
			seed = v
		}
	}
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed=%d (replay: go test ./btreeidx -run '^%s$' -seed %d)", seed, t.Name(), seed)
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}
