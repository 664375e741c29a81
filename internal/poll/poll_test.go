package poll

import (
	"sync/atomic"
	"testing"
)

func TestUntilReturnsOnceTrue(t *testing.T) {
	var n atomic.Int32
	Until(t, "three checks", func() bool { return n.Add(1) >= 3 })
	if n.Load() != 3 {
		t.Fatalf("cond checked %d times, want 3", n.Load())
	}
}
