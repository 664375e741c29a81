package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strata-db/strata/e2e/harness"
)

// TestKubeadmStart starts the target with the exact flag set kubeadm
// generates for a stacked etcd member (certificates made here), then the
// same member from ETCD_* variables and from a --config-file using etcd's
// transport-security keys. Each time: etcdctl with --cacert/--cert/--key
// works, without a client certificate or with one from another CA it
// fails, and /livez and /readyz on the metrics port answer ok.
func TestKubeadmStart(t *testing.T) {
	b := needBins(t)
	bin := targetBin(t, b)
	dir := t.TempDir()
	for _, d := range []string{"pki", "other"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	ca, err := harness.NewCA(filepath.Join(dir, "pki"), "etcd-ca")
	if err != nil {
		t.Fatal(err)
	}
	other, err := harness.NewCA(filepath.Join(dir, "other"), "stranger-ca")
	if err != nil {
		t.Fatal(err)
	}
	srvCert, srvKey, _ := ca.Issue("server", "node1")
	peerCert, peerKey, _ := ca.Issue("peer", "node1")
	cliCert, cliKey, _ := ca.Issue("healthcheck-client", "kube-etcd-healthcheck-client")
	strCert, strKey, _ := other.Issue("stranger", "root")
	ports, err := harness.FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	client := fmt.Sprintf("https://127.0.0.1:%d", ports[0])
	peer := fmt.Sprintf("https://127.0.0.1:%d", ports[1])
	metrics := fmt.Sprintf("http://127.0.0.1:%d", ports[2])
	settings := [][2]string{
		{"advertise-client-urls", client},
		{"cert-file", srvCert},
		{"client-cert-auth", "true"},
		{"data-dir", filepath.Join(dir, "etcd")},
		{"feature-gates", "InitialCorruptCheck=true"},
		{"initial-advertise-peer-urls", peer},
		{"initial-cluster", "node1=" + peer},
		{"key-file", srvKey},
		{"listen-client-urls", client},
		{"listen-metrics-urls", metrics},
		{"listen-peer-urls", peer},
		{"name", "node1"},
		{"peer-cert-file", peerCert},
		{"peer-client-cert-auth", "true"},
		{"peer-key-file", peerKey},
		{"peer-trusted-ca-file", ca.CertPath},
		{"snapshot-count", "10000"},
		{"trusted-ca-file", ca.CertPath},
		{"watch-progress-notify-interval", "5s"},
	}
	var flags, env []string
	for _, s := range settings {
		flags = append(flags, "--"+s[0]+"="+s[1])
		env = append(env, "ETCD_"+strings.ToUpper(strings.ReplaceAll(s[0], "-", "_"))+"="+s[1])
	}
	yaml := fmt.Sprintf(`name: node1
data-dir: %s
listen-client-urls: %s
advertise-client-urls: %s
listen-peer-urls: %s
initial-advertise-peer-urls: %s
initial-cluster: node1=%s
listen-metrics-urls: %s
snapshot-count: 10000
feature-gates: InitialCorruptCheck=true
watch-progress-notify-interval: 5000000000
client-transport-security:
  cert-file: %s
  key-file: %s
  client-cert-auth: true
  trusted-ca-file: %s
peer-transport-security:
  cert-file: %s
  key-file: %s
  client-cert-auth: true
  trusted-ca-file: %s
`, filepath.Join(dir, "etcd"), client, client, peer, peer, peer, metrics,
		srvCert, srvKey, ca.CertPath, peerCert, peerKey, ca.CertPath)
	cfgFile := filepath.Join(dir, "etcd.yaml")
	if err := os.WriteFile(cfgFile, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	modes := []struct {
		name string
		args []string
		env  []string
	}{
		{"flags", flags, nil},
		{"env", nil, env},
		{"config-file", []string{"--config-file=" + cfgFile}, nil},
	}
	for i, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			stop := startRaw(t, bin, m.args, m.env, filepath.Join(dir, m.name+".log"))
			defer stop()
			good := &harness.Ctl{Bin: b.Etcdctl, Endpoints: []string{client},
				TLS: harness.TLS{CACert: ca.CertPath, Cert: cliCert, Key: cliKey}}
			key := fmt.Sprintf("k%d", i)
			if r := good.Run("", "put", key, "v"); r.Code != 0 || strings.TrimSpace(r.Stdout) != "OK" {
				t.Fatalf("put with the client certificate: %s", r)
			}
			if r := good.Run("", "get", key, "--print-value-only"); r.Code != 0 || strings.TrimSpace(r.Stdout) != "v" {
				t.Fatalf("get with the client certificate: %s", r)
			}
			for _, bad := range []harness.TLS{{CACert: ca.CertPath}, {CACert: ca.CertPath, Cert: strCert, Key: strKey}} {
				c := &harness.Ctl{Bin: b.Etcdctl, Endpoints: []string{client}, TLS: bad}
				if r := c.Run("", "--dial-timeout=500ms", "--command-timeout=1s", "get", key); r.Code == 0 {
					t.Fatalf("get with %+v succeeded: %s", bad, r)
				}
			}
			for _, p := range []string{"/livez", "/readyz"} {
				resp, err := http.Get(metrics + p)
				if err != nil {
					t.Fatal(err)
				}
				var body bytes.Buffer
				body.ReadFrom(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || strings.TrimSpace(body.String()) != "ok" {
					t.Fatalf("%s on the metrics port: %d %q", p, resp.StatusCode, body.String())
				}
			}
		})
	}
}

// startRaw runs the server binary with exactly these args and extra env
// (the harness adds its own flags, which this test must not), waits for
// its ready line, and returns a function that stops it with SIGTERM.
func startRaw(t *testing.T, bin string, args, env []string, logPath string) func() {
	t.Helper()
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	var clean []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "ETCD_") {
			clean = append(clean, e)
		}
	}
	cmd.Env = append(clean, env...)
	cmd.Stdout = logf
	pr, pw, _ := os.Pipe()
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		sent := false
		for sc.Scan() {
			fmt.Fprintln(logf, sc.Text())
			if !sent && strings.Contains(sc.Text(), "ready to serve client requests") {
				ready <- true
				sent = true
			}
		}
		if !sent {
			ready <- false
		}
	}()
	select {
	case ok := <-ready:
		if !ok {
			cmd.Wait()
			b, _ := os.ReadFile(logPath)
			t.Fatalf("server exited before it was ready:\n%s", b)
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatal("server not ready in 30s")
	}
	return func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		logf.Close()
	}
}
