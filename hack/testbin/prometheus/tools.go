//go:build tools

// Package tools pins Prometheus and promtool, which tkm's monitoring tests run:
// promtool checks and unit-tests manifests/monitoring's alert rules, and a real
// Prometheus scrapes tkm-controller and tkm-agent (tests/e2e/monitoring_*.sh).
// github.com/prometheus/prometheus v0.316.0 is Prometheus v3.16.0 (the Go module
// numbers v3.X.Y as v0.3XX.Y). The web UI's assets are not built in (no
// builtinassets tag); the tests use the HTTP API only.
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
