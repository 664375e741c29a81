package config

import (
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// durValuer resolves to a duration when logged.
type durValuer time.Duration

func (d durValuer) LogValue() slog.Value { return slog.DurationValue(time.Duration(d)) }

// TestLogDurations: every time.Duration attribute is written as etcd's zap
// writes it ("took":"74.991µs"), at the top level, in groups (an attribute
// group, a logger group, nested) and through With and a LogValuer; other
// numbers stay numbers.
func TestLogDurations(t *testing.T) {
	const took = 74991 * time.Nanosecond
	for _, format := range []string{"json", "console"} {
		path := filepath.Join(t.TempDir(), "strata.log")
		c, _ := mustParse(t, []string{"--log-outputs=" + path, "--log-format=" + format}, nil)
		lg, closeFn, err := c.NewLogger()
		if err != nil {
			t.Fatal(err)
		}
		lg.With("w", 2*time.Second).Info("applied", "took", took, "n", 7,
			slog.Group("g", "d", 1500*time.Millisecond, slog.Group("h", "e", time.Duration(0))), "v", durValuer(time.Minute))
		lg.WithGroup("grp").Info("grouped", "took", took)
		if err := closeFn(); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(path)
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) != 2 {
			t.Fatalf("%s: log:\n%s", format, b)
		}
		if format == "console" {
			for _, want := range []string{"took=74.991µs", "w=2s", "g.d=1.5s", "g.h.e=0s", "v=1m0s", "n=7", "grp.took=74.991µs"} {
				if !strings.Contains(string(b), want) {
					t.Errorf("console: no %s in\n%s", want, b)
				}
			}
			continue
		}
		if !strings.Contains(lines[0], `"took":"74.991µs"`) {
			t.Errorf("json: %s", lines[0])
		}
		var rec struct {
			Took string `json:"took"`
			W    string `json:"w"`
			N    int    `json:"n"`
			V    string `json:"v"`
			G    struct {
				D string `json:"d"`
				H struct {
					E string `json:"e"`
				} `json:"h"`
			} `json:"g"`
		}
		if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
			t.Fatalf("%v: %s", err, lines[0])
		}
		if rec.Took != "74.991µs" || rec.W != "2s" || rec.N != 7 || rec.V != "1m0s" || rec.G.D != "1.5s" || rec.G.H.E != "0s" {
			t.Errorf("json: %+v from %s", rec, lines[0])
		}
		var grp struct {
			Grp struct {
				Took string `json:"took"`
			} `json:"grp"`
		}
		if err := json.Unmarshal([]byte(lines[1]), &grp); err != nil || grp.Grp.Took != "74.991µs" {
			t.Errorf("json group: %s", lines[1])
		}
	}
}

// TestLogLineKeysAreEtcds: a JSON log line carries the keys etcd's zap
// configuration writes and tools (and etcd's own e2e TestServerJsonLogging)
// read: level, ts in etcd's layout with microseconds, caller as zap's
// short "dir/file.go:line" of the logging call, and msg.
func TestLogLineKeysAreEtcds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "strata.log")
	c, _ := mustParse(t, []string{"--log-outputs=" + path, "--log-level=debug"}, nil)
	lg, closeFn, err := c.NewLogger()
	if err != nil {
		t.Fatal(err)
	}
	lg.Debug("one")
	if err := closeFn(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	var rec struct{ Level, Ts, Caller, Msg string }
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	if rec.Level != "debug" || rec.Msg != "one" {
		t.Errorf("level/msg: %s", b)
	}
	if !strings.HasPrefix(rec.Caller, "config/log_test.go:") {
		t.Errorf("caller %q, want config/log_test.go:LINE", rec.Caller)
	}
	ts, err := time.Parse("2006-01-02T15:04:05.999999Z0700", rec.Ts)
	if err != nil || len(rec.Ts) != len("2006-01-02T15:04:05.000000Z") && !strings.ContainsAny(rec.Ts[19:], "+-") {
		t.Errorf("ts %q: %v", rec.Ts, err)
	}
	if d := time.Since(ts); d < 0 || d > time.Hour {
		t.Errorf("ts %q is not now", rec.Ts)
	}
}
