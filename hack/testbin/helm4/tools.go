//go:build tools

// Package tools pins Helm 4 (built as helm4), whose helm lint and helm
// template the chart tests (tests/helm/) run against charts/tkm too.
package tools

import (
	_ "helm.sh/helm/v4/cmd/helm"
)
