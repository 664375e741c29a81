package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-db/strata/pagestore"
)

// TestSnapshotRestoreAndExportCommands runs both commands on an empty
// member's page store: restore with etcdutl's default flags, then export.
func TestSnapshotRestoreAndExportCommands(t *testing.T) {
	dir := t.TempDir()
	db, err := pagestore.Open(filepath.Join(dir, "src.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	var img bytes.Buffer
	db.View(func(tx *pagestore.Tx) error { _, err := tx.WriteTo(&img); return err })
	db.Close()
	snap := filepath.Join(dir, "copied-db")
	os.WriteFile(snap, img.Bytes(), 0o600)

	var out, errOut bytes.Buffer
	// No trailer: refused without --skip-hash-check.
	if code := run([]string{"snapshot", "restore", snap, "--no-progress"}, &out, &errOut); code != 1 ||
		!strings.Contains(errOut.String(), "--skip-hash-check") {
		t.Fatalf("restore without trailer: exit %d, stderr %q", code, errOut.String())
	}
	target := filepath.Join(dir, "default.strata")
	out.Reset()
	errOut.Reset()
	if code := run([]string{"snapshot", "restore", snap, "--skip-hash-check", "--data-dir", target, "--no-progress"}, &out, &errOut); code != 0 {
		t.Fatalf("restore: exit %d, stderr %q", code, errOut.String())
	}
	if !strings.Contains(out.String(), "revision:") || !strings.Contains(out.String(), "not checked") {
		t.Errorf("summary:\n%s", out.String())
	}
	t.Logf("restore:\n%s", out.String())

	out.Reset()
	if code := run([]string{"snapshot", "export-etcd", "--data-dir", target}, &out, &errOut); code != 2 {
		t.Errorf("export without --out: exit %d", code)
	}
	outFile := filepath.Join(dir, "etcd.db")
	out.Reset()
	errOut.Reset()
	if code := run([]string{"snapshot", "export-etcd", "--data-dir", target, "--out", outFile, "--no-progress", "-w", "json"}, &out, &errOut); code != 0 {
		t.Fatalf("export: exit %d, stderr %q", code, errOut.String())
	}
	var sum struct {
		Revision int64  `json:"revision"`
		SHA256   string `json:"sha256"`
	}
	if err := json.Unmarshal(out.Bytes(), &sum); err != nil || sum.Revision != 1 || len(sum.SHA256) != 64 {
		t.Errorf("export summary %s: %v", out.String(), err)
	}
}
