//go:build tools

// Package tools pins krew (the kubectl plugin manager) and its own plugin
// manifest validator (validate-krew-manifest, what krew-index's CI runs):
// tests/helm/krew.sh checks plugins/tkm.yaml with the validator and installs
// kubectl-tkm from it with krew, offline (--archive).
package tools

import (
	_ "sigs.k8s.io/krew/cmd/krew"
	_ "sigs.k8s.io/krew/cmd/validate-krew-manifest"
)
