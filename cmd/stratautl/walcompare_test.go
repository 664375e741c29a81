package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/strata-db/strata/wal"
)

// TestWALVerifyDataDirComparesWithPageStore: on a data dir a real member
// wrote, `wal verify --data-dir` passes; while the member runs it says it
// cannot compare; once WAL records the page store has applied are gone it
// fails with both indexes, both paths and what to do, as the member's own
// refusal to start does.
func TestWALVerifyDataDirComparesWithPageStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m1.strata")
	m := startMember(t, dir)
	m.put(t, "/k/", 60)

	_, stderr, code := runCLI(t, "wal", "verify", "--data-dir", dir)
	if code != 1 || !strings.Contains(stderr, "database locked") || !strings.Contains(stderr, "stop it first") {
		t.Fatalf("wal verify --data-dir on a running member: exit %d, stderr %q", code, stderr)
	}
	m.stop(t)

	out, stderr, code := runCLI(t, "wal", "verify", "--data-dir", dir)
	if code != 0 {
		t.Fatalf("clean data dir: exit %d\n%s%s", code, out, stderr)
	}
	okLine := regexp.MustCompile(`page store (\S+): consistent index (\d+), within the WAL \(last index (\d+)\)`).FindStringSubmatch(out)
	if okLine == nil || okLine[1] != m.dbPath() {
		t.Fatalf("clean data dir: no comparison line naming %s:\n%s", m.dbPath(), out)
	}
	ci, _ := strconv.ParseUint(okLine[2], 10, 64)
	if ci < 60 {
		t.Fatalf("consistent index %d after 60 puts", ci)
	}

	// A data dir made by snapshot restore (its WAL ends with a snapshot
	// marker, and the page store sits exactly at it) passes.
	restored := filepath.Join(t.TempDir(), "restored")
	if _, stderr, code := runCLI(t, "snapshot", "restore", m.dbPath(), "--skip-hash-check", "--data-dir", restored,
		"--name", "m1", "--initial-cluster", "m1=http://127.0.0.1:1", "--initial-advertise-peer-urls", "http://127.0.0.1:1"); code != 0 {
		t.Fatalf("snapshot restore: exit %d: %s", code, stderr)
	}
	if out, stderr, code := runCLI(t, "wal", "verify", "--data-dir", restored); code != 0 || !strings.Contains(out, "consistent index 1, within the WAL (last index 1)") {
		t.Fatalf("restored data dir: exit %d\n%s%s", code, out, stderr)
	}

	// Cut the WAL ten entries before its end.
	var ents []wal.Position
	var idx []uint64
	if _, err := wal.Iterate(nil, m.walDir(), func(p wal.Position, rec wal.Record) error {
		if rec.Type == wal.TypeEntry {
			e, err := wal.DecodeEntry(rec)
			if err != nil {
				return err
			}
			ents, idx = append(ents, p), append(idx, e.GetIndex())
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	cut := len(ents) - 10
	if err := os.Truncate(ents[cut].File, ents[cut].Offset); err != nil {
		t.Fatal(err)
	}
	walLast := idx[cut-1]

	// The WAL alone is still a valid log...
	if _, stderr, code := runCLI(t, "wal", "verify", "--dir", m.walDir()); code != 0 {
		t.Fatalf("wal verify --dir on the truncated log: exit %d: %s", code, stderr)
	}
	// ...but it no longer covers the page store.
	out, stderr, code = runCLI(t, "wal", "verify", "--data-dir", dir)
	if code != 1 {
		t.Fatalf("WAL behind the page store: exit %d\n%s%s", code, out, stderr)
	}
	for _, want := range []string{
		m.walDir(), m.dbPath(),
		fmt.Sprintf("ends at index %d", walLast), fmt.Sprintf("up to index %d", ci),
		"stratautl snapshot restore " + m.dbPath() + " --skip-hash-check", "etcdctl member remove",
	} {
		if !strings.Contains(stderr, want) {
			t.Fatalf("wal verify --data-dir error lacks %q:\n%s", want, stderr)
		}
	}

	// No WAL at all.
	if err := os.RemoveAll(m.walDir()); err != nil {
		t.Fatal(err)
	}
	_, stderr, code = runCLI(t, "wal", "verify", "--data-dir", dir)
	if code != 1 || !strings.Contains(stderr, "holds no WAL") || !strings.Contains(stderr, fmt.Sprintf("up to index %d", ci)) {
		t.Fatalf("no WAL: exit %d: %s", code, stderr)
	}

	// Flags: exactly one of --dir and --data-dir.
	for _, args := range [][]string{{}, {"--dir", dir, "--data-dir", dir}, {"--dir", dir, "--wal-dir", dir}} {
		if _, _, code := runCLI(t, append([]string{"wal", "verify"}, args...)...); code != 2 {
			t.Fatalf("wal verify %v: exit %d, want 2", args, code)
		}
	}
}
