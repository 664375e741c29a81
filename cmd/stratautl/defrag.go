package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/vfs"
)

const defragUsage = `Usage:
  stratautl defrag --data-dir DIR

Rewrites DIR/member/snap/db into a compact file (offline defrag): every
live key is copied in order into a new file, which then replaces the old
one. The server must be stopped: the page store holds an exclusive flock
on the db file itself while open, and defrag refuses to run if it cannot
take that lock.

The new file is written to DIR/member/snap/db.defrag.tmp, synced, and
renamed over db; the directory is then synced. If defrag is interrupted,
db is untouched and the .tmp file can be deleted.

Examples:
  stratautl defrag --data-dir /var/lib/strata/default.strata
  stratautl defrag --data-dir default.strata --no-progress

Flags:
`

func runDefrag(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("defrag", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir := fs.String("data-dir", "", "Strata data directory (contains member/snap/db)")
	noProgress := fs.Bool("no-progress", false, "do not draw a progress bar")
	fs.Usage = func() {
		fmt.Fprint(stderr, defragUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *dataDir == "" || fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	if err := defrag(*dataDir, !*noProgress, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "stratautl defrag: %v\n", err)
		return 1
	}
	return 0
}

func defrag(dataDir string, showProgress bool, stdout, stderr io.Writer) error {
	db := filepath.Join(dataDir, "member", "snap", "db")
	fi, err := os.Stat(db)
	if err != nil {
		return fmt.Errorf("no page store at %s: %w", db, err)
	}
	before := fi.Size()
	tmp := db + ".defrag.tmp"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	start := time.Now()
	var progress func(done, total int64)
	if showProgress {
		progress = func(done, total int64) { drawBar(stderr, done, total) }
	}
	err = pagestore.Compact(tmp, db, progress)
	if showProgress {
		fmt.Fprintln(stderr)
	}
	if err != nil {
		os.Remove(tmp)
		if errors.Is(err, pagestore.ErrDatabaseLocked) {
			return fmt.Errorf("%s is in use (is the server running? stop it first): %w", db, err)
		}
		return err
	}
	if err := os.Rename(tmp, db); err != nil {
		return err
	}
	if err := vfs.Default.SyncDir(filepath.Dir(db)); err != nil {
		return err
	}
	fi, err = os.Stat(db)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "defragmented %s in %v\n  before: %s\n  after:  %s (%.1f%% of before)\n",
		db, time.Since(start).Round(time.Millisecond), human(before), human(fi.Size()), 100*float64(fi.Size())/float64(max(before, 1)))
	return nil
}

func drawBar(w io.Writer, done, total int64) {
	const width = 40
	frac := 1.0
	if total > 0 {
		frac = float64(done) / float64(total)
	}
	n := int(frac * width)
	fmt.Fprintf(w, "\r[%s%s] %5.1f%% %s / %s", strings.Repeat("#", n), strings.Repeat(" ", width-n), 100*frac, human(done), human(total))
}

func human(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func init() {
	register(command{name: "defrag", summary: "rewrite the page store into a compact file (server stopped)", run: intCommand(runDefrag)})
}
