#!/usr/bin/env bash
# The main job on a fresh machine (`make demo`): installs what it needs, builds
# tkm, starts a local control plane (etcd + kube-apiserver on loopback) and an
# OCI registry, installs the CRDs and the samples, and shows them.
#
# Afterwards:  eval "$(hack/cluster.sh env)"; kubectl get tkm -A
# Stop with:   hack/cluster.sh down
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/lib.sh
log "1/5 Debian packages"
hack/deps.sh
log "2/5 Go-built test binaries (etcd, kube-apiserver, kubectl, cosign, crane; first run only)"
hack/testbin/build.sh
log "3/5 build tkm"
cmake -S . -B build -G Ninja >/dev/null
ninja -C build
log "4/5 control plane and registry"
hack/cluster.sh up
eval "$(hack/cluster.sh env)"
log "5/5 CRDs and samples"
kubectl apply --server-side -f crds/
kubectl wait --for=condition=Established crd -l app.kubernetes.io/part-of=tkm --timeout=60s
kubectl apply -f manifests/samples/namespace.yaml
kubectl apply -f manifests/samples/
for _ in $(seq 1 30); do
  [[ $(kubectl api-resources --categories=tkm --no-headers 2>/dev/null | wc -l) -eq 4 ]] && break
  sleep 1
done
echo
echo "\$ kubectl get tkm -A"
kubectl get tkm -A
echo
echo "Use it from your shell:  eval \"\$(hack/cluster.sh env)\"   Stop it:  hack/cluster.sh down"
