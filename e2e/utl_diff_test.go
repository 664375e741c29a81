package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"

	"github.com/strata-db/strata/e2e/harness"
)

// The differential tests of stratautl against etcdutl 3.7.3: the same
// command lines on the same files must print the same bytes on stdout
// and stderr and exit with the same status.
//
//	make build && cd e2e && STRATA_E2E_TARGET=../bin/strata go test -count=1 -run 'TestUtlDiff' .

// utlBins returns strata and its stratautl: next to STRATA_E2E_TARGET, or
// make build's ../bin when it is unset.
func utlBins(t *testing.T) (strata, stratautl string) {
	t.Helper()
	target := os.Getenv("STRATA_E2E_TARGET")
	if target == "" {
		target = "../bin/strata"
	}
	strata, err := filepath.Abs(target)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(strata); err != nil {
		t.Fatalf("strata not built: %v (run make build, or set STRATA_E2E_TARGET)", err)
	}
	stratautl, err = harness.Stratautl(strata)
	if err != nil {
		t.Fatal(err)
	}
	return strata, stratautl
}

// toolRun is one run of etcdutl or stratautl.
type toolRun struct {
	stdout, stderr string
	code           int
}

func (r toolRun) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

func runTool(t *testing.T, bin string, args ...string) toolRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %v: %v", bin, args, err)
	}
	return toolRun{out.String(), errb.String(), code}
}

// copyFile copies a file: etcdutl's hashkv opens its file for writing
// and changes it, so each of its runs gets a fresh copy.
func copyFile(t *testing.T, src string) string {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), filepath.Base(src))
	if err := os.WriteFile(dst, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return dst
}

// fillServer writes keys over several revisions, an overwrite, deletes,
// a compaction, a lease with keys and a few more writes, and returns the
// compaction revision and the latest revision.
func fillServer(t *testing.T, ctl *harness.Ctl) (compacted, latest int64) {
	t.Helper()
	for i := 0; i < 12; i++ {
		must(t, ctl.Run("", "put", fmt.Sprintf("k%d", i%5), fmt.Sprintf("v%d", i)))
	}
	must(t, ctl.Run("", "del", "k3"))
	must(t, ctl.Run("", "put", "k3", "again"))
	must(t, ctl.Run("", "del", "k4"))
	compacted = headerRevision(t, ctl)
	must(t, ctl.Run("", "compact", strconv.FormatInt(compacted, 10)))
	grant := must(t, ctl.Run("", "lease", "grant", "600"))
	m := regexp.MustCompile(`lease ([0-9a-f]+) granted`).FindStringSubmatch(grant.Stdout)
	if m == nil {
		t.Fatalf("lease grant: %s", grant)
	}
	must(t, ctl.Run("", "put", "--lease="+m[1], "leased1", "x"))
	must(t, ctl.Run("", "put", "--lease="+m[1], "leased2", "y"))
	must(t, ctl.Run("", "put", "k0", "last"))
	must(t, ctl.Run("", "del", "k1"))
	return compacted, headerRevision(t, ctl)
}

func headerRevision(t *testing.T, ctl *harness.Ctl) int64 {
	t.Helper()
	r := must(t, ctl.Run("", "get", "nothing", "-w", "json"))
	var v struct {
		Header struct {
			Revision int64 `json:"revision"`
		} `json:"header"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &v); err != nil {
		t.Fatalf("get -w json: %v in %s", err, r.Stdout)
	}
	return v.Header.Revision
}

// compareTools runs etcdutl and stratautl with the same arguments (the
// file argument fresh for each etcdutl run) and requires the same
// stdout, stderr and exit status.
func compareTools(t *testing.T, etcdutl, stratautl, file string, args ...string) toolRun {
	t.Helper()
	with := func(f string) []string {
		out := make([]string, len(args))
		for i, a := range args {
			if a == "FILE" {
				a = f
			}
			out[i] = a
		}
		return out
	}
	ecopy := file
	if _, err := os.Stat(file); err == nil {
		ecopy = copyFile(t, file)
	}
	e := runTool(t, etcdutl, with(ecopy)...)
	s := runTool(t, stratautl, with(file)...)
	// Both name the file they were given in their errors: the copy's
	// directory is not the original's.
	e.stderr = strings.ReplaceAll(e.stderr, filepath.Dir(ecopy), "<dir>")
	s.stderr = strings.ReplaceAll(s.stderr, filepath.Dir(file), "<dir>")
	if e != s {
		t.Errorf("%v:\netcdutl:\n%s\nstratautl:\n%s", args, e, s)
	}
	return s
}

// TestUtlDiffStatusAndHashKV: 'snapshot status' and 'hashkv' of an etcd
// snapshot.db from a real etcd (keys of several revisions, deletes, a
// compaction, a lease), in every output format, with and without --rev
// (the latest, one between, the compaction, below it, past the latest),
// and of a missing file: stratautl's stdout, stderr and exit status are
// etcdutl's. The same for the snapshot strata streams in etcd's format;
// and stratautl reads Strata's own snapshot format of the same state
// with the same revision, keys, version and HashKV.
func TestUtlDiffStatusAndHashKV(t *testing.T) {
	b := needBins(t)
	strata, stratautl := utlBins(t)
	work := t.TempDir()

	etcd := startServer(t, b.Etcd, "etcd")
	ectl := &harness.Ctl{Bin: b.Etcdctl, Endpoints: []string{etcd.ClientURL}}
	compacted, latest := fillServer(t, ectl)
	etcdSnap := filepath.Join(work, "etcd", "snapshot.db")
	os.MkdirAll(filepath.Dir(etcdSnap), 0o700)
	must(t, ectl.Run("", "snapshot", "save", etcdSnap))
	wantHashKV := endpointHashKV(t, ectl)

	srv := startServer(t, strata, "strata")
	sctl := &harness.Ctl{Bin: b.Etcdctl, Endpoints: []string{srv.ClientURL}}
	if c, l := fillServer(t, sctl); c != compacted || l != latest {
		t.Fatalf("strata: compacted %d, latest %d; etcd %d, %d", c, l, compacted, latest)
	}
	strataEtcdSnap := filepath.Join(work, "strata-etcd", "snapshot.db")
	os.MkdirAll(filepath.Dir(strataEtcdSnap), 0o700)
	must(t, sctl.Run("", "snapshot", "save", strataEtcdSnap))
	strataImage := filepath.Join(work, "strata-image", "snapshot.db")
	saveStrataFormat(t, srv.ClientURL, strataImage)
	strataHashKV := endpointHashKV(t, sctl)

	formats := []string{"simple", "table", "json", "fields", "protobuf", "yaml"}
	revs := [][]string{nil, {"--rev", fmt.Sprint(latest)}, {"--rev", fmt.Sprint(compacted + 2)}, {"--rev", fmt.Sprint(compacted)},
		{"--rev", fmt.Sprint(compacted - 1)}, {"--rev", fmt.Sprint(latest + 5)}}
	for name, snap := range map[string]string{"etcd": etcdSnap, "strata (etcd format)": strataEtcdSnap} {
		t.Run(name, func(t *testing.T) {
			for _, f := range formats {
				compareTools(t, b.Etcdutl, stratautl, snap, "snapshot", "status", "FILE", "-w", f)
				for _, r := range revs {
					compareTools(t, b.Etcdutl, stratautl, snap, append([]string{"hashkv", "FILE", "-w", f}, r...)...)
				}
			}
			// Global flags before the command, etcdutl's spelling.
			compareTools(t, b.Etcdutl, stratautl, snap, "--write-out=json", "--timeout", "5s", "snapshot", "status", "FILE")
			compareTools(t, b.Etcdutl, stratautl, snap, "-w", "table", "hashkv", "FILE", "--rev", fmt.Sprint(latest-1))
			compareTools(t, b.Etcdutl, stratautl, filepath.Join(filepath.Dir(snap), "missing.db"), "snapshot", "status", "FILE")
		})
	}
	missing := filepath.Join(work, "missing.db")
	if e, s := runTool(t, b.Etcdutl, "hashkv", missing), runTool(t, stratautl, "hashkv", missing); e != s {
		t.Errorf("hashkv of a missing file:\netcdutl:\n%s\nstratautl:\n%s", e, s)
	}

	// The hash of the live key space equals the servers' own HashKV.
	for _, c := range []struct {
		snap string
		want hashKVAnswer
	}{{etcdSnap, wantHashKV}, {strataEtcdSnap, strataHashKV}, {strataImage, strataHashKV}} {
		var got hashKVAnswer
		r := runTool(t, stratautl, "hashkv", c.snap, "-w", "json")
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &got) != nil || got != c.want {
			t.Errorf("stratautl hashkv %s: %s; the server's endpoint hashkv says %+v", c.snap, r, c.want)
		}
	}

	// Strata's own format: the same columns; revision, keys and version
	// are the state's, the hash and size are the image's.
	type status struct {
		Hash      uint32 `json:"hash"`
		Revision  int64  `json:"revision"`
		TotalKey  int    `json:"totalKey"`
		TotalSize int64  `json:"totalSize"`
		Version   string `json:"version"`
	}
	read := func(path string) status {
		r := runTool(t, stratautl, "snapshot", "status", path, "-w", "json")
		var s status
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &s) != nil {
			t.Fatalf("stratautl snapshot status %s: %s", path, r)
		}
		return s
	}
	img, etcdFmt := read(strataImage), read(strataEtcdSnap)
	if img.Revision != etcdFmt.Revision || img.TotalKey != etcdFmt.TotalKey || img.Version != etcdFmt.Version || img.Version == "" || img.Hash == 0 {
		t.Errorf("Strata's format: %+v; etcd's format of the same state: %+v", img, etcdFmt)
	}
	for _, f := range []string{"simple", "table", "fields"} {
		if r := runTool(t, stratautl, "snapshot", "status", strataImage, "-w", f); r.code != 0 || !strings.Contains(r.stdout, fmt.Sprint(img.Revision)) {
			t.Errorf("status -w %s of Strata's format: %s", f, r)
		}
	}
	if r := runTool(t, stratautl, "snapshot", "status", strataImage, "-w", "strata"); r.code != 0 || !strings.Contains(r.stdout, "Strata (page-store image)") ||
		!strings.Contains(r.stdout, "present and matches the contents") {
		t.Errorf("status -w strata of Strata's format: %s", r)
	}
	t.Logf("etcd: compacted at %d, latest %d; Strata's image %+v", compacted, latest, img)
}

type hashKVAnswer struct {
	Hash            uint32 `json:"hash"`
	HashRevision    int64  `json:"hashRevision"`
	CompactRevision int64  `json:"compactRevision"`
}

// endpointHashKV is 'etcdctl endpoint hashkv' of the latest revision.
func endpointHashKV(t *testing.T, ctl *harness.Ctl) hashKVAnswer {
	t.Helper()
	r := must(t, ctl.Run("", "endpoint", "hashkv", "-w", "json"))
	var v []struct {
		HashKV struct {
			Hash            uint32 `json:"hash"`
			CompactRevision int64  `json:"compact_revision"`
			HashRevision    int64  `json:"hash_revision"`
		} `json:"HashKV"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &v); err != nil || len(v) != 1 {
		t.Fatalf("endpoint hashkv: %v in %s", err, r.Stdout)
	}
	return hashKVAnswer{v[0].HashKV.Hash, v[0].HashKV.HashRevision, v[0].HashKV.CompactRevision}
}

// saveStrataFormat saves a snapshot in Strata's own format (the gRPC
// metadata strata-snapshot-format: strata asks for it).
func saveStrataFormat(t *testing.T, endpoint, path string) {
	t.Helper()
	os.MkdirAll(filepath.Dir(path), 0o700)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rc, err := cli.Snapshot(metadata.AppendToOutgoingContext(ctx, "strata-snapshot-format", "strata"))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, rc); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestUtlDiffRestoreBumpRevision restores one etcd snapshot with
// --bump-revision 1000000 --mark-compacted into an etcd data dir
// (etcdutl) and a Strata data dir (stratautl), starts etcd and strata on
// them, and requires the same answers from both: the keys and header
// revision, endpoint status, reads, a watch and a compaction at the old
// revision refused as compacted, a put continuing from the bumped
// revision, and HashKV's revisions.
func TestUtlDiffRestoreBumpRevision(t *testing.T) {
	b := needBins(t)
	strata, stratautl := utlBins(t)
	work := t.TempDir()
	etcd := startServer(t, b.Etcd, "source")
	ctl := &harness.Ctl{Bin: b.Etcdctl, Endpoints: []string{etcd.ClientURL}}
	_, old := fillServer(t, ctl)
	snap := filepath.Join(work, "snapshot.db")
	must(t, ctl.Run("", "snapshot", "save", snap))
	if err := etcd.Stop(); err != nil {
		t.Fatal(err)
	}
	const bump = 1000000

	type side struct {
		name string
		srv  *harness.Server
		ctl  *harness.Ctl
		norm *harness.Normalizer
	}
	var sides []*side
	for _, c := range []struct{ name, server, tool string }{{"etcd", b.Etcd, b.Etcdutl}, {"strata", strata, stratautl}} {
		srv, err := harness.NewServer(harness.ServerConfig{Bin: c.server, Dir: filepath.Join(work, c.name)})
		if err != nil {
			t.Fatal(err)
		}
		r := runTool(t, c.tool, "snapshot", "restore", snap, "--data-dir", srv.DataDir, "--name", srv.Name(),
			"--initial-cluster", srv.Name()+"="+srv.PeerURL, "--initial-cluster-token", harness.ClusterToken,
			"--initial-advertise-peer-urls", srv.PeerURL, "--bump-revision", strconv.Itoa(bump), "--mark-compacted")
		if r.code != 0 {
			t.Fatalf("%s snapshot restore: %s", filepath.Base(c.tool), r)
		}
		if err := srv.Start(); err != nil {
			t.Fatalf("%s on the restored dir: %v\n%s", c.name, err, srv.LogTail(30))
		}
		t.Cleanup(func() { srv.Stop() })
		n := harness.NewNormalizer()
		n.Literal(srv.ClientURL, "<client>")
		n.Literal(srv.ClientAddr, "<clientaddr>")
		n.Literal(srv.PeerURL, "<peer>")
		n.Literal(srv.DataDir, "<datadir>")
		sides = append(sides, &side{c.name, srv, &harness.Ctl{Bin: b.Etcdctl, Endpoints: []string{srv.ClientURL}}, n})
	}
	// Both refuse the mismatched flags alike.
	for _, args := range [][]string{{"--bump-revision", "5"}, {"--mark-compacted"}} {
		base := []string{"snapshot", "restore", snap, "--data-dir", filepath.Join(work, "refused")}
		e, s := runTool(t, b.Etcdutl, append(base, args...)...), runTool(t, stratautl, append(base, args...)...)
		if e.code != s.code || e.stderr != s.stderr || s.code != 128 {
			t.Errorf("restore %v:\netcdutl:\n%s\nstratautl:\n%s", args, e, s)
		}
	}

	bumped := old + bump
	oldRev := strconv.FormatInt(old, 10)
	steps := [][]string{
		{"get", "--prefix", "", "-w", "json"},
		{"endpoint", "status", "-w", "json"},
		{"get", "k0", "--rev", oldRev},
		{"get", "k0", "--rev", strconv.FormatInt(bumped-1, 10)},
		{"get", "k0", "--rev", strconv.FormatInt(bumped, 10), "-w", "json"},
		{"watch", "--rev", oldRev, "k0"},
		{"compact", oldRev},
		{"put", "after", "restore", "-w", "json"},
		{"get", "--prefix", "", "-w", "json"},
		{"endpoint", "hashkv", "-w", "json"},
		{"watch", "--rev", strconv.FormatInt(bumped, 10), "after"},
		{"compact", strconv.FormatInt(bumped+1, 10)},
		{"get", "after", "--rev", strconv.FormatInt(bumped, 10), "-w", "json"},
	}
	var transcripts [2]strings.Builder
	for _, args := range steps {
		for i, s := range sides {
			c := *s.ctl
			if args[0] == "watch" {
				// A watch from a compacted revision is canceled by the
				// server; one from a live revision is stopped by the
				// timeout, with what it printed.
				c.Timeout = 3 * time.Second
			}
			r := c.Run("", args...)
			if r.TimedOut {
				r.Code, r.Signal = 0, "timeout"
			}
			fmt.Fprintf(&transcripts[i], "$ etcdctl %s\n%s", strings.Join(args, " "), s.norm.Normalize(r.Stdout))
			for _, ln := range strings.Split(strings.TrimSpace(s.norm.Normalize(r.Stderr)), "\n") {
				if ln != "" {
					fmt.Fprintf(&transcripts[i], "! %s\n", ln)
				}
			}
			fmt.Fprintf(&transcripts[i], "exit %d %s\n", r.Code, r.Signal)
		}
	}
	a, c := transcripts[0].String(), transcripts[1].String()
	if a != c {
		t.Fatalf("etcd and strata differ after the same bumped restore:\n%s", harness.UnifiedDiff("etcd", "strata", a, c))
	}
	for _, want := range []string{fmt.Sprintf(`"revision":%d`, bumped+1), "required revision has been compacted", "watch was canceled"} {
		if !strings.Contains(a, want) {
			t.Errorf("the transcript lacks %q:\n%s", want, a)
		}
	}
	t.Logf("snapshot at %d, both at %d after the bump:\n%s", old, bumped, a)
}
