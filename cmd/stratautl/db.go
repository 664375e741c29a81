package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/tools"
)

// dbCheckProgressMin is the file size from which db check draws a
// progress bar: below it the check takes well under a second.
const dbCheckProgressMin = 64 << 20

const dbCheckAbout = `
Checks a Strata page store completely, without changing it: every page
checksum, both meta pages, every bucket's B+tree (key order, parent and
child keys, leaf depth, page layout, no page reachable twice), the free
list (no page both free and in use, no leaked page) and the bytes-in-use
figure the quota counts. Each problem names the file and its byte offset;
a clean check prints a summary (pages, buckets, keys, bytes in use, free
pages). Exit status: 0 clean, 1 corrupt or not checkable, 2 bad flags.

The member must be stopped: the check takes a shared lock on the file and
fails while a member holds it, since pages a running member reuses could
change under the check.
`

func init() {
	register(command{name: "db check", example: "stratautl db check --data-dir default.strata", args: "file", summary: "verify a page store (checksums, trees, free list, bytes in use); non-zero exit on corruption", run: dbCheck})
}

func dbCheck(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("db check", "--data-dir DIR | FILE [flags] [-w table|json]", []string{
		"stratautl db check --data-dir default.strata",
		"stratautl db check /var/lib/strata/m1.strata/member/snap/db -w json",
		"stratautl db check --data-dir default.strata --max-problems 1000",
	}, stderr)
	dataDir := fs.String("data-dir", "", "data directory whose member/snap/db to check (or give the db file as the argument)")
	maxProblems := fs.Int("max-problems", 100, "list at most this many problems (the rest are counted)")
	noProgress := fs.Bool("no-progress", false, "never draw a progress bar (drawn on stderr for files of 64 MiB or more)")
	usage := fs.Usage
	fs.Usage = func() {
		usage()
		fmt.Fprint(stderr, dbCheckAbout)
	}
	pos, err := parseUpTo(fs, args, 1)
	if err != nil {
		return err
	}
	target := *dataDir
	if (target == "") == (len(pos) == 0) {
		fmt.Fprintln(stderr, "stratautl db check: give --data-dir DIR or a db FILE (one of them)")
		fs.Usage()
		return errUsage
	}
	if target == "" {
		target = pos[0]
	}
	format, err := ownFormat(stderr, "db check")
	if err != nil {
		return err
	}
	if *dataDir != "" {
		if _, err := tools.DataDirDB(*dataDir); err != nil {
			return err
		}
	} else if err := tools.CheckStrataDB(target); err != nil {
		return err
	}
	o := tools.DBCheckOptions{MaxProblems: *maxProblems}
	if st, err := os.Stat(tools.ResolveDBPath(target)); err == nil && st.Size() >= dbCheckProgressMin && !*noProgress {
		o.Progress = stderr
	}
	var rep *pagestore.CheckReport
	err = retryLocked(tools.ResolveDBPath(target), func() error {
		var err error
		rep, err = tools.DBCheck(target, o)
		return err
	})
	if err != nil {
		return err
	}
	if format == "json" {
		if err := json.NewEncoder(stdout).Encode(rep); err != nil {
			return err
		}
	} else {
		tools.WriteDBCheckReport(stdout, rep)
	}
	if !rep.OK() {
		return fmt.Errorf("%w: %s: %d problem(s), listed above", pagestore.ErrCorrupt, rep.Path, len(rep.Problems)+rep.Omitted)
	}
	return nil
}

// parseUpTo parses flags, allowing them before and after up to max
// positional arguments.
func parseUpTo(fs *flag.FlagSet, args []string, max int) ([]string, error) {
	if collecting != nil {
		*collecting = fs
		return nil, errCollected
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, errUsage
	}
	var pos []string
	for rest := fs.Args(); len(rest) > 0; rest = fs.Args() {
		pos = append(pos, rest[0])
		if err := fs.Parse(rest[1:]); err != nil {
			return nil, errUsage
		}
	}
	if len(pos) > max {
		fmt.Fprintf(fs.Output(), "stratautl %s: at most %d argument(s), got %d\n", fs.Name(), max, len(pos))
		fs.Usage()
		return nil, errUsage
	}
	return pos, nil
}
