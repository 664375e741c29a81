package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-db/strata/pagestore"
	"github.com/strata-db/strata/tools"
	"github.com/strata-db/strata/version"
)

// writeEmptyStore writes the image of an empty page store to path.
func writeEmptyStore(t *testing.T, path string) {
	t.Helper()
	db, err := pagestore.Open(path+".src", nil)
	if err != nil {
		t.Fatal(err)
	}
	var img bytes.Buffer
	if err := db.View(func(tx *pagestore.Tx) error { _, err := tx.WriteTo(&img); return err }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if err := os.WriteFile(path, img.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestHumanBytes: sizes as etcdutl prints them (go-humanize's Bytes),
// the expected strings captured from the library, at the edges of its
// rounding and units.
func TestHumanBytes(t *testing.T) {
	for n, want := range map[uint64]string{
		0: "0 B", 1: "1 B", 9: "9 B", 10: "10 B", 99: "99 B", 100: "100 B", 999: "999 B",
		1000: "1.0 kB", 1023: "1.0 kB", 1024: "1.0 kB", 1049: "1.0 kB", 1050: "1.1 kB", 1051: "1.1 kB",
		9949: "9.9 kB", 9950: "10 kB", 9999: "10 kB", 10000: "10 kB", 16384: "16 kB", 16416: "16 kB",
		20480: "20 kB", 24576: "25 kB", 99949: "100 kB", 99950: "100 kB",
		999499: "1000 kB", 999500: "1000 kB", 999999: "1000 kB", 1000000: "1.0 MB", 1000001: "1.0 MB",
		123456789: "124 MB", 999999999: "1000 MB", 1000000000: "1.0 GB", 1e12: "1.0 TB", 1e15: "1.0 PB", 1e18: "1.0 EB",
		1 << 63: "9.2 EB", 1<<64 - 1: "18 EB",
	} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestRenderTable: the box tables, compared byte for byte with what
// etcdutl 3.7.3 printed (the first two) and what its table library
// renders for the other shapes: wider cells than headers, odd and even
// spare widths, an empty cell.
func TestRenderTable(t *testing.T) {
	for _, tc := range []struct {
		hdr  []string
		row  []string
		want string
	}{
		{[]string{"hash", "revision", "total keys", "total size", "version"}, []string{"2e6979c", "11", "7", "16 kB", "3.7.0"}, `┌─────────┬──────────┬────────────┬────────────┬─────────┐
│  HASH   │ REVISION │ TOTAL KEYS │ TOTAL SIZE │ VERSION │
├─────────┼──────────┼────────────┼────────────┼─────────┤
│ 2e6979c │       11 │          7 │      16 kB │   3.7.0 │
└─────────┴──────────┴────────────┴────────────┴─────────┘
`},
		{[]string{"hash", "hash revision", "compact revision"}, []string{"1572294598", "11", "3"}, `┌────────────┬───────────────┬──────────────────┐
│    HASH    │ HASH REVISION │ COMPACT REVISION │
├────────────┼───────────────┼──────────────────┤
│ 1572294598 │            11 │                3 │
└────────────┴───────────────┴──────────────────┘
`},
		{[]string{"hash", "revision", "total keys", "total size", "version"}, []string{"0", "1", "0", "20 kB", ""}, `┌──────┬──────────┬────────────┬────────────┬─────────┐
│ HASH │ REVISION │ TOTAL KEYS │ TOTAL SIZE │ VERSION │
├──────┼──────────┼────────────┼────────────┼─────────┤
│    0 │        1 │          0 │      20 kB │         │
└──────┴──────────┴────────────┴────────────┴─────────┘
`},
		{[]string{"hash", "revision", "total keys", "total size", "version"}, []string{"ffffffff", "123456789012", "1234567", "1.2 GB", "3.6.0"}, `┌──────────┬──────────────┬────────────┬────────────┬─────────┐
│   HASH   │   REVISION   │ TOTAL KEYS │ TOTAL SIZE │ VERSION │
├──────────┼──────────────┼────────────┼────────────┼─────────┤
│ ffffffff │ 123456789012 │    1234567 │     1.2 GB │   3.6.0 │
└──────────┴──────────────┴────────────┴────────────┴─────────┘
`},
		{[]string{"hash", "hash revision", "compact revision"}, []string{"4294967295", "9223372036854775807", "9223372036854775806"}, `┌────────────┬─────────────────────┬─────────────────────┐
│    HASH    │    HASH REVISION    │  COMPACT REVISION   │
├────────────┼─────────────────────┼─────────────────────┤
│ 4294967295 │ 9223372036854775807 │ 9223372036854775806 │
└────────────┴─────────────────────┴─────────────────────┘
`},
		{[]string{"a", "bb", "ccc"}, []string{"dddd", "eeeee", "f"}, `┌──────┬───────┬─────┐
│  A   │  BB   │ CCC │
├──────┼───────┼─────┤
│ dddd │ eeeee │   f │
└──────┴───────┴─────┘
`},
	} {
		var b bytes.Buffer
		renderTable(&b, tc.hdr, [][]string{tc.row})
		if b.String() != tc.want {
			t.Errorf("table %q:\n%s\nwant:\n%s", tc.hdr, b.String(), tc.want)
		}
	}
}

// strataSnapshotFile writes a small Strata snapshot image (with the
// SHA-256 trailer) through the restore and export commands' own tests'
// route: a restored empty data dir's page store.
func strataSnapshotFile(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	src := filepath.Join(dir, "src.db")
	writeEmptyStore(t, src)
	target := filepath.Join(dir, "m.strata")
	if code := run([]string{"snapshot", "restore", src, "--skip-hash-check", "--data-dir", target, "--no-progress"}, &out, &errOut); code != 0 {
		t.Fatalf("restore: %d %s", code, errOut.String())
	}
	return filepath.Join(target, "member", "snap", "db")
}

// TestStatusAndHashKVFormats: every -w of snapshot status and hashkv, -w
// before or after the command in both spellings, and etcdutl's refusals
// with its messages and exit statuses.
func TestStatusAndHashKVFormats(t *testing.T) {
	db := strataSnapshotFile(t)
	st, err := tools.StatusTimeout(db, 0)
	if err != nil {
		t.Fatal(err)
	}
	h, err := tools.HashKV(db, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "nope")
	statusJSON, _ := json.Marshal(map[string]any{"hash": st.Hash, "revision": st.Revision, "totalKey": st.TotalKey, "totalSize": st.TotalSize, "version": st.Version})
	for _, tc := range []struct {
		args []string
		code int
		out  string
		err  string
	}{
		{[]string{"snapshot", "status", db}, 0, strings.Join(func() []string { _, r := statusTable(st); return r }(), ", ") + "\n", ""},
		{[]string{"-w", "json", "snapshot", "status", db}, 0, string(statusJSON) + "\n", ""},
		{[]string{"snapshot", "status", "--write-out=json", db}, 0, string(statusJSON) + "\n", ""},
		{[]string{"snapshot", "status", db, "-w", "fields"}, 0, `"Hash" : ` + jsonNum(st.Hash) + "\n\"Revision\" : 0\n\"Keys\" : 0\n\"Size\" : " + jsonNum(st.TotalSize) + "\n\"Version\" : \n", ""},
		{[]string{"snapshot", "status", db, "-w", "protobuf"}, 4, "", "Error: protobuf not supported as output format\n"},
		{[]string{"snapshot", "status", db, "-w", "yaml"}, 4, "", "Error: unsupported output format\n"},
		{[]string{"snapshot", "status", missing, "-w", "yaml"}, 1, "", "Error: stat " + missing + ": no such file or directory\n"},
		{[]string{"hashkv", db}, 0, jsonNum(h.Hash) + ", 1, -1\n", ""},
		{[]string{"--write-out", "json", "hashkv", db}, 0, `{"hash":` + jsonNum(h.Hash) + `,"hashRevision":1,"compactRevision":-1}` + "\n", ""},
		{[]string{"hashkv", db, "-w=fields", "--rev", "1"}, 0, `"Hash" : ` + jsonNum(h.Hash) + "\n\"Hash revision\" : 1\n\"Compact revision\" : -1\n", ""},
		{[]string{"hashkv", db, "--rev", "2"}, 1, "", "Error: mvcc: required revision is a future revision\n"},
		{[]string{"hashkv", db, "-w", "protobuf"}, 4, "", "Error: protobuf not supported as output format\n"},
		{[]string{"hashkv", db, "-w", "yaml"}, 4, "", "Error: unsupported output format\n"},
		{[]string{"hashkv", db, "--timeout", "soon"}, 2, "", "invalid value \"soon\" for flag --timeout"},
		{[]string{"hashkv", db, "-w"}, 2, "", "flag needs an argument: -w"},
	} {
		var out, errb bytes.Buffer
		code := run(tc.args, &out, &errb)
		if code != tc.code || out.String() != tc.out || !strings.HasPrefix(errb.String(), tc.err) && !strings.Contains(errb.String(), tc.err) || (tc.err == "" && errb.Len() > 0) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want %d, %q, %q", tc.args, code, out.String(), errb.String(), tc.code, tc.out, tc.err)
		}
	}
	// The table of both, through the renderer checked above.
	var out, errb bytes.Buffer
	if code := run([]string{"snapshot", "status", db, "-w", "table"}, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "┌") || !strings.Contains(out.String(), " HASH ") {
		t.Errorf("status table: %d %q %q", code, out.String(), errb.String())
	}
	// Strata's own facts are in its own formats only.
	out.Reset()
	if code := run([]string{"snapshot", "status", db, "-w", "strata-json"}, &out, &errb); code != 0 || !strings.Contains(out.String(), `"format":"strata"`) || !strings.Contains(out.String(), `"hashChecked":false`) {
		t.Errorf("strata-json: %d %q", code, out.String())
	}
	out.Reset()
	if code := run([]string{"snapshot", "status", db, "-w", "strata"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "format:      Strata (page-store image)") {
		t.Errorf("strata: %d %q", code, out.String())
	}
}

func jsonNum[T uint32 | int64](v T) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestBadInputErrors: garbage and etcd data dirs get errors naming the
// file (and the offsets the format check read, or the Strata command to
// use), never a panic.
func TestBadInputErrors(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.db")
	b := make([]byte, 32<<10)
	for i := range b {
		b[i] = byte(i*13 + 1)
	}
	os.WriteFile(garbage, b, 0o600)
	for _, args := range [][]string{{"snapshot", "status", garbage}, {"hashkv", garbage}} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 1 || !strings.HasPrefix(errb.String(), "Error: "+garbage+" is neither a Strata page store nor an etcd (bbolt) database: no bbolt magic at offset 16") {
			t.Errorf("%q: exit %d, stderr %q", args, code, errb.String())
		}
	}
	// An etcd data dir: a bbolt db at member/snap/db.
	etcdDir := filepath.Join(dir, "etcd")
	os.MkdirAll(filepath.Join(etcdDir, "member", "snap"), 0o700)
	head := make([]byte, 16<<10)
	copy(head[16:], []byte{0xed, 0xda, 0x0c, 0xed, 2, 0, 0, 0, 0, 0x10, 0, 0})
	os.WriteFile(filepath.Join(etcdDir, "member", "snap", "db"), head, 0o600)
	for _, args := range [][]string{
		{"defrag", "--data-dir", etcdDir},
		{"migrate", "--data-dir", etcdDir, "--target-version", "3.6"},
		{"snapshot", "export-etcd", "--data-dir", etcdDir, "--out", filepath.Join(dir, "x.db")},
		{"db", "check", "--data-dir", etcdDir},
	} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 1 || !strings.Contains(errb.String(), "is an etcd (bbolt) database") || !strings.Contains(errb.String(), "stratautl snapshot restore") {
			t.Errorf("%q: exit %d, stderr %q", args, code, errb.String())
		}
	}
}

// TestMigrateAndRestoreArgs: etcdutl's argument checks, with its
// messages and its bad-arguments status.
func TestMigrateAndRestoreArgs(t *testing.T) {
	db := strataSnapshotFile(t)
	for _, tc := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"migrate", "--data-dir", "x", "--target-version", "3"}, 128, "Error: wrong target version format, expected \"X.Y\", got \"3\"\n"},
		{[]string{"migrate", "--data-dir", "x", "--target-version", "3.4"}, 128, "Error: target version \"3.4\" not supported. Minimal \"3.5\"\n"},
		{[]string{"migrate", "--data-dir", "nope", "--target-version", "3.6"}, 1, "Error: stat nope/member/snap/db: no such file or directory\n"},
		{[]string{"migrate", "--target-version", "3.6"}, 2, "stratautl migrate: required flag(s) \"data-dir\" not set"},
		{[]string{"snapshot", "restore", db, "--bump-revision", "10"}, 128, "Error: --mark-compacted required if --revision-bump > 0\n"},
		{[]string{"snapshot", "restore", db, "--mark-compacted"}, 128, "Error: --mark-compacted required if --revision-bump > 0\n"},
	} {
		var out, errb bytes.Buffer
		if code := run(tc.args, &out, &errb); code != tc.code || !strings.HasPrefix(errb.String(), tc.err) {
			t.Errorf("%q: exit %d, stderr %q; want %d, %q", tc.args, code, errb.String(), tc.code, tc.err)
		}
	}
	// A restore with both, and --initial-memory-map-size (no effect):
	// the snapshot has no revision yet, so the bump is the revision.
	target := filepath.Join(t.TempDir(), "bumped")
	var out, errb bytes.Buffer
	if code := run([]string{"snapshot", "restore", db, "--skip-hash-check", "--data-dir", target, "--no-progress",
		"--bump-revision", "1000", "--mark-compacted", "--initial-memory-map-size", "1024", "-w", "json"}, &out, &errb); code != 0 {
		t.Fatalf("restore with a bump: %d %s", code, errb.String())
	}
	var sum tools.RestoreSummary
	if err := json.Unmarshal(out.Bytes(), &sum); err != nil || sum.Revision != 1000 || sum.CompactRevision != 1000 || sum.RevisionBump != 1000 {
		t.Fatalf("summary %s: %v", out.String(), err)
	}
	out.Reset()
	if code := run([]string{"hashkv", target, "-w", "json"}, &out, &errb); code != 0 || !strings.Contains(out.String(), `"hashRevision":1000,"compactRevision":1000`) {
		t.Fatalf("hashkv of the bumped data dir: %d %s %s", code, out.String(), errb.String())
	}
	// migrate on it: no stored version yet (3.5), to 3.6.
	out.Reset()
	errb.Reset()
	if code := run([]string{"migrate", "--data-dir", target, "--target-version", "3.6"}, &out, &errb); code != 0 ||
		!strings.Contains(out.String(), "storage version 3.5.0 -> 3.6.0") || !strings.Contains(errb.String(), "updated storage version new-storage-version=3.6.0") {
		t.Fatalf("migrate: %d %q %q", code, out.String(), errb.String())
	}
	out.Reset()
	if code := run([]string{"snapshot", "status", filepath.Join(target, "member", "snap", "db")}, &out, &errb); code != 0 || !strings.HasSuffix(out.String(), ", 3.6.0\n") {
		t.Fatalf("status after migrate: %d %q", code, out.String())
	}
}

// TestVersion: stratautl's version, the etcdutl it stands in for, the
// API version.
func TestVersion(t *testing.T) {
	var out, errb bytes.Buffer
	api := strings.Join(strings.Split(version.Etcd, ".")[:2], ".")
	want := "stratautl version: " + version.Strata + "\netcdutl version: " + version.Etcd + "\nAPI version: " + api + "\n"
	if code := run([]string{"version"}, &out, &errb); code != 0 || out.String() != want || !strings.HasPrefix(api, "3.") {
		t.Fatalf("version: %d %q %q", code, out.String(), errb.String())
	}
}
