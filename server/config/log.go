package config

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Levels above slog.LevelError for zap's dpanic, panic and fatal, which
// etcd accepts as --log-level. They only filter: Strata never panics or
// exits because of a log call.
const (
	LevelDPanic = slog.LevelError + 2
	LevelPanic  = slog.LevelError + 4
	LevelFatal  = slog.LevelError + 8
)

// SlogLevel is LogLevel as a slog.Level. zap accepts lower- and upper-case
// names and "" for info, so this does too.
func (c *Config) SlogLevel() (slog.Level, error) {
	switch strings.ToLower(c.LogLevel) {
	case "debug":
		return slog.LevelDebug, nil
	case "info", "":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	case "dpanic":
		return LevelDPanic, nil
	case "panic":
		return LevelPanic, nil
	case "fatal":
		return LevelFatal, nil
	}
	return 0, fmt.Errorf("unrecognized level: %q (must be one of debug, info, warn, error, dpanic, panic, fatal)", c.LogLevel)
}

// NewLogger builds the server's logger: JSON records (or text with
// --log-format=console) with etcd's field names (ts, level, msg), at
// --log-level, written to every --log-outputs target. "default",
// "stderr" and "systemd/journal" write to stderr (under systemd, stderr
// is the journal); files are opened for append, created 0600. close
// releases the files. Log rotation is not implemented: a rotated output
// is simply appended to.
func (c *Config) NewLogger() (lg *slog.Logger, closeFn func() error, err error) {
	level, err := c.SlogLevel()
	if err != nil {
		return nil, nil, err
	}
	var writers []io.Writer
	var files []*os.File
	closeFn = func() error {
		var errs []error
		for _, f := range files {
			errs = append(errs, f.Close())
		}
		return errors.Join(errs...)
	}
	outputs := c.LogOutputs
	if len(outputs) == 0 {
		outputs = []string{DefaultLogOutput}
	}
	seenStderr, seenStdout := false, false
	for _, o := range outputs {
		switch o {
		case DefaultLogOutput, "stderr", "systemd/journal":
			if !seenStderr {
				writers = append(writers, os.Stderr)
			}
			seenStderr = true
		case "stdout":
			if !seenStdout {
				writers = append(writers, os.Stdout)
			}
			seenStdout = true
		default:
			f, ferr := os.OpenFile(o, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
			if ferr != nil {
				closeFn()
				return nil, nil, fmt.Errorf("log output %s: %w", o, ferr)
			}
			files = append(files, f)
			writers = append(writers, f)
		}
	}
	w := io.MultiWriter(writers...)
	var h slog.Handler
	if c.LogFormat == "console" {
		h = slog.NewTextHandler(w, &slog.HandlerOptions{Level: level, AddSource: true, ReplaceAttr: etcdAttrs})
	} else {
		h = newJSONHandler(w, level)
	}
	return slog.New(h), closeFn, nil
}

func newJSONHandler(w io.Writer, level slog.Level) slog.Handler {
	return slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level, AddSource: true, ReplaceAttr: etcdAttrs})
}

// etcdAttrs renames slog's built-in keys to zap's as etcd configures them
// ("ts" with microseconds and a numeric zone, lower-case "level",
// "caller" as zap's short "dir/file.go:line") and writes every time.Duration, at any depth
// of groups, as zap's string duration encoder does ("took":"74.991µs",
// not slog's bare nanoseconds), so log shippers and scripts that parse
// etcd's JSON logs read Strata's unchanged.
func etcdAttrs(groups []string, a slog.Attr) slog.Attr {
	switch a.Value.Kind() {
	case slog.KindDuration:
		a.Value = slog.StringValue(a.Value.Duration().String())
		return a
	case slog.KindTime:
		// Every time, the record's own and attributes ("start time"), in
		// the layout of etcd's zap time encoder.
		a.Value = slog.StringValue(a.Value.Time().Format(etcdTimeLayout))
	}
	if len(groups) > 0 {
		return a
	}
	switch a.Key {
	case slog.TimeKey:
		a.Key = "ts"
	case slog.SourceKey:
		a.Key = "caller"
		src, _ := a.Value.Any().(*slog.Source)
		if src == nil || src.File == "" {
			a.Value = slog.StringValue("unknown")
			break
		}
		a.Value = slog.StringValue(filepath.Base(filepath.Dir(src.File)) + "/" + filepath.Base(src.File) + ":" + strconv.Itoa(src.Line))
	case slog.LevelKey:
		l, _ := a.Value.Any().(slog.Level)
		a.Value = slog.StringValue(levelName(l))
	}
	return a
}

// etcdTimeLayout is the time format of etcd's zap configuration.
const etcdTimeLayout = "2006-01-02T15:04:05.000000Z0700"

func levelName(l slog.Level) string {
	switch {
	case l < slog.LevelInfo:
		return "debug"
	case l < slog.LevelWarn:
		return "info"
	case l < slog.LevelError:
		return "warn"
	case l < LevelDPanic:
		return "error"
	case l < LevelPanic:
		return "dpanic"
	case l < LevelFatal:
		return "panic"
	}
	return "fatal"
}
