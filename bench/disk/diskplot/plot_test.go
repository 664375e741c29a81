package diskplot

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/strata-db/strata/diskprobe"
)

func TestHistogramCountsEverySample(t *testing.T) {
	d := []time.Duration{0, time.Microsecond, 150 * time.Microsecond, 150 * time.Microsecond, 3 * time.Millisecond, time.Second}
	bins := histogram(d)
	var n float64
	for i, b := range bins {
		n += b.Weight
		if b.Min >= b.Max || (i > 0 && bins[i-1].Max != b.Min) {
			t.Fatalf("bad bin %d: %+v", i, b)
		}
	}
	if n != float64(len(d)) {
		t.Fatalf("bins hold %v samples, want %d", n, len(d))
	}
}

func TestWrite(t *testing.T) {
	r, err := diskprobe.Run(context.Background(), diskprobe.Options{Dir: t.TempDir(), Count: 30})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, c := range []struct{ name, magic string }{
		{"h.png", "\x89PNG"}, {"h.svg", "<?xml"}, {"h.html", "<!DOCTYPE html>"},
	} {
		p := filepath.Join(dir, c.name)
		if err := Write(r, p); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte(c.magic)) {
			t.Errorf("%s starts %q", c.name, b[:min(len(b), 16)])
		}
		if c.name == "h.html" && (!bytes.Contains(b, []byte("<svg")) || !bytes.Contains(b, []byte("Sync IOPS"))) {
			t.Errorf("html page lacks the plot or the summary")
		}
	}
	if err := Write(r, filepath.Join(dir, "h.gif")); err == nil {
		t.Error("gif accepted")
	}
	if err := Write(&diskprobe.Result{}, filepath.Join(dir, "e.png")); err == nil {
		t.Error("empty result plotted")
	}
}
