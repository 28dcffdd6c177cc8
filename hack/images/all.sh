#!/usr/bin/env bash
# `make images`: tkm's images from the binaries of a build dir, pushed with
# hack/images/tkm.sh (one shared base layer + one layer per binary).
#
# Usage: hack/images/all.sh BUILD_DIR REGISTRY TAG [ARM64_BUILD_DIR]
#   REGISTRY  127.0.0.1:PORT; empty: the local control plane's registry
#             ($TKM_CLUSTER_DIR or .tkm/cluster, see hack/cluster.sh)
#   ARM64_BUILD_DIR  a linux/arm64 cross build (hack/cross-arm64.sh, e.g. build-arm64):
#             then every image is one OCI image index of linux/amd64 and linux/arm64
#             (`make images ARM64_BUILD=build-arm64`); each image built in BUILD_DIR
#             must be built there too (a missing one is an error).
# Images: tkm-csi (required), tkm-agent, tkm-controller, tkmctl (each when its
# binary is built; a missing one is named on stderr, never silently left out).
# Prints hack/images/tkm.sh's lines: NAME REF:TAG REF@DIGEST BYTES, and `base ...`.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=hack/lib.sh
source "$here/../lib.sh"

build=${1:-build} reg=${2:-} tag=${3:-dev} arm64=${4:-}
[[ $build == /* ]] || build=$repo/$build
[[ -z $arm64 || $arm64 == /* ]] || arm64=$repo/$arm64
if [[ -z $reg ]]; then
  cdir=${TKM_CLUSTER_DIR:-$repo/.tkm/cluster}
  [[ -s $cdir/registry/addr ]] || die "images: no REGISTRY given and no local registry in $cdir (run: hack/cluster.sh up, or make images REGISTRY=127.0.0.1:PORT)"
  reg=$(cat "$cdir/registry/addr")
fi
args=()
for nb in tkm-csi=csi/tkm-csi tkm-agent=agent/tkm-agent tkm-controller=controller/tkm-controller tkmctl=cli/tkmctl; do
  n=${nb%%=*} b=$build/${nb#*=}
  if [[ -x $b ]]; then
    args+=("$n=$b")
    if [[ -n $arm64 ]]; then
      [[ -x $arm64/${nb#*=} ]] || die "images: $arm64/${nb#*=} is missing; build it first (hack/cross-arm64.sh $arm64)"
      args+=("$n@arm64=$arm64/${nb#*=}")
    fi
  elif [[ $n == tkm-csi ]]; then
    die "images: $b is missing; build it first (make build, or ninja -C $build tkm-csi)"
  else
    echo "images: $n not built ($b missing): no image for it" >&2
  fi
done
log "images: ${args[*]%%=*} -> $reg (tag $tag${arm64:+, linux/amd64 + linux/arm64})"
"$here/tkm.sh" "$reg" "$tag" "${args[@]}"
