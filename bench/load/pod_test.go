package load

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/s2"
)

// TestPodValue: the value has the size asked for, starts with a Pod that
// parses as JSON, differs from put to put, and compresses as JSON does
// (neither like random bytes nor like one repeated letter).
func TestPodValue(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 300, 2048, 20000} {
		if v := podValue(rng, 7, n); len(v) != n {
			t.Fatalf("podValue(%d): %d bytes", n, len(v))
		}
	}
	a, b := podValue(rng, 1, 20000), podValue(rng, 1, 20000)
	if bytes.Equal(a, b) {
		t.Fatal("two puts wrote the same pod")
	}
	var pod struct {
		Kind     string `json:"kind"`
		Metadata struct {
			UID string `json:"uid"`
		} `json:"metadata"`
	}
	if err := json.NewDecoder(bytes.NewReader(a)).Decode(&pod); err != nil || pod.Kind != "Pod" || len(pod.Metadata.UID) != 36 {
		t.Fatalf("not a pod: %v %+v", err, pod)
	}
	v := podValue(rng, 3, 2048)
	ratio := float64(len(s2.Encode(nil, v))) / float64(len(v))
	t.Logf("S2 keeps %.0f%% of a 2 KiB pod", ratio*100)
	if ratio < 0.2 || ratio > 0.8 {
		t.Fatalf("S2 keeps %.0f%% of a 2 KiB pod", ratio*100)
	}
}
