#!/usr/bin/env bash
# The main job on a fresh machine (`make demo`): installs what it needs, builds
# tkm, starts a local control plane (etcd + kube-apiserver on loopback) and an
# OCI registry, installs the CRDs, packs a real Triton cache (compiled on an
# H200, from tests/fixtures) into an image with tkmctl and pushes it to the
# local registry, declares it with a TritonKernelCache, and shows everything.
#
# Afterwards:  eval "$(hack/cluster.sh env)"; kubectl get tkm -A
# Stop with:   hack/cluster.sh down
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/lib.sh
log "1/6 Debian packages"
hack/deps.sh
log "2/6 Go-built test binaries (etcd, kube-apiserver, kubectl, cosign, crane; first run only)"
hack/testbin/build.sh
log "3/6 build tkm"
cmake -S . -B build -G Ninja >/dev/null
ninja -C build
log "4/6 control plane and registry"
hack/cluster.sh up
eval "$(hack/cluster.sh env)"
log "5/6 CRDs and samples"
kubectl apply --server-side -f crds/
kubectl wait --for=condition=Established crd -l app.kubernetes.io/part-of=tkm --timeout=60s
kubectl apply -f manifests/samples/namespace.yaml
kubectl apply -f manifests/samples/
log "6/6 a real kernel cache image"
fixtures=${TKM_FIXTURES:-tests/fixtures}
cache_tgz=$fixtures/triton-cache/triton-3.6.0-cuda-sm90.tar.gz
image=$TKM_REGISTRY/kernels/vector-add:triton-3.6.0-sm90
[[ -f $cache_tgz ]] || die "$cache_tgz is missing: the fixtures ship with the repository (tests/fixtures); is this a full clone?"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -xzf "$cache_tgz" -C "$work"
src=$work
# The archive may hold the cache dir itself or its parent.
[[ $(find "$work" -mindepth 1 -maxdepth 1 | wc -l) -eq 1 && -d $(find "$work" -mindepth 1 -maxdepth 1) ]] &&
  src=$(find "$work" -mindepth 1 -maxdepth 1)
build/cli/tkmctl build "$src" --push "$image"
echo "\$ tkmctl inspect $image"
build/cli/tkmctl inspect "$image"
digest=$(build/cli/tkmctl inspect "$image" -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["manifestDigest"])')
[[ $digest == sha256:* ]] || die "tkmctl inspect printed no digest for $image"
echo "\$ tkmctl check $image   # this machine's GPUs (none here: it says why)"
build/cli/tkmctl check "$image" || true
kubectl apply -f - <<YAML
apiVersion: tkm.io/v1alpha1
kind: TritonKernelCache
metadata:
  name: vector-add-local
  namespace: ml
spec:
  cacheImage: ${image%%:triton-*}@$digest
YAML
for _ in $(seq 1 30); do
  [[ $(kubectl api-resources --categories=tkm --no-headers 2>/dev/null | wc -l) -eq 4 ]] && break
  sleep 1
done
echo
echo "\$ kubectl get tkc -n ml vector-add-local -o custom-columns=NAME:.metadata.name,IMAGE:.spec.cacheImage"
kubectl get tkc -n ml vector-add-local -o custom-columns=NAME:.metadata.name,IMAGE:.spec.cacheImage
echo
echo "\$ kubectl get tkm -A   # READY/VERIFIED/DIGEST stay empty until tkm-controller and tkm-agent run"
kubectl get tkm -A
echo
echo "Use it from your shell:  eval \"\$(hack/cluster.sh env)\"   Stop it:  hack/cluster.sh down"
