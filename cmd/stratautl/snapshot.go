package main

import (
	"fmt"
	"io"
	"os"

	"github.com/strata-db/strata/progress"
	"github.com/strata-db/strata/tools"
)

func init() {
	register(command{name: "snapshot status", example: "stratautl snapshot status snap.db", args: "file",
		summary: "show hash, revision, key count, size and storage version of a snapshot (Strata or etcd snapshot.db), as etcdutl", run: snapshotStatus})
	register(command{name: "hashkv", example: "stratautl hashkv snapshot.db --rev 100", args: "file",
		summary: "print the KV history hash (etcd's HashKV) of a snapshot, db file or data dir, as etcdutl", run: hashKV})
}

// Formats of snapshot status beyond etcdutl's: the facts only Strata
// reports (the file's format, the SHA-256 check, the file size).
const (
	formatStrata     = "strata"
	formatStrataJSON = "strata-json"
)

func snapshotStatus(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("snapshot status", "FILE", []string{
		"stratautl snapshot status snap.db",
		"stratautl snapshot status etcd-backup.db -w table",
		"stratautl snapshot status etcd-backup.db -w json",
		"stratautl snapshot status snap.db -w strata",
		"",
		"FILE is an etcd snapshot.db ('etcdctl snapshot save'), a Strata snapshot image, or a member's",
		"db file. Prints what 'etcdutl snapshot status' prints, in its formats (-w simple, table, json,",
		"fields): the hash of every bucket (CRC-32C), the latest revision, the keys live at it, the",
		"database's size and its storage version. A file that ends with the SHA-256 trailer the",
		"snapshot stream appends must match it (a mismatch is an error). Strata's own formats add the",
		"file's format, whether the trailer was checked and the file size: -w strata (text) and",
		"-w strata-json. --timeout bounds the wait for a server holding the file.",
	}, stderr)
	pos, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	// etcdutl's order: the file must exist, then the format must be one
	// it knows; the status is read before a protobuf refusal.
	if _, err := os.Stat(pos[0]); err != nil {
		return err
	}
	format := outputFormat("simple")
	if err := checkFormat(format, formatStrata, formatStrataJSON); err != nil {
		return err
	}
	st, err := tools.StatusTimeout(pos[0], global.timeout)
	if err != nil {
		return err
	}
	switch format {
	case formatStrataJSON:
		return printJSON(stdout, st)
	case formatStrata:
		hash := "absent (a member's db file, or a file cut short at a page boundary)"
		if st.HashChecked {
			hash = "present and matches the contents"
		}
		version := st.Version
		if version == "" {
			version = "none (written by etcd 3.5 or older, or by a member whose cluster version was not yet decided)"
		}
		fmt.Fprintf(stdout, "file:        %s\n", pos[0])
		fmt.Fprintf(stdout, "format:      %s\n", map[string]string{"etcd": "etcd (bbolt snapshot.db)", "strata": "Strata (page-store image)"}[st.Format])
		fmt.Fprintf(stdout, "SHA-256:     %s\n", hash)
		fmt.Fprintf(stdout, "hash:        %x\n", st.Hash)
		fmt.Fprintf(stdout, "revision:    %d\n", st.Revision)
		fmt.Fprintf(stdout, "total keys:  %d\n", st.TotalKey)
		fmt.Fprintf(stdout, "total size:  %s (%d bytes; the file is %s)\n", humanBytes(uint64(st.TotalSize)), st.TotalSize, progress.Bytes(st.FileSize))
		fmt.Fprintf(stdout, "version:     %s\n", version)
		return nil
	}
	return printStatus(stdout, format, st)
}

func hashKV(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("hashkv", "FILE|DATA-DIR [--rev N]", []string{
		"stratautl hashkv snapshot.db",
		"stratautl hashkv snapshot.db --rev 100 -w json",
		"stratautl hashkv /var/lib/strata/m1.strata",
		"",
		"Prints etcd's HashKV of the key space at --rev (default: the latest revision), its",
		"revision and the compact revision, as 'etcdutl hashkv' and 'etcdctl endpoint hashkv' do:",
		"a member serving the same data reports the same hash. FILE is an etcd snapshot.db or db",
		"file, a Strata snapshot image or page store; a directory is a data dir (its",
		"member/snap/db). The file is only read (etcdutl's hashkv opens it for writing). A --rev",
		"below the compact revision or above the latest fails as etcd fails it.",
	}, stderr)
	rev := fs.Int64("rev", 0, "maximum revision to hash (default: latest revision)")
	pos, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	format := outputFormat("simple")
	if err := checkFormat(format); err != nil {
		return err
	}
	h, err := tools.HashKV(pos[0], *rev, global.timeout)
	if err != nil {
		return err
	}
	return printHashKV(stdout, format, h)
}
