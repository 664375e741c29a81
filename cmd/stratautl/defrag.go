package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/progress"
	"github.com/strata-db/strata/tools"
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
db is untouched and the .tmp file can be deleted. Defrag never makes db
bigger: when the compacted copy is not smaller (nothing to reclaim), it
is deleted, db is kept unchanged, and defrag says so.

An etcd data dir (whose db is bbolt) is refused, naming the Strata command
that moves it to Strata. --timeout (default 10s, 0 forever) bounds the wait
for a server that holds the db.

Examples:
  stratautl defrag --data-dir /var/lib/strata/default.strata
  stratautl defrag --data-dir default.strata --no-progress
  stratautl defrag --data-dir default.strata --timeout 1m

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
		fmt.Fprintln(stderr)
		fmt.Fprint(stderr, globalUsage)
	}
	if collecting != nil {
		*collecting = fs
		return 0
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
	if _, err := tools.DataDirDB(dataDir); err != nil {
		return err
	}
	before := fi.Size()
	start := time.Now()
	var bar *progress.Bar
	var report func(done, total int64)
	if showProgress {
		report = func(done, total int64) {
			// Compact reports first once it holds the db's lock: a
			// running server's db gets its error, never a bar.
			if bar == nil {
				bar = progress.NewTo(stderr, "defrag", total, "B")
			}
			bar.SetTotal(total)
			bar.Set(done)
		}
	}
	// Defrag never makes a file bigger: a copy that is not smaller (the
	// db had nothing to reclaim) is dropped and the db left as it was.
	var res pagestore.CompactResult
	err = tools.RetryLocked(db, global.timeout, func() error {
		var err error
		res, err = pagestore.CompactInPlace(db, report, func(before, copy int64) bool { return copy < before })
		return err
	})
	if err != nil {
		if errors.Is(err, tools.ErrLockTimeout) {
			return err
		}
		if errors.Is(err, pagestore.ErrDatabaseLocked) {
			return fmt.Errorf("%s is in use (is the server running? stop it first): %w", db, err)
		}
		return err
	}
	if bar != nil {
		bar.Finish()
	}
	if !res.Replaced {
		st, err := dbStats(db)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "nothing to reclaim in %s: it is %s (%s in use), a compacted copy would be %s; kept it unchanged\n",
			db, progress.Bytes(before), progress.Bytes(st.InUseBytes), progress.Bytes(res.Copy))
		return nil
	}
	st, err := dbStats(db)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "defragmented %s in %v\n  before: %s\n  after:  %s (%.1f%% of before)\n  in use: %s\n",
		db, time.Since(start).Round(time.Millisecond), progress.Bytes(before), progress.Bytes(st.FileSize),
		100*float64(st.FileSize)/float64(max(before, 1)), progress.Bytes(st.InUseBytes))
	return nil
}

// dbStats opens the page store just long enough to read its sizes.
func dbStats(path string) (pagestore.Stats, error) {
	d, err := pagestore.Open(path, nil)
	if err != nil {
		return pagestore.Stats{}, err
	}
	st := d.Stats()
	return st, d.Close()
}

func init() {
	register(command{name: "defrag", example: "stratautl defrag --data-dir default.strata", summary: "rewrite the page store into a compact file (server stopped), as etcdutl defrag", run: intCommand(runDefrag)})
}
