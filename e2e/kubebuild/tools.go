//go:build tools

// Package kubebuild pins the Kubernetes release whose kube-apiserver and
// kubectl the Kubernetes e2e test runs (make k8s): k8s.io/kubernetes
// cannot be installed with 'go install' because its go.mod replaces the
// staging modules with directories, so this module requires it and
// replaces each staging module with its published version instead.
package kubebuild

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
