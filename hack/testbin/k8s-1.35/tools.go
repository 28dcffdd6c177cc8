//go:build tools

// Package tools pins the Kubernetes commands this wrapper module builds:
// kube-apiserver for the test control plane, kubectl of the same version
// (the preinstalled one may be outside the supported version skew), and for
// the real test node (hack/node.sh) kubelet, kube-scheduler and
// kube-controller-manager.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
