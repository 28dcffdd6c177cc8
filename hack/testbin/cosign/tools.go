//go:build tools

// Package tools pins the signing and registry tools the tests use:
// cosign (key-based, offline signing) and crane (registry copy/inspect).
package tools

import (
	_ "github.com/google/go-containerregistry/cmd/crane"
	_ "github.com/sigstore/cosign/v2/cmd/cosign"
)
