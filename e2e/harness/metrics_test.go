package harness

import (
	"math"
	"reflect"
	"strings"
	"testing"
)

func TestParseMetrics(t *testing.T) {
	text := `# HELP a_total A counter.
# TYPE a_total counter
a_total{code="200",path="x\"y\\z"} 3
a_total{code="500",path=""} 0
# TYPE h_seconds histogram
h_seconds_bucket{op="Put",le="0.001"} 1
h_seconds_bucket{op="Put",le="+Inf"} 2
h_seconds_sum{op="Put"} 0.5
h_seconds_count{op="Put"} 2
# TYPE g gauge
g 1.5e+09
g_other 1
`
	_, err := ParseMetrics(strings.NewReader(text))
	if err == nil || !strings.Contains(err.Error(), "line 12") {
		t.Fatalf("a sample outside its family must fail naming the line, got %v", err)
	}
	fams, err := ParseMetrics(strings.NewReader(strings.TrimSuffix(text, "g_other 1\n")))
	if err != nil {
		t.Fatal(err)
	}
	if len(fams) != 3 || fams["a_total"].Type != "counter" || fams["h_seconds"].Type != "histogram" {
		t.Fatalf("families: %+v", fams)
	}
	if v, ok := fams["a_total"].Find("a_total", map[string]string{"path": `x"y\z`}); !ok || v != 3 {
		t.Fatalf("escaped label value: %v %v", v, ok)
	}
	if got := fams["h_seconds"].LabelNames(); !reflect.DeepEqual(got, []string{"op"}) {
		t.Fatalf("histogram label names %v", got)
	}
	if v, ok := fams["h_seconds"].Find("h_seconds_bucket", map[string]string{"le": "+Inf"}); !ok || v != 2 {
		t.Fatalf("+Inf bucket: %v %v", v, ok)
	}
	if v, _ := fams["g"].Find("g", nil); v != 1.5e9 || math.IsNaN(v) {
		t.Fatalf("g = %v", v)
	}
	if _, ok := fams["a_total"].Find("a_total", nil); ok {
		t.Fatal("Find must not accept two matching samples")
	}
}
