//go:build tools

// Package tools pins the Kubernetes commands this wrapper module builds:
// kube-apiserver for the test control plane, and kubectl of the same version
// (the preinstalled one may be outside the supported version skew).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
