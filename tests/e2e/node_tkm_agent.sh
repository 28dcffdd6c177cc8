#!/usr/bin/env bash
# node_tkm_agent: the real tkm-agent (merged) and tkm-csi as the tkm-node DaemonSet
# from manifests/overlays/fixture-gpu on the real node, without tkm-controller: its
# Deployment is left out and the test pins the digest in the cache's status as the
# controller would (as e2e.agent_three does), so a node-side failure is told apart
# from a controller one; e2e.node_tkm_full runs the same with the controller.
#
# The issue's scenario: tkm-agent + tkm-csi as the tkm-node DaemonSet with the
# tkm-agent ServiceAccount's bound token, the H200 GPU root of
# tests/fixtures/gpu/roots/h200 and the fake NVML; a TritonKernelCache of the sm90
# fixture image, signed with cosign, verified and reported compatible by the agent; a workload pod with a csi.tkm.io inline volume
# sees the cache at its mountPath with group files rewritten for it and writes a
# kernel into its scratch layer only; a second pod shares the store copy; a pod in
# another namespace naming the first namespace's cache stays ContainerCreating with
# PermissionDenied in `kubectl describe pod`; deleting the agent pod mid-publish and
# restarting kubelet both converge; deleting the pods leaves no mount and no dir.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
hack=$TKM_SOURCE_DIR/hack
eval "$("$hack/node.sh" env)"
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f", b-a}'; }
is() { [[ $(kubectl -n "$1" get "$2" -o jsonpath="$3" 2>/dev/null) == "$4" ]]; } # NS OBJ JSONPATH VALUE
none() { [[ -z $("$@" 2>/dev/null) ]]; }
TAG=e2e
NSA=e2e-tkm-a-$RANDOM NSB=e2e-tkm-b-$RANDOM # workload namespaces (a later run never meets a terminating one)
STORE=/var/lib/tkm/store
CACHES=/var/run/tkm/caches
KROOT=$TKM_KUBELET_ROOT
TKMCTL=$TKM_BUILD_DIR/cli/tkmctl
FAKE_NVML=$TKM_BUILD_DIR/fakenvml/libnvidia-ml.so.1
COSIGN=$("$hack/testbin/build.sh" --path cosign)
export COSIGN_PASSWORD= COSIGN_YES=true
[[ $KROOT == /var/lib/kubelet ]] || fail "the DaemonSet mounts /var/lib/kubelet; the test node's kubelet root is $KROOT"
[[ -x $TKMCTL && -f $FAKE_NVML ]] || fail "build tkmctl and the fake NVML first"
t_all=$(now)

step "images: make images (tkm-agent, tkm-csi)"
t0=$(now)
new_dirs=()
for d in /var/lib/tkm /var/run/tkm /var/lib/tkm-fixture-gpu; do [[ -e $d ]] || new_dirs+=("$d"); done
# At exit, in this order: the workload pods (kubelet unpublishes their volumes through the
# driver), tkm's workloads, the CSIDriver, then what this test put on the host.
e2e_on_exit "kubectl delete pods -n $NSA --all --wait=true --timeout=60s >/dev/null 2>&1; kubectl delete pods -n $NSB --all --wait=true --timeout=60s >/dev/null 2>&1; kubectl delete ns $NSA $NSB --ignore-not-found --wait=false >/dev/null 2>&1; kubectl -n tkm-system delete ds tkm-node --ignore-not-found --wait=true --timeout=60s >/dev/null 2>&1; kubectl delete csidriver csi.tkm.io --ignore-not-found >/dev/null 2>&1; ${new_dirs[*]:+rm -rf --one-file-system ${new_dirs[*]}}"
expect_ok "hack/images/all.sh" "$hack/images/all.sh" "$TKM_BUILD_DIR" "$TKM_REGISTRY" "$TAG"
for n in tkm-agent tkm-csi; do
  assert_contains "$OUT" "$n $TKM_REGISTRY/tkm/$n:$TAG" "$n image pushed"
done
echo "timing: images: $(since "$t0") s"

step "the cache image: the sm90 fixture built with tkmctl, pushed, signed with cosign"
IMG=$E2E_TMP/img
REPO=$TKM_REGISTRY/e2e-node-tkm-$RANDOM/vadd
mkdir -p "$IMG/c" && tar -xzf "$TKM_FIXTURES/triton-cache/triton-3.6.0-cuda-sm90.tar.gz" -C "$IMG/c"
"$TKMCTL" build "$IMG/c/$(ls "$IMG/c")" --output "$IMG/layout" >/dev/null 2>&1 || fail "tkmctl build"
"$TKMCTL" push "$IMG/layout" "$REPO:v1" -o json >"$IMG/push.json" 2>"$IMG/push.err" || fail "tkmctl push: $(cat "$IMG/push.err")"
D=$(jq -r .digest "$IMG/push.json")
[[ $D == sha256:* ]] || fail "no digest from tkmctl push: $D"
(cd "$IMG" && "$COSIGN" generate-key-pair >/dev/null 2>&1 && "$COSIGN" sign --key cosign.key --tlog-upload=false -y "$REPO@$D" >/dev/null 2>&1) ||
  fail "cosign sign"
pass "image $REPO@$D signed"

step "deploy: manifests/overlays/fixture-gpu (H200 root) without the controller, with tkm-agent's token"
ov=$E2E_TMP/overlay
mkdir -p "$ov"
cat >"$ov/kustomization.yaml" <<EOT
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- $(realpath --relative-to="$ov" "$TKM_SOURCE_DIR/manifests/overlays/fixture-gpu")
patches:
- patch: |-
    \$patch: delete
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: tkm-controller, namespace: tkm-system}
EOT
t_deploy=$(now)
expect_ok "hack/deploy.sh" "$hack/deploy.sh" --overlay "$ov" --tag "$TAG" \
  --fixture-gpu-root "$TKM_FIXTURES/gpu/roots/h200" --fakenvml "$FAKE_NVML"
e2e_crds >/dev/null
wait_for 180 "tkm-node Ready (agent and csi, probes passing)" is tkm-system ds/tkm-node '{.status.numberReady}' 1
echo "timing: deploy -> node pod Ready: $(since "$t_deploy") s"
NODEPOD=$(kubectl -n tkm-system get pods -l app.kubernetes.io/name=tkm-node -o jsonpath='{.items[0].metadata.name}')
assert_eq "tkm-agent" "$(kubectl -n tkm-system get pod "$NODEPOD" -o jsonpath='{.spec.serviceAccountName}')" "node pod: ServiceAccount tkm-agent"
wait_for 60 "CSINode lists csi.tkm.io" is default "csinode/$TKM_NODE_NAME" '{.spec.drivers[*].name}' csi.tkm.io
for c in tkm-agent tkm-csi; do
  assert_eq "true" "$(kubectl -n tkm-system get pod "$NODEPOD" -o jsonpath="{.status.containerStatuses[?(@.name==\"$c\")].ready}")" "$c ready"
done

step "a TritonKernelCache of the fixture image: pinned (by the test), verified and compatible on the H200 node"
kubectl create namespace "$NSA" >/dev/null
kubectl create namespace "$NSB" >/dev/null
kubectl -n $NSA create secret generic kernel-signing-key --from-file=cosign.pub="$IMG/cosign.pub" >/dev/null
MP=/home/ml/.triton/cache
kubectl apply -f - >/dev/null <<EOT
apiVersion: tkm.io/v1alpha1
kind: TritonKernelCache
metadata: {name: vadd, namespace: $NSA}
spec:
  cacheImage: $REPO:v1
  mountPath: $MP
  signaturePolicy:
    mode: Enforce
    publicKeySecretRef: {name: kernel-signing-key, key: cosign.pub}
EOT
kubectl -n "$NSA" patch tkc vadd --subresource=status --type=merge -p "{\"status\":{\"resolvedDigest\":\"$D\"}}" >/dev/null
pass "digest pinned in status.resolvedDigest, as tkm-controller would"
wait_for 90 "the agent (its own token) reports vadd verified on $TKM_NODE_NAME" is $NSA "tkcns/$TKM_NODE_NAME" '{.status.caches.vadd.verified}' true
assert_eq "nvidia-h200" "$(kubectl -n $NSA get tkcns "$TKM_NODE_NAME" -o jsonpath='{.status.caches.vadd.compatibleGPUs[0].gpuType}')" "compatible with the fixture H200"
MGR=$(kubectl -n $NSA get tkcns "$TKM_NODE_NAME" --show-managed-fields -o jsonpath='{range .metadata.managedFields[*]}{.manager}:{.operation}:{.subresource};{end}')
assert_contains "$MGR" "tkm-agent:Apply:status" "the node status was applied by tkm-agent"

source "$(dirname "$0")/node_workloads.inc"
