package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/strata-db/strata/progress"
	"github.com/strata-db/strata/tools"
	"github.com/strata-db/strata/wal"
)

func init() {
	register(command{name: "wal dump", example: "stratautl wal dump --dir default.strata", summary: "list WAL records with decoded requests", run: walDump})
	register(command{name: "wal verify", example: "stratautl wal verify --data-dir default.strata", summary: "check every WAL record (and, with --data-dir, that it covers the page store); non-zero exit on a problem", run: walVerify})
}

func walDump(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("wal dump", "--dir DIR [flags] [-w table|json (one object per line)]", []string{
		"stratautl wal dump --dir default.strata",
		"stratautl wal dump --dir default.strata/member/wal --from-index 100 --to-index 200",
		"stratautl wal dump --dir default.strata --type entry --key-prefix /registry/pods/ -w json",
	}, stderr)
	var o tools.WALDumpOptions
	fs.StringVar(&o.Dir, "dir", "", "WAL directory, or a data directory holding member/wal")
	fs.Uint64Var(&o.FromIndex, "from-index", 0, "first entry index to print")
	fs.Uint64Var(&o.ToIndex, "to-index", 0, "last entry index to print (0: to the end)")
	fs.StringVar(&o.Type, "type", "", "only records of this type: entry, state or snapshot")
	fs.StringVar(&o.KeyPrefix, "key-prefix", "", "only entries that write or compare a key with this prefix")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	format, err := ownFormat(stderr, "wal dump")
	if err != nil {
		return err
	}
	o.Format = format
	if o.Dir == "" {
		fmt.Fprintln(stderr, "stratautl wal dump: --dir is required")
		fs.Usage()
		return errUsage
	}
	return tools.WALDump(o, stdout)
}

func walVerify(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("wal verify", "--dir DIR | --data-dir DIR [--wal-dir DIR]", []string{
		"stratautl wal verify --dir default.strata/member/wal",
		"stratautl wal verify --data-dir default.strata",
		"stratautl wal verify --data-dir /var/lib/strata --wal-dir /fast-disk/strata-wal",
	}, stderr)
	dir := fs.String("dir", "", "WAL directory, or a data directory holding member/wal: checks the WAL alone (works while a member runs)")
	dataDir := fs.String("data-dir", "", "data directory: checks its WAL and that the page store's consistent index is not past the WAL's last entry "+
		"(the member would refuse to start); needs the member stopped")
	walDir := fs.String("wal-dir", "", "with --data-dir: the member's --wal-dir, if not DATA-DIR/member/wal")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	if (*dir == "") == (*dataDir == "") || (*walDir != "" && *dataDir == "") {
		fmt.Fprintln(stderr, "stratautl wal verify: give --dir, or --data-dir (with --wal-dir if the WAL is elsewhere)")
		fs.Usage()
		return errUsage
	}
	var res *tools.WALVerifyResult
	var err error
	if *dataDir != "" {
		res, err = tools.WALVerifyDataDir(*dataDir, *walDir, true)
	} else {
		res, err = tools.WALVerify(*dir, true)
	}
	if err != nil {
		if res != nil && errors.Is(err, wal.ErrCorrupt) {
			fmt.Fprintf(stdout, "WAL is corrupt after %d good records\n", res.Records)
		} else if res != nil {
			printWALOK(stdout, res)
		}
		return err
	}
	printWALOK(stdout, res)
	if res.DBPath != "" {
		fmt.Fprintf(stdout, "page store %s: consistent index %d, within the WAL (last index %d)\n", res.DBPath, res.ConsistentIndex, res.LastIndex())
	}
	return nil
}

func printWALOK(stdout io.Writer, res *tools.WALVerifyResult) {
	fmt.Fprintf(stdout, "WAL OK: %d segments, %d records, %d entries", res.Segments, res.Records, res.Entries)
	if res.Entries > 0 {
		fmt.Fprintf(stdout, " (index %d..%d)", res.FirstIdx, res.LastIdx)
	}
	if res.SnapIdx > res.LastIdx {
		fmt.Fprintf(stdout, ", snapshot marker at %d", res.SnapIdx)
	}
	fmt.Fprintf(stdout, ", %s of records\n", progress.Bytes(res.BytesRead))
	if t := res.TornTail; t != nil {
		fmt.Fprintf(stdout, "note: torn tail at %s offset %d (%s); the server truncates it on start\n", t.File, t.Offset, t.Reason)
	}
}
