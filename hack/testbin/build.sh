#!/usr/bin/env bash
# Builds the Go-built test binaries tkm's tests run against, once, from Go
# modules, and caches them outside the clone:
#
#   ${TKM_CACHE:-$HOME/.cache/tkm}/bin/<tool>-<version>/<tool>
#
# Each tool has a wrapper module of ours beside this script (go.mod + go.sum,
# committed), so builds are reproducible and need only the Go module proxy:
#   k8s/     kube-apiserver, kubectl, and for the test node (hack/node.sh) kubelet,
#            kube-scheduler, kube-controller-manager (k8s.io/kubernetes with every
#            staging module replaced by its published v0.X.Y; see docs/development.md)
#   k8s-1.35/ the same at the oldest supported minor (TKM_KUBE_VERSION=1.35.4)
#   etcd/    etcd            (go.etcd.io/etcd/server/v3)
#   cosign/  cosign, crane   (sigstore/cosign v2, go-containerregistry)
#   cosign3/ cosign3         (sigstore/cosign v3: Sigstore bundles, OCI referrers)
#            referrers-registry (ours: go-containerregistry's in-memory registry
#                             with the OCI referrers API on; crane serve has it off)
#   sigstore-testca/ sigstore-testca (ours: keyless bundles from sigstore-go's
#                             offline virtual Sigstore, pkg/testing/ca, for tests)
#   csi-sanity/ csi-sanity   (github.com/kubernetes-csi/csi-test/v5; v5.6.0 runs the
#                             Node suite against a node-only driver, PR #597/#598)
#   containerd/ containerd, containerd-shim-runc-v2, ctr (containerd/v2) for the
#             real test node: Debian's containerd 1.6 is past its end of life
#   runc/    runc, at the version containerd's CI pins (cgo, libseccomp)
#   prometheus/ prometheus, promtool (github.com/prometheus/prometheus v0.316.0 =
#                             Prometheus v3.16.0; tag remove_all_sd: static and file
#                             service discovery only; no built-in web UI assets)
#   helm/    helm            (helm.sh/helm/v3) for the chart tests (tests/helm/)
#   helm4/   helm4           (helm.sh/helm/v4, the binary named helm4) for the same tests
#   krew/    krew, validate-krew-manifest (sigs.k8s.io/krew: the plugin manager and its
#                             own manifest check) for plugins/tkm.yaml
#
# Usage: hack/testbin/build.sh [TOOL...]     (default: all)
#        hack/testbin/build.sh --path TOOL   print the cached binary's path (build if needed)
#        hack/testbin/build.sh --version TOOL the version we build of TOOL (builds nothing)
# Env:   TKM_KUBE_VERSION  1.37.2 (default) or 1.35.4: the Kubernetes tools' version
# Build logs go to ${TKM_CACHE}/logs/<tool>.log; a failure prints that path.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=hack/lib.sh
source "$here/../lib.sh" # go_ensure, go_required
cache=${TKM_CACHE:-$HOME/.cache/tkm}

# The newest Kubernetes minor is the default; the oldest supported one is built
# too when asked for (TKM_KUBE_VERSION=1.35.4: CI's second e2e run, see
# docs/development.md). Each has its own wrapper module: k8s/ and k8s-1.35/.
KUBE_NEWEST=1.37.2
KUBE_OLDEST=1.35.4
KUBE_VERSION=${TKM_KUBE_VERSION:-$KUBE_NEWEST}
case $KUBE_VERSION in
  "$KUBE_NEWEST") KUBE_MOD=k8s ;;
  "$KUBE_OLDEST") KUBE_MOD=k8s-1.35 ;;
  *) echo "testbin: TKM_KUBE_VERSION=$KUBE_VERSION is not one we build ($KUBE_NEWEST or $KUBE_OLDEST)" >&2; exit 1 ;;
esac
ETCD_VERSION=3.6.16
COSIGN_VERSION=2.6.5
CRANE_VERSION=0.22.1
COSIGN3_VERSION=3.1.3
SIGSTORE_TESTCA_VERSION=4
REFERRERS_REGISTRY_VERSION=1
CSI_SANITY_VERSION=5.6.0
PROMETHEUS_VERSION=3.16.0
CONTAINERD_VERSION=2.4.2
RUNC_VERSION=1.5.2
HELM_VERSION=3.22.0
HELM4_VERSION=4.3.1
KREW_VERSION=0.4.3

die() { echo "testbin: $*" >&2; exit 1; }

tool_version() {
  case $1 in
    kube-apiserver | kubectl | kubelet | kube-scheduler | kube-controller-manager) echo "v$KUBE_VERSION" ;;
    etcd) echo "v$ETCD_VERSION" ;;
    cosign) echo "v$COSIGN_VERSION" ;;
    crane) echo "v$CRANE_VERSION" ;;
    cosign3) echo "v$COSIGN3_VERSION" ;;
    sigstore-testca) echo "v$SIGSTORE_TESTCA_VERSION" ;;
    referrers-registry) echo "v$REFERRERS_REGISTRY_VERSION" ;;
    csi-sanity) echo "v$CSI_SANITY_VERSION" ;;
    prometheus | promtool) echo "v$PROMETHEUS_VERSION" ;;
    containerd | containerd-shim-runc-v2 | ctr) echo "v$CONTAINERD_VERSION" ;;
    runc) echo "v$RUNC_VERSION" ;;
    helm) echo "v$HELM_VERSION" ;;
    helm4) echo "v$HELM4_VERSION" ;;
    krew | validate-krew-manifest) echo "v$KREW_VERSION" ;;
    *) die "unknown tool '$1' (known: kube-apiserver kubectl kubelet kube-scheduler kube-controller-manager etcd cosign crane cosign3 referrers-registry sigstore-testca csi-sanity prometheus promtool containerd containerd-shim-runc-v2 ctr runc helm helm4 krew validate-krew-manifest)" ;;
  esac
}

tool_path() {
  local bin=$1
  [[ $1 == cosign3 ]] && bin=cosign
  echo "$cache/bin/$1-$(tool_version "$1")/$bin"
}

build_one() {
  local tool=$1 ver out dir mod pkg tags='' cgo=0 ldflags=(-s -w)
  ver=$(tool_version "$tool")
  out=$(tool_path "$tool")
  [[ -x $out ]] && return 0
  mkdir -p "$cache/locks"
  # One builder per tool at a time (parallel ctest runs, demo and test at once);
  # a second caller waits, then finds the binary built.
  exec 9>"$cache/locks/$tool.lock"
  flock 9
  if [[ -x $out ]]; then exec 9>&-; return 0; fi
  # A Go new enough for our go.mod files: the one on PATH, or one bootstrapped
  # into $cache/go/ (hack/lib.sh go_ensure; Debian 12's own Go is too old).
  go_ensure || die "no Go >= $(go_required) and bootstrapping one failed (see above)"
  case $tool in
    kube-apiserver | kubectl | kubelet | kube-scheduler | kube-controller-manager)
      mod=$KUBE_MOD pkg=k8s.io/kubernetes/cmd/$tool
      local minor=${KUBE_VERSION#1.}; minor=${minor%%.*}
      local vp
      for vp in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        ldflags+=(-X "$vp.gitVersion=v$KUBE_VERSION" -X "$vp.gitMajor=1" -X "$vp.gitMinor=$minor"
          -X "$vp.gitTreeState=clean")
      done ;;
    etcd) mod=etcd pkg=go.etcd.io/etcd/server/v3 ;;
    cosign) mod=cosign pkg=github.com/sigstore/cosign/v2/cmd/cosign
      ldflags+=(-X "sigs.k8s.io/release-utils/version.gitVersion=v$COSIGN_VERSION") ;;
    crane) mod=cosign pkg=github.com/google/go-containerregistry/cmd/crane ;;
    cosign3) mod=cosign3 pkg=github.com/sigstore/cosign/v3/cmd/cosign
      ldflags+=(-X "sigs.k8s.io/release-utils/version.gitVersion=v$COSIGN3_VERSION") ;;
    sigstore-testca) mod=sigstore-testca pkg=. ;;
    referrers-registry) mod=cosign3 pkg=./referrers-registry ;;
    csi-sanity) mod=csi-sanity pkg=github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity ;;
    prometheus | promtool)
      # Version stamps as Prometheus's own promu build sets them (prometheus
      # --version, build_info); remove_all_sd leaves out the cloud service
      # discoveries (AWS, Azure, GCE, Kubernetes, ...) the tests never use.
      mod=prometheus pkg=github.com/prometheus/prometheus/cmd/$tool tags=remove_all_sd
      ldflags+=(-X "github.com/prometheus/common/version.Version=$PROMETHEUS_VERSION"
        -X "github.com/prometheus/common/version.Branch=HEAD") ;;
    containerd | containerd-shim-runc-v2 | ctr)
      # no_btrfs: the btrfs snapshotter needs cgo and btrfs headers; the node
      # uses overlayfs. Version stamps as containerd's Makefile sets them.
      mod=containerd pkg=github.com/containerd/containerd/v2/cmd/$tool tags=no_btrfs
      ldflags+=(-X "github.com/containerd/containerd/v2/version.Version=v$CONTAINERD_VERSION"
        -X "github.com/containerd/containerd/v2/version.Package=github.com/containerd/containerd/v2") ;;
    runc)
      # runc needs cgo (its nsenter is C) and, for seccomp profiles such as
      # RuntimeDefault, libseccomp (Debian's libseccomp-dev; hack/deps.sh).
      mod=runc pkg=github.com/opencontainers/runc tags=seccomp cgo=1
      ldflags+=(-X "main.version=$RUNC_VERSION") ;;
    helm)
      # Stamps as Helm's Makefile sets them: the version (helm version), and the Kubernetes
      # version that helm template, lint and install --dry-run=client assume (.Capabilities,
      # a chart's kubeVersion), from the client-go Helm is built with (v0.37 -> 1.37; else 1.20).
      mod=helm pkg=helm.sh/helm/v3/cmd/helm
      local cg
      cg=$(cd "$here/helm" && GOFLAGS=-mod=mod go list -m -f '{{.Version}}' k8s.io/client-go) ||
        die "helm: cannot read k8s.io/client-go's version from $here/helm/go.mod"
      cg=${cg#v0.}; cg=${cg%%.*}
      ldflags+=(-X "helm.sh/helm/v3/internal/version.version=v$HELM_VERSION"
        -X "helm.sh/helm/v3/internal/version.gitTreeState=clean")
      local p
      for p in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
        ldflags+=(-X "$p.k8sVersionMajor=1" -X "$p.k8sVersionMinor=$cg")
      done ;;
    helm4)
      mod=helm4 pkg=helm.sh/helm/v4/cmd/helm
      ldflags+=(-X "helm.sh/helm/v4/internal/version.version=v$HELM4_VERSION"
        -X "helm.sh/helm/v4/internal/version.gitTreeState=clean") ;;
    krew) mod=krew pkg=sigs.k8s.io/krew/cmd/krew
      ldflags+=(-X "sigs.k8s.io/krew/internal/version.gitTag=v$KREW_VERSION") ;;
    validate-krew-manifest) mod=krew pkg=sigs.k8s.io/krew/cmd/validate-krew-manifest ;;
  esac
  dir=$(dirname "$out")
  mkdir -p "$dir" "$cache/logs"
  local log="$cache/logs/$tool.log"
  echo "testbin: building $tool $ver from Go modules into $dir (first run only; 1-6 min each on 2 cores)..." >&2
  local t0=$SECONDS
  if ! (cd "$here/$mod" && GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=$cgo \
        go build -trimpath -tags "$tags" -o "$out.tmp" -ldflags "${ldflags[*]}" "$pkg") >"$log" 2>&1; then
    rm -f "$out.tmp"
    tail -20 "$log" >&2
    die "building $tool failed; full log: $log"
  fi
  mv -f "$out.tmp" "$out"
  echo "testbin: built $tool $ver in $((SECONDS - t0))s -> $out" >&2
  exec 9>&-
}

main() {
  mkdir -p "$cache"
  if [[ ${1:-} == --version ]]; then
    [[ -n ${2:-} ]] || die "--version needs a tool name"
    tool_version "$2"
    return
  fi
  if [[ ${1:-} == --path ]]; then
    [[ -n ${2:-} ]] || die "--path needs a tool name"
    build_one "$2"
    tool_path "$2"
    return
  fi
  local tools=("$@")
  [[ ${#tools[@]} -gt 0 ]] || tools=(etcd kube-apiserver kubectl kubelet kube-scheduler kube-controller-manager cosign crane cosign3 referrers-registry sigstore-testca csi-sanity prometheus promtool containerd containerd-shim-runc-v2 ctr runc helm helm4 krew validate-krew-manifest)
  for t in "${tools[@]}"; do build_one "$t"; done
  for t in "${tools[@]}"; do echo "$t $(tool_path "$t")"; done
}
main "$@"
