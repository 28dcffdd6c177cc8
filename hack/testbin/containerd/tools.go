//go:build tools

// Package tools pins the container runtime the real test node (hack/node.sh)
// runs: containerd 2.x and its runc shim, built from Go modules as kubelet is
// (Debian 12 packages containerd 1.6, past its end of life; image volumes need
// containerd >= 2.1, subPath >= 2.2).
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
