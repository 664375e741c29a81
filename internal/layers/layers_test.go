package layers

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/strata-db/strata"

// rank is the layer of each top-level tree of the module (see doc.go).
var rank = map[string]int{
	"vfs": 0, "version": 0, "internal": 0, "diskprobe": 0, "progress": 0,
	"pagestore": 1, "wal": 1, "btreeidx": 1,
	"schema": 2,
	"mvcc":   3, "raft": 3,
	"lease": 4, "auth": 4, "membership": 4,
	"etcdsnap": 5,
	"server":   6, "tools": 6, "bench": 6, "grpcproxy": 6, "tcpproxy": 6,
	"cmd": 7,
}

// allowed are imports across trees of the same rank that are deliberate,
// with the reason.
var allowed = map[string]string{
	"tools -> server/config": "snapshot restore checks its cluster flags exactly as strata does at bootstrap; " +
		"server/config imports nothing of the module but package version",
	"raft/transport -> membership": "the peer port's /members answers with the member records as etcd does; " +
		"membership imports only pagestore and schema, never raft",
	"raft/rafttest -> mvcc": "the in-memory N-member harness runs the real mvcc store as each member's state machine; " +
		"only tests import rafttest",
}

// pending are imports that another change is about to remove. Each
// entry must be deleted once the import is gone; the test fails on a
// stale entry so that the list cannot rot.
var pending = map[string]bool{}

const bbolt = "go.etcd.io/bbolt"

type pkg struct {
	ImportPath, Dir string
	Imports         []string
	TestImports     []string
	XTestImports    []string
}

// listPackages runs 'go list -json' over the whole module.
func listPackages(t *testing.T) []pkg {
	t.Helper()
	root, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	cmd := exec.Command("go", "list", "-json", "./...")
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(root)))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found only %d packages in %s", len(pkgs), cmd.Dir)
	}
	return pkgs
}

// rel is a module package's path inside the module, "" for others.
func rel(path string) string {
	if path == module {
		return "."
	}
	if r, ok := strings.CutPrefix(path, module+"/"); ok {
		return r
	}
	return ""
}

func tree(r string) string { return strings.SplitN(r, "/", 2)[0] }

// check returns why the import from -> to (module-relative paths) breaks
// the layering, or "".
func check(from, to string) string {
	ft, tt := tree(from), tree(to)
	if ft == tt {
		return ""
	}
	fr, ok := rank[ft]
	if !ok {
		return "tree " + ft + " has no rank: add it to rank in internal/layers/layers_test.go and doc.go"
	}
	tr, ok := rank[tt]
	if !ok {
		return "tree " + tt + " has no rank: add it to rank in internal/layers/layers_test.go and doc.go"
	}
	if tr < fr {
		return ""
	}
	if _, ok := allowed[from+" -> "+to]; ok {
		return ""
	}
	if _, ok := allowed[ft+" -> "+to]; ok {
		return ""
	}
	return "imports a tree of the same or a higher rank (" + ft + " is rank " + itoa(fr) + ", " + tt + " is rank " + itoa(tr) + ")"
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestImportsPointDown checks every import of every package of the
// module (tests excluded: a test may start a real server) against the
// layers of doc.go, and that only tools/ and bench/ use bbolt.
func TestImportsPointDown(t *testing.T) {
	used := map[string]bool{}
	for _, p := range listPackages(t) {
		from := rel(p.ImportPath)
		ft := tree(from)
		if _, ok := rank[ft]; !ok {
			t.Errorf("%s: tree %s has no rank: add it to rank in internal/layers/layers_test.go and doc.go", from, ft)
			continue
		}
		for _, imp := range p.Imports {
			if imp == bbolt || strings.HasPrefix(imp, bbolt+"/") {
				if ft != "tools" && ft != "bench" {
					t.Errorf("%s imports %s: only tools/ and bench/ (and tests) may use bbolt", from, imp)
				}
				continue
			}
			to := rel(imp)
			if to == "" {
				continue
			}
			edge := from + " -> " + to
			if why := check(from, to); why != "" {
				if pending[edge] {
					used[edge] = true
					continue
				}
				t.Errorf("%s: %s", edge, why)
			}
		}
	}
	for edge := range pending {
		if !used[edge] {
			t.Errorf("%s is listed as pending in layers_test.go but no longer imported: delete the entry", edge)
		}
	}
}

// TestCheckRejects makes sure the rule itself bites: imports that point
// up the layers must be refused.
func TestCheckRejects(t *testing.T) {
	for _, edge := range [][2]string{
		{"tools", "server"},
		{"cmd/stratautl/x", "server"}, // cmd may import server, see below
		{"server", "bench/disk"},
		{"bench/load", "tools/progress"},
		{"pagestore", "mvcc"},
		{"membership", "server"},
		{"etcdsnap", "tools"},
	} {
		why := check(edge[0], edge[1])
		if edge[0] == "cmd/stratautl/x" {
			if why != "" {
				t.Errorf("%s -> %s refused (%s); cmd is the top layer", edge[0], edge[1], why)
			}
			continue
		}
		if why == "" {
			t.Errorf("%s -> %s is allowed, want refused", edge[0], edge[1])
		}
	}
}

// TestToolsDoNotImportServer is the layer check in its plainest form:
// the offline tools must not link the gRPC server.
func TestToolsDoNotImportServer(t *testing.T) {
	root, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-deps", "./tools/...", "./cmd/stratautl")
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(root)))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep == module+"/server" {
			t.Errorf("tools or cmd/stratautl depends on %s", dep)
		}
	}
}
