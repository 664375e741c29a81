package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/strata-db/strata/tools"
)

func init() {
	register(command{name: "migrate", example: "stratautl migrate --data-dir m1.strata --target-version 3.6",
		summary: "set a stopped member's storage version (3.5 to 3.7), as etcdutl migrate does for etcd data dirs", run: migrateCommand})
}

func migrateCommand(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("migrate", "--data-dir DIR --target-version X.Y [--force] [--wal-dir W]", []string{
		"stratautl migrate --data-dir /var/lib/strata/m1.strata --target-version 3.6",
		"stratautl migrate --data-dir m1.strata --target-version 3.6 --force",
		"",
		"Sets the storage version of a stopped member's data dir (the meta bucket's storageVersion,",
		"which a member keeps at the cluster version) as 'etcdutl migrate' does for etcd, with its",
		"checks and messages: the version must be X.Y, at least 3.5; nothing is done when it already",
		"is the target; etcd 3.7 migrates between 3.5, 3.6 and 3.7 (3.5 has no stored version: it is",
		"cleared); a downgrade is refused while the WAL, after its last snapshot, holds entries a",
		"release of the target version would not understand. --force sets it anyway. Strata's page",
		"store holds nothing that 3.6 reads differently from 3.7, so only the version changes, as in",
		"etcd's own migration from 3.7 to 3.6. Use it in a downgrade (see 'etcdctl downgrade') on a",
		"member stopped before its leader set the lower cluster version. The messages etcdutl logs",
		"go to stderr; the result is printed on stdout.",
		"",
		"To move etcd's data to Strata, which is another meaning of migrating, use 'stratautl",
		"snapshot restore' on a snapshot of it.",
	}, stderr)
	var cfg tools.MigrateConfig
	fs.StringVar(&cfg.DataDir, "data-dir", "", "path to the Strata data dir (required)")
	fs.StringVar(&cfg.TargetVersion, "target-version", "", `target version to migrate the data dir to, "X.Y" (for example 3.6); minimal value 3.5 (required)`)
	fs.BoolVar(&cfg.Force, "force", false, "ignore migration failure and forcefully override storage version; not recommended")
	fs.StringVar(&cfg.WALDir, "wal-dir", "", "the member's --wal-dir, if not DATA-DIR/member/wal")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	// etcdutl's cobra refuses missing required flags before anything else.
	var missing []string
	if cfg.DataDir == "" {
		missing = append(missing, `"data-dir"`)
	}
	if cfg.TargetVersion == "" {
		missing = append(missing, `"target-version"`)
	}
	if len(missing) > 0 {
		msg := "required flag(s) " + missing[0]
		if len(missing) == 2 {
			msg += ", " + missing[1]
		}
		fmt.Fprintf(stderr, "stratautl migrate: %s not set\n", msg)
		fs.Usage()
		return errUsage
	}
	if err := tools.CheckMigrateTarget(cfg.TargetVersion); err != nil {
		return codedError{exitBadArgs, err}
	}
	cfg.LockTimeout = global.timeout
	cfg.Log = stderr
	res, err := tools.Migrate(cfg)
	if err != nil {
		if errors.Is(err, tools.ErrBadTargetVersion) {
			return codedError{exitBadArgs, err}
		}
		return err
	}
	to := res.To
	if to == "" {
		to = "none (3.5)"
	}
	switch {
	case res.UpToDate:
		fmt.Fprintf(stdout, "%s: storage version is already %s; nothing changed\n", res.DB, res.From)
	case res.Forced:
		fmt.Fprintf(stdout, "%s: storage version %s -> %s (forced: the migration was refused, see above)\n", res.DB, res.From, to)
	default:
		fmt.Fprintf(stdout, "%s: storage version %s -> %s\n", res.DB, res.From, to)
	}
	return nil
}
