//go:build tools

// Package tools pins Helm 3, whose helm lint and helm template the chart
// tests (tests/helm/) run against charts/tkm.
package tools

import (
	_ "helm.sh/helm/v3/cmd/helm"
)
