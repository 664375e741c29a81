package progress

import (
	"bytes"
	"strings"
	"testing"
)

func TestNonTerminalPrintsTenths(t *testing.T) {
	var buf bytes.Buffer
	b := NewTo(&buf, "copy", 1000, "B")
	for i := 0; i < 1000; i++ {
		b.Add(1)
	}
	b.Finish()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) < 10 || len(lines) > 13 {
		t.Fatalf("got %d lines:\n%s", len(lines), buf.String())
	}
	if !strings.Contains(lines[len(lines)-1], "100%") {
		t.Fatalf("last line %q lacks 100%%", lines[len(lines)-1])
	}
}

func TestBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1536: "1.5 KiB", 5 << 30: "5.0 GiB"} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
	}
}
