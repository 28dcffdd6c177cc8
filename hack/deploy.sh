#!/usr/bin/env bash
# Deploys tkm from manifests/overlays/<overlay> onto the local control plane and
# test node (hack/cluster.sh, hack/node.sh): renders the overlay with kustomize,
# fills in the running registry (for 127.0.0.1:5000) and apiserver port (for
# KUBERNETES_SERVICE_PORT "6443"), and applies it server-side through
# `hack/node.sh apply`, which refuses anything breaking the loopback rule.
#
# Usage: hack/deploy.sh [--overlay local|fixture-gpu|DIR] [--tag TAG]
#                       [--fixture-gpu-root DIR --fakenvml LIB] [--render]
#   --overlay           default local; fixture-gpu needs the two flags below
#   --fixture-gpu-root  a GPU root (tests/fixtures/gpu/roots/<machine>: sys/ proc/
#                       nvml.conf), copied to /var/lib/tkm-fixture-gpu on this host
#   --fakenvml          the fake NVML to put there (<build>/fakenvml/libnvidia-ml.so.1)
#   --tag               image tag (default dev: what `make images` pushes)
#   --render            print the rendered manifests instead of applying them
# Push the images first: make images (or hack/images/all.sh).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=hack/lib.sh
source "$here/lib.sh"

overlay=local tag=dev gpuroot='' fakenvml='' render=0
while (($#)); do
  case $1 in
    --overlay) overlay=$2; shift 2 ;;
    --tag) tag=$2; shift 2 ;;
    --fixture-gpu-root) gpuroot=$2; shift 2 ;;
    --fakenvml) fakenvml=$2; shift 2 ;;
    --render) render=1; shift ;;
    *) sed -n '2,17p' "$0" >&2; die "deploy: unknown argument '$1'" ;;
  esac
done
[[ -d $overlay ]] || overlay=$repo/manifests/overlays/$overlay
[[ -s $overlay/kustomization.yaml ]] || die "deploy: no kustomization.yaml in $overlay"
dir=${TKM_CLUSTER_DIR:-$repo/.tkm/cluster}
[[ -s $dir/env && -s $dir/registry/addr && -s $dir/apiserver.port ]] || die "deploy: no control plane in $dir (run: hack/cluster.sh up)"
# shellcheck source=/dev/null # written by hack/cluster.sh up
source "$dir/env"
reg=$(cat "$dir/registry/addr") port=$(cat "$dir/apiserver.port")
[[ $tag =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]*$ ]] || die "deploy: bad tag '$tag'"

out=$(kubectl kustomize "$overlay") || die "deploy: kustomize $overlay failed"
out=$(sed -e "s#image: 127\.0\.0\.1:5000/tkm/\([a-z0-9-]*\):dev#image: $reg/tkm/\1:$tag#" \
  -e "/name: KUBERNETES_SERVICE_PORT\$/{n;s/value: \"6443\"/value: \"$port\"/}" <<<"$out")
if ((render)); then
  echo "$out"
  exit 0
fi

if grep -q /var/lib/tkm-fixture-gpu <<<"$out"; then
  [[ -n $gpuroot && -n $fakenvml ]] || die "deploy: overlay $overlay needs --fixture-gpu-root DIR and --fakenvml LIB"
  [[ -d $gpuroot/sys && -d $gpuroot/proc && -s $gpuroot/nvml.conf ]] || die "deploy: $gpuroot has no sys/, proc/ and nvml.conf"
  [[ -s $fakenvml ]] || die "deploy: $fakenvml is missing (ninja -C build fakenvml)"
  rm -rf /var/lib/tkm-fixture-gpu
  mkdir -p /var/lib/tkm-fixture-gpu
  cp -a "$gpuroot"/. /var/lib/tkm-fixture-gpu/
  cp "$fakenvml" /var/lib/tkm-fixture-gpu/libnvidia-ml.so.1
  log "deploy: fixture GPU root $gpuroot at /var/lib/tkm-fixture-gpu"
fi
log "deploy: $overlay (registry $reg, tag $tag, apiserver port $port)"
"$here/node.sh" apply - --server-side --force-conflicts --field-manager=tkm-deploy <<<"$out"
