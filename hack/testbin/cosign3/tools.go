//go:build tools

// Package tools pins cosign v3, which signs with Sigstore bundles attached
// through the OCI referrers API (or its tag-schema fallback) by default.
package tools

import (
	_ "github.com/sigstore/cosign/v3/cmd/cosign"
)
