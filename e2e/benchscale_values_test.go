package e2e

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestBenchScaleValues checks the bench-scale data set's generator: the
// same seed makes the same keys and values, every value is valid JSON
// of 1-16 KiB, most are under 4 KiB, and S2 (the page store's codec for
// values of this size) compresses them to about half, as it does real
// Kubernetes objects with their random uids, hashes and addresses.
func TestBenchScaleValues(t *testing.T) {
	p := newBscalePlan(42, 20)
	q := newBscalePlan(42, 20)
	if p.keys != q.keys || p.writes() != q.writes() || p.liveKeys != q.liveKeys {
		t.Fatalf("the same seed made different plans: %d/%d keys, %d/%d writes", p.keys, q.keys, p.writes(), q.writes())
	}
	keys := map[string]bool{}
	small, large := 0, 0
	var raw, packed int64
	for i := 0; i < p.keys; i++ {
		k := p.key(i)
		if keys[k.key] {
			t.Fatalf("key %s drawn twice", k.key)
		}
		keys[k.key] = true
		for ver := 0; ver <= k.updates; ver++ {
			v := p.value(nil, k, ver)
			if w := p.size(k, ver); len(v) != w {
				t.Fatalf("%s version %d: %d bytes, the plan says %d", k.key, ver, len(v), w)
			}
			if len(v) < 1024 || len(v) > 16<<10 {
				t.Fatalf("%s version %d: %d bytes, outside 1-16 KiB", k.key, ver, len(v))
			}
			if !json.Valid(v) {
				t.Fatalf("%s version %d is not valid JSON: %.300s", k.key, ver, v)
			}
			if ver == 0 && !bytes.Equal(v, q.value(nil, q.key(i), 0)) {
				t.Fatalf("%s: the same seed made different values", k.key)
			}
			if len(v) <= 4096 {
				small++
			}
			if len(v) >= 8192 {
				large++
			}
			raw += int64(len(v))
			packed += int64(bsS2Len(v))
		}
	}
	ratio := float64(packed) / float64(raw)
	t.Logf("%d keys, %d writes, %d live; values: %.0f%% ≤ 4 KiB, %.0f%% ≥ 8 KiB; S2 compresses them to %.0f%%",
		p.keys, p.writes(), p.liveKeys, 100*float64(small)/float64(p.creates+p.updates), 100*float64(large)/float64(p.creates+p.updates), 100*ratio)
	if ratio < 0.35 || ratio > 0.65 {
		t.Errorf("S2 compresses the values to %.0f%%, want about half (35-65%%)", 100*ratio)
	}
	if small*2 < p.creates+p.updates || large == 0 {
		t.Errorf("%d of %d values are ≤ 4 KiB and %d ≥ 8 KiB: want most small, some large", small, p.creates+p.updates, large)
	}
}
