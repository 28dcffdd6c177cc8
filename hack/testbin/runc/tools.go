//go:build tools

// Package tools pins runc, the OCI runtime containerd's shim starts, at the
// version containerd's own CI uses (containerd's script/setup/runc-version).
// Built with cgo and the seccomp tag (Debian's libseccomp-dev), as runc's
// Makefile builds it.
package tools

import (
	_ "github.com/opencontainers/runc"
)
