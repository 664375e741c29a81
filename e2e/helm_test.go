//go:build helm

package e2e

// The Helm chart, the part without a kube-apiserver:
// `make k8s-chart` builds helm from the Go module proxy and runs this
// test with -tags helm. The chart lints; it renders for 3 and 5 members a
// StatefulSet whose --initial-cluster names every member by its stable
// DNS name under the headless service, probes as kubeadm sets them, a
// headless Service that publishes unready peers, and a
// PodDisruptionBudget; and it refuses an even member count and TLS
// without a Secret.

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestHelmChart(t *testing.T) {
	helm := os.Getenv("STRATA_HELM")
	if helm == "" {
		t.Fatal("set STRATA_HELM to a helm binary (make k8s-chart builds one)")
	}
	const chart = "../deploy/helm/strata"
	if out, err := exec.Command(helm, "lint", chart).CombinedOutput(); err != nil {
		t.Fatalf("helm lint: %v\n%s", err, out)
	}
	render := func(set ...string) (string, error) {
		args := []string{"template", "db", chart, "--namespace", "ns"}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		out, err := exec.Command(helm, args...).CombinedOutput()
		return string(out), err
	}
	for _, n := range []int{3, 5} {
		out, err := render(fmt.Sprintf("replicas=%d", n))
		if err != nil {
			t.Fatalf("helm template, %d members: %v\n%s", n, err, out)
		}
		objs := map[string]map[string]any{}
		for _, doc := range strings.Split(out, "\n---") {
			var o map[string]any
			if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
				t.Fatalf("rendered YAML does not parse: %v\n%s", err, doc)
			}
			if kind, _ := o["kind"].(string); kind != "" {
				name := o["metadata"].(map[string]any)["name"].(string)
				objs[kind+"/"+name] = o
			}
		}
		for _, want := range []string{"StatefulSet/db", "Service/db", "Service/db-headless", "PodDisruptionBudget/db",
			"ServiceAccount/db", "Role/db", "RoleBinding/db"} {
			if objs[want] == nil {
				t.Fatalf("%d members: no %s in the rendered chart", n, want)
			}
		}
		hs := objs["Service/db-headless"]["spec"].(map[string]any)
		if hs["clusterIP"] != "None" || hs["publishNotReadyAddresses"] != true {
			t.Fatalf("headless service: %v", hs)
		}
		spec := objs["StatefulSet/db"]["spec"].(map[string]any)
		if int(spec["replicas"].(float64)) != n || spec["podManagementPolicy"] != "Parallel" {
			t.Fatalf("statefulset spec: replicas %v, policy %v", spec["replicas"], spec["podManagementPolicy"])
		}
		c := spec["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
		// The scale logic: the pod starts through 'strata statefulset
		// start' and leaves on a scale-down in its preStop hook, which
		// repeats the member's flags.
		args := c["args"].([]any)
		if len(args) < 2 || args[0] != "statefulset" || args[1] != "start" {
			t.Fatalf("%d members: the container does not start through 'statefulset start': %v", n, args[:2])
		}
		hook := c["lifecycle"].(map[string]any)["preStop"].(map[string]any)["exec"].(map[string]any)["command"].([]any)
		if len(hook) < 4 || hook[1] != "statefulset" || hook[2] != "stop" || fmt.Sprint(hook[4:]) != fmt.Sprint(args[2:]) {
			t.Fatalf("%d members: preStop %v does not run 'statefulset stop' with the member's flags %v", n, hook, args[2:])
		}
		var initial string
		for _, a := range args {
			if s := a.(string); strings.HasPrefix(s, "--initial-cluster=") {
				initial = strings.TrimPrefix(s, "--initial-cluster=")
			}
		}
		var want []string
		for i := 0; i < n; i++ {
			want = append(want, fmt.Sprintf("db-%d=http://db-%d.db-headless.ns.svc:2380", i, i))
		}
		if initial != strings.Join(want, ",") {
			t.Fatalf("%d members: --initial-cluster=%s\nwant %s", n, initial, strings.Join(want, ","))
		}
		for probe, path := range map[string]string{"livenessProbe": "/livez", "readinessProbe": "/readyz"} {
			hg := c[probe].(map[string]any)["httpGet"].(map[string]any)
			if hg["path"] != path || int(hg["port"].(float64)) != 2381 {
				t.Fatalf("%s: %v, want %s on the metrics port 2381", probe, hg, path)
			}
		}
	}
	if out, err := render("replicas=4"); err == nil || !strings.Contains(out, "replicas must be 1, 3, 5 or 7") {
		t.Fatalf("4 members rendered: %v\n%s", err, out)
	}
	if out, err := render("tls.enabled=true"); err == nil || !strings.Contains(out, "tls.enabled needs tls.secretName") {
		t.Fatalf("TLS without a Secret rendered: %v\n%s", err, out)
	}
	out, err := render("tls.enabled=true", "tls.secretName=db-tls")
	if err != nil || !strings.Contains(out, "https://db-0.db-headless.ns.svc:2380") || !strings.Contains(out, "--peer-client-cert-auth") {
		t.Fatalf("TLS rendering: %v\n%s", err, out)
	}
	t.Logf("HELM: the chart lints and renders 3 and 5 members with --initial-cluster from the replica count, kubeadm's probes, a headless service and a PDB; an even count and TLS without a Secret are refused")
}
