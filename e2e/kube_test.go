//go:build kube

package e2e

// Kubernetes, the part that needs a kube-apiserver:
// `make k8s` builds kube-apiserver and kubectl from the Go module proxy
// (e2e/kubebuild pins the release) and runs this test with -tags
// helm,kube. A real kube-apiserver stores its objects on a Strata member
// and:
//   - accepts every object the chart renders (3 and 5 members, with and
//     without mTLS) on `kubectl apply --dry-run=server`, and the
//     ServiceMonitor once Prometheus Operator's CRD is installed;
//   - serves the StatefulSet that the scale-down hook reads: a pod
//     scaled away ('kubectl scale' below its ordinal) removes its member
//     through the chart's own ServiceAccount token and RBAC Role, a pod
//     that is only restarting keeps it, a token without the Role is
//     refused, and a deleted StatefulSet removes nothing.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/strata-db/strata/e2e/harness"
	"github.com/strata-db/strata/internal/poll"
)

// kubeBins are kube-apiserver and kubectl from STRATA_KUBE_BIN.
func kubeBins(t *testing.T) (apiserver, kubectl string) {
	dir := os.Getenv("STRATA_KUBE_BIN")
	if dir == "" {
		t.Fatal("set STRATA_KUBE_BIN to a directory with kube-apiserver and kubectl (make k8s builds them)")
	}
	apiserver, kubectl = filepath.Join(dir, "kube-apiserver"), filepath.Join(dir, "kubectl")
	for _, b := range []string{apiserver, kubectl} {
		if _, err := os.Stat(b); err != nil {
			t.Fatalf("%v (make k8s builds it)", err)
		}
	}
	return apiserver, kubectl
}

// kubeAPI is a kube-apiserver on a Strata member, and kubectl for it.
type kubeAPI struct {
	t          *testing.T
	URL        string
	CAFile     string
	kubectl    string
	kubeconfig string
	log        string
}

const kubeAdminToken = "strata-e2e-admin-token"

func startKubeAPI(t *testing.T, strata string) *kubeAPI {
	apiserverBin, kubectl := kubeBins(t)
	dir := t.TempDir()
	store, err := harness.NewServer(harness.ServerConfig{Bin: strata, Name: "kube-store", Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Stop() })
	ca, err := harness.NewCA(dir, "kube")
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.Issue("apiserver", "kube-apiserver")
	if err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(kubeAdminToken+`,admin,admin,"system:masters"`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ports, err := harness.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	k := &kubeAPI{t: t, URL: "https://127.0.0.1:" + strconv.Itoa(ports[0]), CAFile: ca.CertPath,
		kubectl: kubectl, kubeconfig: filepath.Join(dir, "kubeconfig"), log: filepath.Join(dir, "kube-apiserver.log")}
	logf, err := os.Create(k.log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(apiserverBin,
		"--etcd-servers="+store.ClientURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port="+strconv.Itoa(ports[0]),
		"--tls-cert-file="+cert, "--tls-private-key-file="+key,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+key, "--service-account-signing-key-file="+key,
		"--service-cluster-ip-range=10.96.0.0/16",
		// No Service endpoints for itself: it listens on loopback only.
		"--endpoint-reconciler-type=none",
		"--token-auth-file="+tokens, "--authorization-mode=RBAC", "--anonymous-auth=false",
		"--cert-dir="+filepath.Join(dir, "certs"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() {
			b, _ := os.ReadFile(k.log)
			lines := strings.Split(string(b), "\n")
			if len(lines) > 60 {
				lines = lines[len(lines)-60:]
			}
			t.Logf("kube-apiserver log (tail):\n%s", strings.Join(lines, "\n"))
		}
	})
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster: {server: %q, certificate-authority: %q}
users:
- name: admin
  user: {token: %q}
contexts:
- name: e2e
  context: {cluster: e2e, user: admin}
current-context: e2e
`, k.URL, ca.CertPath, kubeAdminToken)
	if err := os.WriteFile(k.kubeconfig, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	// Ready once /readyz says so and the default namespace exists.
	poll.Until(t, "kube-apiserver on Strata to be ready", func() bool {
		select {
		case <-exited:
			t.Fatalf("kube-apiserver exited; log in %s", k.log)
		default:
		}
		_, err := k.run("get", "--raw=/readyz")
		if err != nil {
			return false
		}
		_, err = k.run("get", "namespace", "default")
		return err == nil
	})
	return k
}

// run is kubectl with the admin kubeconfig.
func (k *kubeAPI) run(args ...string) (string, error) {
	cmd := exec.Command(k.kubectl, append([]string{"--kubeconfig=" + k.kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (k *kubeAPI) must(args ...string) string {
	k.t.Helper()
	out, err := k.run(args...)
	if err != nil {
		k.t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// helmRender renders the chart as release db in namespace ns.
func helmRender(t *testing.T, set ...string) string {
	helm := os.Getenv("STRATA_HELM")
	if helm == "" {
		t.Fatal("set STRATA_HELM to a helm binary (make k8s builds one)")
	}
	args := []string{"template", "db", "../deploy/helm/strata", "--namespace", "ns"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out, err := exec.Command(helm, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("helm template %v: %v\n%s", set, err, out)
	}
	return string(out)
}

func writeTemp(t *testing.T, name, content string) string {
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// operatorCRD is a CRD file of Prometheus Operator's module.
func operatorCRD(t *testing.T, file string) string {
	return filepath.Join(moduleDir(t, "github.com/prometheus-operator/prometheus-operator@v0.85.0"), "example", "prometheus-operator-crd", file)
}

func TestKubeAPIServer(t *testing.T) {
	strata := strataTarget(t)
	k := startKubeAPI(t, strata)
	k.must("create", "namespace", "ns")

	// Every rendered object passes the API server's validation and
	// admission (server-side dry run).
	renders := map[string][]string{
		"3 members":      {"replicas=3"},
		"5 members":      {"replicas=5"},
		"3 members, TLS": {"tls.enabled=true", "tls.secretName=db-tls"},
	}
	objects := 0
	for name, set := range renders {
		file := writeTemp(t, "chart.yaml", helmRender(t, set...))
		out := k.must("apply", "--dry-run=server", "-n", "ns", "-f", file)
		n := strings.Count(out, "(server dry run)")
		if n < 7 {
			t.Fatalf("%s: kubectl apply --dry-run=server accepted %d objects, want the chart's 7 (ServiceAccount, Role, RoleBinding, 2 Services, StatefulSet, PDB):\n%s", name, n, out)
		}
		objects += n
	}
	k.must("apply", "-f", operatorCRD(t, "monitoring.coreos.com_servicemonitors.yaml"))
	poll.Until(t, "the ServiceMonitor CRD to be established", func() bool {
		_, err := k.run("get", "servicemonitors", "-n", "ns")
		return err == nil
	})
	out := k.must("apply", "--dry-run=server", "-n", "ns", "-f", "../deploy/monitoring/servicemonitor.yaml")
	if !strings.Contains(out, "servicemonitor.monitoring.coreos.com/strata created (server dry run)") {
		t.Fatalf("ServiceMonitor: %s", out)
	}
	objects++

	// The chart for real (no controllers run here: the StatefulSet is an
	// object the hook reads, and the pods are local processes).
	k.must("apply", "-n", "ns", "-f", writeTemp(t, "chart.yaml", helmRender(t, "replicas=3")))
	token := writeTemp(t, "token", k.must("create", "token", "db", "-n", "ns"))

	ps := newPodSet(t, strata, "db")
	ps.scaleTo(3)
	ps.start(0, 1, 2)
	ps.waitVoters(0, "db-0", "db-1", "db-2")
	k.must("scale", "statefulset", "db", "-n", "ns", "--replicas=4")
	ps.scaleTo(4)
	ps.start(3)
	ids := ps.waitVoters(0, "db-0", "db-1", "db-2", "db-3")

	// The preStop hook as the kubelet runs it: the member's flags with
	// $(POD_NAME) unexpanded, POD_NAME in the environment.
	stop := func(o int, tokenFile string) (string, error) {
		args := []string{"statefulset", "stop", "--kube-apiserver=" + k.URL, "--kube-token-file=" + tokenFile,
			"--kube-ca-file=" + k.CAFile, "--kube-namespace=ns"}
		for _, a := range ps.pods[o].Args()[2:] {
			args = append(args, strings.ReplaceAll(a, ps.pods[o].Name(), "$(POD_NAME)"))
		}
		cmd := exec.Command(strata, args...)
		cmd.Env = append(os.Environ(), "POD_NAME="+ps.pods[o].Name())
		b, err := cmd.CombinedOutput()
		return string(b), err
	}

	k.must("scale", "statefulset", "db", "-n", "ns", "--replicas=3")
	// A token of another service account, without the chart's Role: the
	// API refuses it, and so does the hook (it removes nothing).
	k.must("create", "serviceaccount", "other", "-n", "ns")
	other := writeTemp(t, "other-token", k.must("create", "token", "other", "-n", "ns"))
	if out, err := stop(3, other); err == nil || !strings.Contains(out, "403") {
		t.Fatalf("the hook with a token outside the Role: %v\n%s", err, out)
	}
	ps.waitVoters(0, "db-0", "db-1", "db-2", "db-3")

	if out, err := stop(1, token); err != nil || !strings.Contains(out, "the pod is restarting, not scaled away") {
		t.Fatalf("the hook of db-1 (ordinal 1 < 3 replicas): %v\n%s", err, out)
	}
	if out, err := stop(3, token); err != nil || !strings.Contains(out, "scaled away: removed this member from the cluster") {
		t.Fatalf("the hook of db-3 (ordinal 3, 3 replicas): %v\n%s", err, out)
	}
	code, err := ps.pods[3].WaitExit(poll.Deadline)
	if err != nil || code != 0 {
		t.Fatalf("removed db-3 exited %d, %v", code, err)
	}
	after := ps.waitVoters(0, "db-0", "db-1", "db-2")
	if after["db-1"] != ids["db-1"] {
		t.Fatalf("db-1 changed id")
	}

	// Deleting the release: the StatefulSet is gone first, and the
	// hooks then leave the membership alone.
	k.must("delete", "statefulset", "db", "-n", "ns")
	if out, err := stop(2, token); err != nil || !strings.Contains(out, "the StatefulSet is gone") {
		t.Fatalf("the hook of db-2 after the StatefulSet was deleted: %v\n%s", err, out)
	}
	ps.waitVoters(0, "db-0", "db-1", "db-2")

	if out, err := k.run("get", "statefulset", "db", "-n", "ns"); err == nil || !strings.Contains(out, "NotFound") {
		t.Fatalf("kubectl get of the deleted StatefulSet: %v\n%s", err, out)
	}
	t.Logf("KUBE: kube-apiserver on Strata accepted %d rendered objects (server dry run: 3 renderings of the chart and the ServiceMonitor); kubectl scale 4->3 removed db-3 through the chart's ServiceAccount and Role, a restart kept db-1, a token outside the Role was refused, a deleted StatefulSet removed nothing", objects)
}

// TestContainerImage builds the Dockerfile where a container builder
// exists and runs the image's strata; on a machine without one it says
// so and skips, as the issue asks.
func TestContainerImage(t *testing.T) {
	var builder string
	var why []string
	for _, b := range []string{"docker", "podman", "buildah"} {
		p, err := exec.LookPath(b)
		if err != nil {
			continue
		}
		// A client without its daemon cannot build.
		if out, err := exec.Command(p, "info").CombinedOutput(); err != nil {
			why = append(why, fmt.Sprintf("%s info: %v: %s", p, err, firstLine(string(out))))
			continue
		}
		builder = p
		break
	}
	if builder == "" {
		t.Skipf("no working container builder (docker, podman or buildah) on this machine, so the image build is not checked here %v", why)
	}
	const tag = "strata-e2e:test"
	if out, err := exec.Command(builder, "build", "-t", tag, "..").CombinedOutput(); err != nil {
		t.Fatalf("%s build: %v\n%s", builder, err, out)
	}
	out, err := exec.Command(builder, "run", "--rm", tag, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "etcd Version: ") {
		t.Fatalf("%s run %s --version: %v\n%s", builder, tag, err, out)
	}
	t.Logf("IMAGE: built with %s; strata --version in the image: %s", builder, strings.TrimSpace(string(out)))
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
