package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/strata-db/strata/progress"
	"github.com/strata-db/strata/tools"
)

func init() {
	register(command{name: "snapshot restore", example: "stratautl snapshot restore snap.db --data-dir m1.strata --name m1", args: "file", summary: "make a new data dir from a snapshot (Strata or etcd snapshot.db), like etcdutl snapshot restore", run: snapshotRestore})
	register(command{name: "snapshot export-etcd", example: "stratautl snapshot export-etcd --data-dir default.strata --out snapshot.db", summary: "write a stopped member's data as an etcd snapshot.db (server stopped)", run: snapshotExportEtcd})
}

func snapshotRestore(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("snapshot restore", "FILE [--data-dir DIR] [--name N] [--initial-cluster C] [--initial-cluster-token T] [--initial-advertise-peer-urls U] [--skip-hash-check] [--wal-dir W] [--bump-revision N --mark-compacted]", []string{
		"stratautl snapshot restore snapshot.db --data-dir /var/lib/strata/m1.strata \\",
		"    --name m1 --initial-cluster m1=http://10.0.0.1:2380 --initial-advertise-peer-urls http://10.0.0.1:2380",
		"stratautl snapshot restore copied-member-snap-db --skip-hash-check --data-dir new.strata",
		"stratautl snapshot restore snapshot.db --data-dir m1.strata --bump-revision 1000000 --mark-compacted",
		"",
		"FILE is a Strata snapshot or an etcd snapshot.db ('etcdctl snapshot save'): keys with their",
		"revisions, compaction state, leases, auth and alarms are carried over; the membership is",
		"replaced by --initial-cluster and a new WAL is written. Then start strata with the same",
		"--name and --data-dir (and --wal-dir). The data dir must be new or empty.",
		"",
		"--bump-revision N --mark-compacted (as etcdutl's, both or neither) start the restored member",
		"N revisions past the snapshot's latest, with everything below compacted: clients that",
		"cached revisions from before the restore (Kubernetes' watch caches) see the revision go on",
		"rising, and their reads, watches and compactions at old revisions fail as compacted, so",
		"they re-list instead of missing the writes the restore took back.",
		"",
		"--initial-memory-map-size is accepted for etcdutl's command lines and has no effect: the",
		"page store maps its own address range and needs no initial size.",
		"",
		"Prints a summary (-w json: as JSON); etcdutl prints only log lines.",
	}, stderr)
	var cfg tools.RestoreConfig
	fs.StringVar(&cfg.DataDir, "data-dir", "", `path to the output data directory (default "<name>.strata")`)
	fs.StringVar(&cfg.WALDir, "wal-dir", "", "path to the WAL directory (default <data-dir>/member/wal)")
	fs.StringVar(&cfg.Name, "name", "default", "human-readable name for this member")
	fs.StringVar(&cfg.InitialCluster, "initial-cluster", "default=http://localhost:2380", "initial cluster configuration for restore bootstrap")
	fs.StringVar(&cfg.InitialClusterToken, "initial-cluster-token", "etcd-cluster", "initial cluster token for the cluster during restore bootstrap")
	fs.StringVar(&cfg.InitialAdvertisePeerURLs, "initial-advertise-peer-urls", "http://localhost:2380", "list of this member's peer URLs to advertise to the rest of the cluster")
	fs.BoolVar(&cfg.SkipHashCheck, "skip-hash-check", false, "ignore the snapshot's SHA-256 trailer (required for a db file copied from a data directory)")
	fs.Uint64Var(&cfg.RevisionBump, "bump-revision", 0, "how much to increase the latest revision after restore (needs --mark-compacted)")
	fs.BoolVar(&cfg.MarkCompacted, "mark-compacted", false, "mark the latest revision after restore as the point of scheduled compaction (required if --bump-revision > 0, disallowed otherwise)")
	fs.Uint64Var(&cfg.InitialMmapSize, "initial-memory-map-size", 10<<30, "etcdutl's initial memory map size; accepted and ignored: the page store maps its own range")
	noProgress := fs.Bool("no-progress", false, "do not draw progress bars")
	pos, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	if (cfg.RevisionBump == 0) == cfg.MarkCompacted {
		return codedError{exitBadArgs, tools.ErrMarkCompacted}
	}
	// etcdutl ignores -w here; every one of its formats prints the
	// summary, json as JSON.
	format := outputFormat("simple")
	if err := checkFormat(format); err != nil {
		return err
	}
	cfg.Snapshot = pos[0]
	if !*noProgress {
		cfg.Progress = stderr
	}
	sum, err := tools.Restore(cfg)
	if err != nil {
		return err
	}
	if format == "json" {
		return json.NewEncoder(stdout).Encode(sum)
	}
	hash := "checked"
	if !sum.HashChecked {
		hash = "not checked (--skip-hash-check)"
	}
	compacted := ""
	if sum.CompactRevision > 0 {
		compacted = fmt.Sprintf(" (compacted at %d)", sum.CompactRevision)
	}
	auth := "disabled"
	if sum.AuthEnabled {
		auth = "enabled"
	}
	fmt.Fprintf(stdout, "restored %s snapshot %s into %s in %v\n", sum.Format, sum.Snapshot, sum.DataDir, sum.Took.Round(1e6))
	fmt.Fprintf(stdout, "  SHA-256:   %s\n", hash)
	fmt.Fprintf(stdout, "  revision:  %d%s\n", sum.Revision, compacted)
	if sum.RevisionBump > 0 {
		fmt.Fprintf(stdout, "  bumped:    by %d past the snapshot's latest revision, marked compacted: reads and watches below %d fail as compacted\n",
			sum.RevisionBump, sum.Revision)
	}
	fmt.Fprintf(stdout, "  keys:      %d live, %d revision records copied\n", sum.Keys, sum.Records)
	fmt.Fprintf(stdout, "  leases:    %d\n", sum.Leases)
	fmt.Fprintf(stdout, "  auth:      %s, %d users, %d roles\n", auth, sum.Users, sum.Roles)
	if sum.Alarms > 0 {
		fmt.Fprintf(stdout, "  alarms:    %d carried over (see 'etcdctl alarm list'; 'etcdctl alarm disarm' clears them)\n", sum.Alarms)
	}
	fmt.Fprintf(stdout, "  database:  %s\n", progress.Bytes(sum.DBSize))
	fmt.Fprintf(stdout, "  member:    %s (id %s) of cluster %s with %d member(s); WAL %s at index %d, term %d\n",
		cfg.Name, sum.MemberID, sum.ClusterID, sum.Members, sum.WALDir, sum.RaftIndex, sum.RaftTerm)
	if len(sum.Dropped) > 0 {
		fmt.Fprintf(stdout, "  dropped:   buckets %s (not part of Strata's schema)\n", strings.Join(sum.Dropped, ", "))
	}
	start := fmt.Sprintf("strata --name %s --data-dir %s", cfg.Name, sum.DataDir)
	if cfg.WALDir != "" {
		start += " --wal-dir " + cfg.WALDir
	}
	fmt.Fprintf(stdout, "start it with: %s (plus its listen and advertise URLs)\n", start)
	return nil
}

func snapshotExportEtcd(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("snapshot export-etcd", "--data-dir DIR --out FILE [--wal-dir W] [-w table|json]", []string{
		"stratautl snapshot export-etcd --data-dir default.strata --out snapshot.db",
		"etcdutl snapshot status snapshot.db",
		"",
		"Writes the data of a stopped member as an etcd snapshot.db (bbolt, etcd's schema, with the",
		"SHA-256 trailer), which 'etcdutl snapshot status' and 'etcdutl snapshot restore' accept.",
		"Refuses while a server holds the data dir.",
	}, stderr)
	var cfg tools.ExportConfig
	fs.StringVar(&cfg.DataDir, "data-dir", "", "Strata data directory (contains member/snap/db)")
	fs.StringVar(&cfg.WALDir, "wal-dir", "", "WAL directory, if the member runs with --wal-dir (read only, to warn about unapplied entries)")
	fs.StringVar(&cfg.Out, "out", "", "the etcd snapshot file to write (must not exist)")
	noProgress := fs.Bool("no-progress", false, "do not draw a progress bar")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	if cfg.DataDir == "" || cfg.Out == "" {
		fmt.Fprintln(stderr, "stratautl snapshot export-etcd: --data-dir and --out are required")
		fs.Usage()
		return errUsage
	}
	format, err := ownFormat(stderr, "snapshot export-etcd")
	if err != nil {
		return err
	}
	dbPath, err := tools.DataDirDB(cfg.DataDir)
	if err != nil {
		return err
	}
	if !*noProgress {
		cfg.Progress = stderr
	}
	var sum *tools.ExportSummary
	err = retryLocked(dbPath, func() error {
		var err error
		sum, err = tools.ExportEtcd(cfg)
		return err
	})
	if err != nil {
		return err
	}
	for _, w := range sum.Warnings {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	if format == "json" {
		return json.NewEncoder(stdout).Encode(sum)
	}
	fmt.Fprintf(stdout, "exported %s to %s in %v\n", cfg.DataDir, sum.Out, sum.Took.Round(1e6))
	fmt.Fprintf(stdout, "  revision:  %d\n", sum.Revision)
	fmt.Fprintf(stdout, "  keys:      %d live, %d revision records\n", sum.Keys, sum.Records)
	fmt.Fprintf(stdout, "  leases:    %d\n", sum.Leases)
	fmt.Fprintf(stdout, "  auth:      %d users, %d roles\n", sum.Users, sum.Roles)
	fmt.Fprintf(stdout, "  members:   %d; consistent index %d, term %d\n", sum.Members, sum.RaftIndex, sum.RaftTerm)
	fmt.Fprintf(stdout, "  size:      %s with SHA-256 trailer %s\n", progress.Bytes(sum.Size), sum.SHA256)
	if len(sum.Skipped) > 0 {
		fmt.Fprintf(stdout, "  skipped:   buckets %s (Strata's own, not in etcd's schema)\n", strings.Join(sum.Skipped, ", "))
	}
	return nil
}
