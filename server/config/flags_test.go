package config

import (
	"bytes"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// flagCase is one flag with a value etcd would accept, plus any flags it
// needs to pass validation on its own.
type flagCase struct {
	value string   // "" = bare bool flag
	extra []string // companion args
}

// everyFlag is the full list of flags etcd 3.7.3, 3.6.16 and 3.5.35
// register for the server (embed.Config.AddFlags and etcdmain.newConfig,
// including its ignored list), plus Strata's own. It is hard-coded so
// TestEveryFlagAccepted needs no module cache; TestFlagListMatchesEtcdSource
// checks it against etcd's sources (fetched by make etcd-src).
var everyFlag = map[string]flagCase{
	// etcd 3.7.3
	"advertise-client-urls":                {value: "http://10.0.0.1:2379"},
	"auth-token":                           {value: "simple"},
	"auth-token-ttl":                       {value: "600"},
	"auto-compaction-mode":                 {value: "revision"},
	"auto-compaction-retention":            {value: "1h"},
	"auto-tls":                             {value: "true"},
	"backend-batch-interval":               {value: "50ms"},
	"backend-batch-limit":                  {value: "500"},
	"backend-bbolt-freelist-type":          {value: "map"},
	"bcrypt-cost":                          {value: "12"},
	"bootstrap-defrag-threshold-megabytes": {value: "100"},
	"cert-file":                            {value: "/c.pem", extra: []string{"--key-file=/k.pem"}},
	"cipher-suites":                        {value: "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"},
	"client-cert-allowed-hostname":         {value: "client.example.com"},
	"client-cert-auth":                     {value: "true"},
	"client-cert-file":                     {value: "/cc.pem"},
	"client-crl-file":                      {value: "/crl.pem"},
	"client-key-file":                      {value: "/ck.pem"},
	"compact-hash-check-time":              {value: "2m"},
	"compaction-batch-limit":               {value: "2000"},
	"compaction-sleep-interval":            {value: "20ms"},
	"config-file":                          {value: "@file"},
	"corrupt-check-time":                   {value: "5m"},
	"cors":                                 {value: "http://example.com:8080"},
	"data-dir":                             {value: "/var/lib/strata"},
	"discovery-cacert":                     {value: "/ca.pem"},
	"discovery-cert":                       {value: "/c.pem"},
	"discovery-dial-timeout":               {value: "3s"},
	"discovery-endpoints":                  {value: "http://10.0.0.9:2379", extra: []string{"--discovery-token=t"}},
	"discovery-fallback":                   {value: "exit"},
	"discovery-insecure-skip-tls-verify":   {value: "true"},
	"discovery-insecure-transport":         {value: "false"},
	"discovery-keepalive-time":             {value: "3s"},
	"discovery-keepalive-timeout":          {value: "7s"},
	"discovery-key":                        {value: "/k.pem"},
	"discovery-password":                   {value: "pw"},
	"discovery-request-timeout":            {value: "6s"},
	"discovery-srv":                        {value: "example.com"},
	"discovery-srv-name":                   {value: "prod", extra: []string{"--discovery-srv=example.com"}},
	"discovery-token":                      {value: "t", extra: []string{"--discovery-endpoints=http://10.0.0.9:2379"}},
	"discovery-user":                       {value: "u"},
	"distributed-tracing-address":          {value: "localhost:4318"},
	"distributed-tracing-instance-id":      {value: "i1"},
	"distributed-tracing-sampling-rate":    {value: "100"},
	"distributed-tracing-service-name":     {value: "strata"},
	"downgrade-check-time":                 {value: "10s"},
	"election-timeout":                     {value: "2000"},
	"enable-distributed-tracing":           {value: "true"},
	"enable-grpc-gateway":                  {value: "false"},
	"enable-log-rotation":                  {value: "true", extra: []string{"--log-outputs=/tmp/strata.log"}},
	"enable-pprof":                         {value: ""},
	"feature-gates":                        {value: "InitialCorruptCheck=true,CompactHashCheck=true"},
	"force-new-cluster":                    {value: "true"},
	"grpc-keepalive-interval":              {value: "1h"},
	"grpc-keepalive-min-time":              {value: "10s"},
	"grpc-keepalive-timeout":               {value: "30s"},
	"heartbeat-interval":                   {value: "200"},
	"host-whitelist":                       {value: "localhost,127.0.0.1"},
	"initial-advertise-peer-urls":          {value: "http://10.0.0.1:2380", extra: []string{"--initial-cluster=default=http://10.0.0.1:2380"}},
	"initial-cluster":                      {value: "default=http://localhost:2380,b=http://10.0.0.2:2380"},
	"initial-cluster-state":                {value: "existing"},
	"initial-cluster-token":                {value: "tok"},
	"initial-election-tick-advance":        {value: "false"},
	"key-file":                             {value: "/k.pem", extra: []string{"--cert-file=/c.pem"}},
	"listen-client-http-urls":              {value: "http://127.0.0.1:2382"},
	"listen-client-urls":                   {value: "http://0.0.0.0:2379", extra: []string{"--advertise-client-urls=http://10.0.0.1:2379"}},
	"listen-metrics-urls":                  {value: "http://127.0.0.1:2381"},
	"listen-peer-urls":                     {value: "http://0.0.0.0:2380"},
	"log-format":                           {value: "console"},
	"log-level":                            {value: "debug"},
	"log-outputs":                          {value: "stdout"},
	"log-rotation-config-json":             {value: `{"maxsize": 10}`},
	"logger":                               {value: "zap"},
	"max-concurrent-streams":               {value: "100"},
	"max-learners":                         {value: "2"},
	"max-request-bytes":                    {value: "2097152"},
	"max-snapshots":                        {value: "3"},
	"max-txn-ops":                          {value: "256"},
	"max-wals":                             {value: "10"},
	"memory-mlock":                         {value: "true"},
	"metrics":                              {value: "extensive"},
	"name":                                 {value: "n1"},
	"peer-auto-tls":                        {value: "true"},
	"peer-cert-allowed-cn":                 {value: "etcd-peer"},
	"peer-cert-allowed-hostname":           {value: "peer.example.com"},
	"peer-cert-file":                       {value: "/p.pem", extra: []string{"--peer-key-file=/pk.pem"}},
	"peer-client-cert-auth":                {value: "true"},
	"peer-client-cert-file":                {value: "/pc.pem"},
	"peer-client-key-file":                 {value: "/pck.pem"},
	"peer-crl-file":                        {value: "/pcrl.pem"},
	"peer-key-file":                        {value: "/pk.pem", extra: []string{"--peer-cert-file=/p.pem"}},
	"peer-skip-client-san-verification":    {value: "true"},
	"peer-trusted-ca-file":                 {value: "/pca.pem"},
	"pre-vote":                             {value: "false"},
	"quota-backend-bytes":                  {value: "8589934592"},
	"raft-read-timeout":                    {value: "7s"},
	"raft-write-timeout":                   {value: "7s"},
	"self-signed-cert-validity":            {value: "2"},
	"snapshot-catchup-entries":             {value: "6000"},
	"snapshot-count":                       {value: "5000"},
	"socket-reuse-address":                 {value: "true"},
	"socket-reuse-port":                    {value: "true"},
	"strict-reconfig-check":                {value: "false"},
	"tls-max-version":                      {value: "TLS1.3"},
	"tls-min-version":                      {value: "TLS1.3"},
	"trusted-ca-file":                      {value: "/ca.pem"},
	"unsafe-no-fsync":                      {value: "true"},
	"v2-deprecation":                       {value: "write-only"},
	"version":                              {value: ""},
	"wal-dir":                              {value: "/wal"},
	"warning-apply-duration":               {value: "200ms"},
	"warning-unary-request-duration":       {value: "500ms"},
	"watch-progress-notify-interval":       {value: "5s"},
	// etcdmain's ignored flags
	"cluster-active-size": {}, "cluster-remove-delay": {}, "cluster-sync-interval": {},
	"config": {}, "force": {}, "max-result-buffer": {value: "1"}, "max-retry-attempts": {value: "1"},
	"peer-heartbeat-interval": {value: "1"}, "peer-election-timeout": {value: "1"},
	"retry-interval": {value: "1"}, "snapshot": {}, "v": {}, "vv": {},
	"test.coverprofile": {value: "x"}, "test.outputdir": {value: "x"},
	// 3.5/3.6 experimental spellings
	"experimental-bootstrap-defrag-threshold-megabytes": {value: "100"},
	"experimental-compact-hash-check-enabled":           {value: "true"},
	"experimental-compact-hash-check-time":              {value: "2m"},
	"experimental-compaction-batch-limit":               {value: "2000"},
	"experimental-compaction-sleep-interval":            {value: "20ms"},
	"experimental-corrupt-check-time":                   {value: "5m"},
	"experimental-distributed-tracing-address":          {value: "localhost:4318"},
	"experimental-distributed-tracing-instance-id":      {value: "i1"},
	"experimental-distributed-tracing-sampling-rate":    {value: "100"},
	"experimental-distributed-tracing-service-name":     {value: "strata"},
	"experimental-downgrade-check-time":                 {value: "10s"},
	"experimental-enable-distributed-tracing":           {value: "true"},
	"experimental-enable-lease-checkpoint":              {value: "true"},
	"experimental-enable-lease-checkpoint-persist":      {value: "true", extra: []string{"--experimental-enable-lease-checkpoint"}},
	"experimental-initial-corrupt-check":                {value: "true"},
	"experimental-memory-mlock":                         {value: "true"},
	"experimental-peer-skip-client-san-verification":    {value: "true"},
	"experimental-snapshot-catchup-entries":             {value: "6000"},
	"experimental-stop-grpc-service-on-defrag":          {value: "true"},
	"experimental-txn-mode-write-with-shared-buffer":    {value: "false"},
	"experimental-warning-apply-duration":               {value: "200ms"},
	"experimental-warning-unary-request-duration":       {value: "500ms"},
	"experimental-watch-progress-notify-interval":       {value: "5s"},
	// 3.5-only flags removed in 3.6
	"enable-v2":                {value: "false"},
	"experimental-enable-v2v3": {value: "/v2/"},
	"proxy":                    {value: "off"},
	"proxy-dial-timeout":       {value: "1000"},
	"proxy-failure-wait":       {value: "5000"},
	"proxy-read-timeout":       {value: "0"},
	"proxy-refresh-interval":   {value: "30000"},
	"proxy-write-timeout":      {value: "5000"},
	"discovery":                {value: ""},
	"discovery-proxy":          {value: "http://proxy:8080"},
	// Strata
	"disk-probe":            {value: "false"},
	"adaptive-procs":        {value: "false"},
	"backend-backlog-bytes": {value: "16777216"},
	"index-base-records":    {value: "1000"},
	"discovery-srv-server":  {value: "127.0.0.1:5353"},
}

func TestEveryFlagAccepted(t *testing.T) {
	cfgFile := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(cfgFile, []byte("name: fromfile\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, name := range slices.Sorted(mapKeysOf(everyFlag)) {
		fc := everyFlag[name]
		for _, dash := range []string{"-", "--"} {
			arg := dash + name
			switch {
			case fc.value == "@file":
				arg += "=" + cfgFile
			case fc.value != "" || name == "discovery":
				arg += "=" + fc.value
			}
			args := append([]string{arg}, fc.extra...)
			var stderr bytes.Buffer
			c, err := Parse(args, nil, &stderr)
			if err != nil {
				t.Errorf("Parse(%q): %v\n%s", args, err, stderr.String())
				continue
			}
			if strings.Contains(stderr.String(), "flag provided but not defined") {
				t.Errorf("Parse(%q) printed %s", args, stderr.String())
			}
			_ = c
		}
	}
}

// TestFlagsRegistered checks the FlagSet against the table both ways, so a
// flag added to one and not the other fails here.
func TestFlagsRegistered(t *testing.T) {
	fs := newFlagSet(Default(), newParseState(), &bytes.Buffer{})
	for name := range everyFlag {
		if fs.Lookup(name) == nil {
			t.Errorf("flag --%s not registered", name)
		}
	}
	var extra []string
	fs.VisitAll(func(f *flagT) {
		if _, ok := everyFlag[f.Name]; !ok {
			extra = append(extra, f.Name)
		}
	})
	if len(extra) > 0 {
		t.Errorf("registered but missing from the test table: %v", extra)
	}
}

// etcdSources are the etcd server releases whose flag registrations
// TestFlagListMatchesEtcdSource reads: 3.7.3, whose flags Strata takes, and
// the last 3.6 and 3.5 releases, for the --experimental-* spellings (and
// 3.5's removed flags) that existing configurations still use. `make unit`
// fetches them first (make etcd-src); the list there must match.
var etcdSources = []struct {
	version string
	// minFlags guards the extraction: fewer names than this means the
	// parser no longer finds etcd's registrations.
	minFlags int
	// experimental: the release registers --experimental-* flags.
	experimental bool
}{
	{"v3.7.3", 110, false},
	{"v3.6.16", 110, true},
	{"v3.5.35", 110, true},
}

// TestFlagListMatchesEtcdSource extracts the flag names etcd registers from
// its sources in the module cache and requires each to be in everyFlag.
// The sources are a prerequisite, not an option: without them the test
// fails and says how to fetch them (a skip here went unnoticed on every
// fresh machine).
func TestFlagListMatchesEtcdSource(t *testing.T) {
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatalf("go env GOMODCACHE: %v (the go command is needed to find etcd's sources)", err)
	}
	cache := strings.TrimSpace(string(out))
	for _, src := range etcdSources {
		v := src.version
		dir := filepath.Join(cache, "go.etcd.io", "etcd", "server", "v3@"+v)
		var names []string
		for _, f := range []string{"embed/config.go", "etcdmain/config.go"} {
			path := filepath.Join(dir, f)
			ns, err := etcdFlagNames(path)
			if errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("etcd server %s sources missing (%s): run `make etcd-src`, or go mod download go.etcd.io/etcd/server/v3@%s", v, path, v)
			}
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			names = append(names, ns...)
		}
		t.Logf("etcd server %s: %d flag registrations", v, len(names))
		experimental := 0
		for _, n := range names {
			if strings.HasPrefix(n, "experimental-") {
				experimental++
			}
			if _, ok := everyFlag[n]; !ok {
				t.Errorf("etcd %s flag --%s is not accepted", v, n)
			}
		}
		if len(names) < src.minFlags {
			t.Errorf("only %d flags extracted from etcd %s, want at least %d; extraction broken?", len(names), v, src.minFlags)
		}
		if src.experimental && experimental == 0 {
			t.Errorf("no --experimental-* flag extracted from etcd %s; extraction broken?", v)
		}
	}
}

// etcdFlagNames finds the string-literal names in fs.XxxVar(&v, "name", ...)
// and fs.Var(value, "name", ...) calls, the entries of the "ignored" list,
// and --feature-gates, registered through a constant.
func etcdFlagNames(path string) ([]string, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f, err := parser.ParseFile(token.NewFileSet(), path, src, 0)
	if err != nil {
		return nil, err
	}
	var names []string
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			sel, ok := n.Fun.(*ast.SelectorExpr)
			if !ok || len(n.Args) < 2 {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); !ok || id.Name != "fs" {
				return true
			}
			if lit, ok := n.Args[1].(*ast.BasicLit); ok && lit.Kind == token.STRING {
				s, _ := strconv.Unquote(lit.Value)
				names = append(names, s)
			}
		case *ast.ValueSpec:
			for i, id := range n.Names {
				if id.Name != "ignored" || i >= len(n.Values) {
					continue
				}
				if cl, ok := n.Values[i].(*ast.CompositeLit); ok {
					for _, e := range cl.Elts {
						if lit, ok := e.(*ast.BasicLit); ok {
							s, _ := strconv.Unquote(lit.Value)
							names = append(names, s)
						}
					}
				}
			}
		}
		return true
	})
	if bytes.Contains(src, []byte("ServerFeatureGateFlagName)")) {
		names = append(names, "feature-gates")
	}
	return names, nil
}

// TestFeatureGateList checks the gates etcd_server_feature_enabled lists:
// every gate with its stage and effective value, and AllAlpha/AllBeta as
// given (they are not derived from the gates they flip).
func TestFeatureGateList(t *testing.T) {
	list := func(c *Config) map[string]FeatureGate {
		m := map[string]FeatureGate{}
		for _, g := range c.FeatureGateList() {
			m[g.Name] = g
		}
		return m
	}
	c, _ := mustParse(t, nil, nil)
	got := list(c)
	if len(got) != len(knownFeatures)+2 {
		t.Fatalf("%d gates listed, want %d", len(got), len(knownFeatures)+2)
	}
	for name, want := range map[string]FeatureGate{
		"AllAlpha":           {"AllAlpha", "ALPHA", false},
		"AllBeta":            {"AllBeta", "BETA", false}, // every beta gate is on by default, AllBeta is not set
		"FastLeaseKeepAlive": {"FastLeaseKeepAlive", "BETA", true},
		"LeaseCheckpoint":    {"LeaseCheckpoint", "ALPHA", false},
	} {
		if got[name] != want {
			t.Errorf("default %s: %+v, want %+v", name, got[name], want)
		}
	}
	c, _ = mustParse(t, []string{"--feature-gates=AllAlpha=true,CompactHashCheck=false"}, nil)
	got = list(c)
	if !got["AllAlpha"].Enabled || !got["LeaseCheckpoint"].Enabled || got["CompactHashCheck"].Enabled || got["AllBeta"].Enabled {
		t.Errorf("AllAlpha=true,CompactHashCheck=false: %+v", got)
	}
}
