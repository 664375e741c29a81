// Package progress draws the progress bars of Strata's long-running
// commands (defrag, restore, verify, bench, diskbench) on stderr.
//
// On a terminal the bar redraws in place; otherwise (CI logs, pipes) it
// prints one line per tenth of the work, so logs stay short but still show
// that something is happening.
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Bar is a progress bar for a task of known size. It is safe for
// concurrent use.
type Bar struct {
	mu       sync.Mutex
	out      io.Writer
	tty      bool
	label    string
	unit     string // "B" renders sizes as bytes; anything else is a count noun
	total    int64
	done     int64
	start    time.Time
	lastDraw time.Time
	lastTen  int64 // last tenth printed in non-terminal mode
	finished bool
}

// New starts a bar on stderr. unit "B" formats byte counts.
func New(label string, total int64, unit string) *Bar {
	return NewTo(os.Stderr, label, total, unit)
}

// NewTo starts a bar on w; it redraws in place only if w is a terminal.
func NewTo(w io.Writer, label string, total int64, unit string) *Bar {
	b := &Bar{out: w, label: label, total: total, unit: unit, start: time.Now(), lastTen: -1}
	if f, ok := w.(*os.File); ok {
		_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
		b.tty = err == nil
	}
	b.draw(true)
	return b
}

// Add advances the bar by n.
func (b *Bar) Add(n int64) { b.Set(b.get() + n) }

func (b *Bar) get() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.done
}

// Set sets the amount done.
func (b *Bar) Set(done int64) {
	b.mu.Lock()
	b.done = done
	b.mu.Unlock()
	b.draw(false)
}

// SetTotal changes the total, for work whose size is learned late.
func (b *Bar) SetTotal(total int64) {
	b.mu.Lock()
	b.total = total
	b.mu.Unlock()
}

// Finish draws the bar complete and ends its line.
func (b *Bar) Finish() {
	b.mu.Lock()
	if b.finished {
		b.mu.Unlock()
		return
	}
	if b.total > 0 && b.done < b.total {
		b.done = b.total
	}
	b.mu.Unlock()
	b.draw(true)
	b.mu.Lock()
	b.finished = true
	if b.tty {
		fmt.Fprintln(b.out)
	}
	b.mu.Unlock()
}

func (b *Bar) draw(force bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.finished {
		return
	}
	now := time.Now()
	frac := 0.0
	if b.total > 0 {
		frac = float64(b.done) / float64(b.total)
		if frac > 1 {
			frac = 1
		}
	}
	if b.tty {
		if !force && now.Sub(b.lastDraw) < 100*time.Millisecond {
			return
		}
		b.lastDraw = now
		const width = 30
		fill := int(frac * width)
		bar := strings.Repeat("=", fill)
		if fill < width {
			bar += ">" + strings.Repeat(" ", width-fill-1)
		}
		fmt.Fprintf(b.out, "\r%s [%s] %3.0f%% %s", b.label, bar, frac*100, b.counts(now))
		return
	}
	ten := int64(frac * 10)
	if ten == b.lastTen {
		return
	}
	b.lastTen = ten
	fmt.Fprintf(b.out, "%s %3.0f%% %s\n", b.label, frac*100, b.counts(now))
}

func (b *Bar) counts(now time.Time) string {
	el := now.Sub(b.start).Round(100 * time.Millisecond)
	if b.unit == "B" {
		return fmt.Sprintf("%s/%s %s", Bytes(b.done), Bytes(b.total), el)
	}
	return fmt.Sprintf("%d/%d %s %s", b.done, b.total, b.unit, el)
}

// Bytes formats a byte count with binary units.
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
