package main

import (
	"slices"
	"testing"
)

func TestKubeFlagsAndVars(t *testing.T) {
	k, rest, err := kubeFlags([]string{"--kube-apiserver", "https://api:6443", "--name=$(POD_NAME)", "--statefulset=db", "--kube-namespace=ns", "--data-dir", "/d"})
	if err != nil {
		t.Fatal(err)
	}
	if k.Server != "https://api:6443" || k.StatefulSet != "db" || k.Namespace != "ns" {
		t.Fatalf("kube flags: %+v", k)
	}
	if !slices.Equal(rest, []string{"--name=$(POD_NAME)", "--data-dir", "/d"}) {
		t.Fatalf("member flags: %q", rest)
	}
	if _, _, err := kubeFlags([]string{"--kube-token-file"}); err == nil {
		t.Fatal("a kube flag without its value was accepted")
	}
	t.Setenv("POD_NAME", "db-2")
	if got := expandKubeVars("--advertise-client-urls=http://$(POD_NAME).db-headless:2379,$(UNSET_VAR)"); got != "--advertise-client-urls=http://db-2.db-headless:2379,$(UNSET_VAR)" {
		t.Fatalf("expanded: %s", got)
	}
}
