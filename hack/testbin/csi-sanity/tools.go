//go:build tools

// Package tools pins csi-sanity, the CSI conformance suite the tests run
// against tkm-csi. v5.6.0 is past kubernetes-csi/csi-test PR #597/#598: the
// Node suite no longer calls ControllerGetCapabilities on a node-only driver.
package tools

import (
	_ "github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity"
)
