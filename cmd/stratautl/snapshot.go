package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/strata-db/strata/progress"
	"github.com/strata-db/strata/tools"
)

func init() {
	register(command{name: "snapshot status", example: "stratautl snapshot status snap.db", summary: "show hash, revision, key count and size of a snapshot (Strata or etcd snapshot.db)", run: snapshotStatus})
}

func snapshotStatus(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("snapshot status", "FILE [-w table|json]", []string{
		"stratautl snapshot status snap.db",
		"stratautl snapshot status etcd-backup.db -w json",
	}, stderr)
	format := fs.String("w", "table", "output format: table or json")
	pos, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	st, err := tools.Status(pos[0])
	if err != nil {
		return err
	}
	switch *format {
	case "json":
		return json.NewEncoder(stdout).Encode(st)
	case "table":
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "FORMAT\tHASH\tREVISION\tTOTAL KEYS\tTOTAL SIZE\tSHA-256 CHECKED")
		fmt.Fprintf(tw, "%s\t%x\t%d\t%d\t%s\t%v\n", st.Format, st.Hash, st.Revision, st.TotalKey, progress.Bytes(st.TotalSize), st.HashChecked)
		return tw.Flush()
	}
	return fmt.Errorf("-w must be table or json, not %q", *format)
}
