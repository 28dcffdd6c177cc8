#!/usr/bin/env bash
# agent_three: three tkm-agent processes on the real apiserver and registry, one per
# GPU root (H200 sm90, A100 sm80, MI300X gfx942), judge a cache built from the sm90
# fixture, signed with real cosign, its digest pinned by the test. The H200 node
# reports it compatible and verified; the A100 and MI300X nodes incompatible with the
# reason; the namespaced and the cluster cache each land in their kind, owned by the
# Node; deletion removes entries and empty objects; a node status deleted by hand is
# recreated; a field another manager takes is taken back.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/agent.inc"
e2e_crds
agent_ns
COSIGN=$("$TKM_SOURCE_DIR/hack/testbin/build.sh" --path cosign)
export COSIGN_PASSWORD='' COSIGN_YES=true
cd "$E2E_TMP"

step "image from the sm90 fixture, pushed and signed with cosign"
REPO=$TKM_REGISTRY/e2e-agent-three-$RANDOM/vadd
D=$(agent_image "$REPO" "$TKM_FIXTURES/triton-cache/triton-3.6.0-cuda-sm90.tar.gz")
[[ $D == sha256:* ]] || fail "no digest from push: $D"
"$COSIGN" generate-key-pair >/dev/null 2>&1
"$COSIGN" sign --key cosign.key --tlog-upload=false -y "$REPO@$D" >/dev/null 2>&1 || fail "cosign sign"
pass "image $REPO@$D signed"

step "tkm-config (Enforce with the key), caches, nodes"
kubectl -n "$NS" create configmap tkm-config --from-literal=signatureMode=Enforce \
  --from-file=signaturePublicKeys=cosign.pub >/dev/null
CC=e2e-agent-cc-$RANDOM
cache_create tkc "$NS" vadd "$REPO:v1" "$D"
cache_create tkcc - "$CC" "$REPO:v1" "$D"
S=$RANDOM
N1=e2e-h200-$S N2=e2e-a100-$S N3=e2e-mi300x-$S
for n in $N1 $N2 $N3; do agent_node "$n"; done

step "three agents"
t0=$SECONDS
agent_start h200 h200 "$N1" "$NS" -v 1
agent_start a100 a100 "$N2" "$NS"
agent_start mi300x mi300x "$N3" "$NS"

wait_jp 60 "H200: vadd verified" true tkcns "$N1" "$NS" '{.status.caches.vadd.verified}'
echo "first node status after $((SECONDS - t0)) s"
assert_eq "$(jp tkcns "$N1" "$NS" '{.status.caches.vadd.digest}')" "$D" "H200: the pinned digest"
assert_eq "$(jp tkcns "$N1" "$NS" '{.status.caches.vadd.compatibleGPUs[0].gpuType}:{.status.caches.vadd.compatibleGPUs[0].ids[0]}')" "nvidia-h200:0" "H200: GPU 0 compatible"
assert_eq "$(jp tkcns "$N1" "$NS" '{.status.gpus[0].arch} {.status.gpus[0].productName} {.status.gpus[0].uuid} {.status.gpuCount}')" "90 NVIDIA H200 GPU-9e6a0cf1-1528-6ed0-474d-41f4c7634e37 1" "H200: gpus[] from the probe"
assert_eq "$(jp tkcns "$N1" "$NS" '{.status.caches.vadd.error}')" "" "H200: no error"
N1UID=$(kubectl get node "$N1" -o jsonpath='{.metadata.uid}')
assert_eq "$(jp tkcns "$N1" "$NS" '{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].uid}')" "Node/$N1UID" "owned by the Node"
MGR=$(kubectl get tkcns "$N1" -n "$NS" --show-managed-fields -o jsonpath='{range .metadata.managedFields[*]}{.manager}:{.operation}:{.subresource};{end}')
assert_contains "$MGR" "tkm-agent:Apply:status" "status applied by tkm-agent through /status"

wait_jp 60 "A100: vadd judged" ArchMismatch tkcns "$N2" "$NS" '{.status.caches.vadd.incompatibleGPUs[0].reason}'
assert_contains "$(jp tkcns "$N2" "$NS" '{.status.caches.vadd.incompatibleGPUs[0].message}')" "arch mismatch: cache built for sm90, GPU 0 (NVIDIA A100-SXM4-80GB) is sm80" "A100: the reason in words"
assert_eq "$(jp tkcns "$N2" "$NS" '{.status.caches.vadd.verified} {.status.caches.vadd.compatibleGPUs}')" "true []" "A100: verified, no compatible GPU"
wait_jp 60 "MI300X: vadd judged" BackendMismatch tkcns "$N3" "$NS" '{.status.caches.vadd.incompatibleGPUs[0].reason}'
assert_contains "$(jp tkcns "$N3" "$NS" '{.status.caches.vadd.incompatibleGPUs[0].message}')" "cache built for cuda, GPU 0 (AMD Instinct MI300X) is hip" "MI300X: the reason in words"
assert_eq "$(jp tkcns "$N3" "$NS" '{.status.gpus[0].arch} {.status.gpus[0].warpSize}')" "gfx942 64" "MI300X: gfx942, wave 64"

step "the cluster cache lands in the cluster kind"
for n in $N1 $N2 $N3; do
  wait_jp 30 "$n: $CC in tkcnsc" "$D" tkcnsc "$n" - "{.status.caches.$CC.digest}"
  assert_eq "$(jp tkcns "$n" "$NS" "{.status.caches.$CC.digest}")" "" "$n: $CC not in the namespaced kind"
done
assert_eq "$(jp tkcnsc "$N1" - "{.status.caches.$CC.compatibleGPUs[0].gpuType}")" nvidia-h200 "H200: cluster cache compatible"

step "write only on change"
RV1=$(jp tkcns "$N1" "$NS" '{.metadata.resourceVersion}')
sleep 5
assert_eq "$RV1" "$(jp tkcns "$N1" "$NS" '{.metadata.resourceVersion}')" "no write without a change (resourceVersion kept for 5 s)"

step "another field manager changes the agent's field: taken back (force)"
kubectl patch tkcns "$N1" -n "$NS" --subresource=status --type=merge --field-manager=intruder \
  -p '{"status":{"caches":{"vadd":{"verified":false}}}}' >/dev/null
wait_jp 30 "verified restored by the agent" true tkcns "$N1" "$NS" '{.status.caches.vadd.verified}'
MGR=$(kubectl get tkcns "$N1" -n "$NS" --show-managed-fields -o json | jq -r '[.metadata.managedFields[] | select(.manager=="intruder") | .fieldsV1 | tostring] | join(" ")')
assert_not_contains "$MGR" "f:verified" "the intruder no longer owns verified"

step "a node status deleted by hand is recreated"
kubectl delete tkcns "$N1" -n "$NS" >/dev/null
wait_jp 30 "recreated" true tkcns "$N1" "$NS" '{.status.caches.vadd.verified}'

step "the Node deleted (no garbage collector here: its status deleted by hand), then recreated"
kubectl delete node "$N2" >/dev/null
kubectl delete tkcns "$N2" -n "$NS" >/dev/null
sleep 6
assert_eq "" "$(kubectl get tkcns "$N2" -n "$NS" --ignore-not-found -o name)" "not recreated while the Node is gone"
agent_node "$N2"
N2UID=$(kubectl get node "$N2" -o jsonpath='{.metadata.uid}')
wait_jp 30 "recreated, owned by the new Node" "Node/$N2UID" tkcns "$N2" "$NS" '{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].uid}'

step "deletion removes entries; an object with no caches left is deleted"
kubectl delete tkcc "$CC" >/dev/null
wait_jp 30 "H200: $CC entry gone" "" tkcnsc "$N1" - "{.status.caches.$CC.digest}"
kubectl delete tkc vadd -n "$NS" >/dev/null
for n in $N1 $N2 $N3; do
  wait_for 30 "$n: namespaced node status deleted" bash -c "! kubectl get tkcns $n -n $NS >/dev/null 2>&1"
done

step "SIGTERM: a clean stop"
for a in h200 a100 mi300x; do
  agent_stop $a
  assert_not_contains "$(agent_log $a)" "ERROR" "$a: no error in the log"
done
e2e_done
