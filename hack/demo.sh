#!/usr/bin/env bash
# The main job on a fresh machine (`make demo`): installs what it needs, builds
# tkm, starts a local control plane (etcd + kube-apiserver on loopback) and an
# OCI registry, installs the CRDs and manifests/base, packs a real Triton cache
# (compiled on an H200, from tests/fixtures) into an image with tkmctl, pushes it
# to the local registry and signs it with cosign, starts tkm-controller and
# tkm-agent (hack/tkm-local.sh: local processes, a Node object whose GPU is the
# fixture H200), declares the cache by tag with a TritonKernelCache and waits
# until it is Ready: digest pinned, signature verified, compatible on the node.
#
# Afterwards:  eval "$(hack/cluster.sh env)"; kubectl get tkm -A
# Stop with:   hack/cluster.sh down   (stops the daemons too)
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/lib.sh
log "1/8 Debian packages"
hack/deps.sh
log "2/8 Go-built test binaries (etcd, kube-apiserver, kubectl, cosign, crane; first run only)"
hack/testbin/build.sh
log "3/8 build tkm"
cmake -S . -B build -G Ninja >/dev/null
ninja -C build
log "4/8 control plane and registry"
hack/cluster.sh up
eval "$(hack/cluster.sh env)"
log "5/8 CRDs, tkm-system, least-privilege RBAC and samples"
kubectl apply --server-side -f crds/
kubectl wait --for=condition=Established crd -l app.kubernetes.io/part-of=tkm --timeout=60s
# The namespace, RBAC and admission policy of manifests/base; its workloads (the
# controller Deployment and the node DaemonSet) need a node: here the daemons run
# as local processes (step 7), on the real node as pods (docs/deploy.md).
for f in namespace rbac-controller rbac-agent admission-nodestatus; do
  kubectl apply --server-side -f "manifests/base/$f.yaml" >/dev/null
done
kubectl apply -f manifests/samples/namespace.yaml
kubectl apply -f manifests/samples/
log "6/8 a real kernel cache image, signed"
fixtures=${TKM_FIXTURES:-tests/fixtures}
cache_tgz=$fixtures/triton-cache/triton-3.6.0-cuda-sm90.tar.gz
image=$TKM_REGISTRY/kernels/vector-add:triton-3.6.0-sm90
[[ -f $cache_tgz ]] || die "$cache_tgz is missing: the fixtures ship with the repository (tests/fixtures); is this a full clone?"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -xzf "$cache_tgz" -C "$work/" --one-top-level=cache
src=$work/cache
# The archive may hold the cache dir itself or its parent.
[[ $(find "$src" -mindepth 1 -maxdepth 1 | wc -l) -eq 1 && -d $(find "$src" -mindepth 1 -maxdepth 1) ]] &&
  src=$(find "$src" -mindepth 1 -maxdepth 1)
build/cli/tkmctl build "$src" --push "$image"
echo "\$ tkmctl inspect $image"
build/cli/tkmctl inspect "$image"
digest=$(build/cli/tkmctl inspect "$image" -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["manifestDigest"])')
[[ $digest == sha256:* ]] || die "tkmctl inspect printed no digest for $image"
cosign=$(hack/testbin/build.sh --path cosign3)
(cd "$work" && COSIGN_PASSWORD= "$cosign" generate-key-pair >/dev/null 2>&1) || die "cosign generate-key-pair failed"
echo "\$ cosign sign --key cosign.key ${image%%:triton-*}@$digest   # cosign v3: a Sigstore bundle"
COSIGN_PASSWORD= COSIGN_YES=true "$cosign" sign --key "$work/cosign.key" --use-signing-config=false \
  --tlog-upload=false -y "${image%%:triton-*}@$digest" >"$work/sign.log" 2>&1 ||
  { cat "$work/sign.log" >&2; die "cosign sign failed"; }
# The cluster default policy: Enforce, with this key (docs/security.md).
kubectl -n tkm-system create configmap tkm-config --from-literal=signatureMode=Enforce \
  --from-file=signaturePublicKeys="$work/cosign.pub" --dry-run=client -o yaml | kubectl apply -f - >/dev/null

log "7/8 tkm-controller and tkm-agent (local processes; node demo-node with the fixture H200 as its GPU)"
hack/tkm-local.sh up build

log "8/8 the cache, declared by tag: the controller pins the digest and verifies, the agent judges the GPU"
kubectl apply -f - <<YAML
apiVersion: tkm.io/v1alpha1
kind: TritonKernelCache
metadata:
  name: vector-add-local
  namespace: ml
spec:
  cacheImage: $image
YAML
if ! kubectl -n ml wait --for=condition=Ready tkc/vector-add-local --timeout=90s >/dev/null; then
  kubectl -n ml describe tkc vector-add-local >&2 || true
  die "the cache did not become Ready (logs: ${TKM_CLUSTER_DIR:-.tkm/cluster}/tkm-*.log)"
fi
pinned=$(kubectl -n ml get tkc vector-add-local -o jsonpath='{.status.resolvedDigest}')
[[ $pinned == "$digest" ]] || die "pinned digest $pinned is not the pushed image's $digest"
echo
echo "\$ kubectl get tkcns -n ml   # the node's own view, written by tkm-agent"
kubectl get tkcns -n ml
echo
echo "\$ kubectl get tkc -n ml"
kubectl get tkc -n ml
echo
echo "vector-add-h200 (manifests/samples) names an image this machine cannot pull; its Ready condition says why:"
kubectl -n ml get tkc vector-add-h200 -o jsonpath='{range .status.conditions[?(@.type=="Ready")]}  {.reason}: {.message}{"\n"}{end}'
echo
echo "Use it from your shell:  eval \"\$(hack/cluster.sh env)\"   Stop it:  hack/tkm-local.sh down; hack/cluster.sh down"
