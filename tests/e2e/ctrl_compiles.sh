#!/usr/bin/env bash
# ctrl_compiles: what pods compiled beside a cache (issue 25) through tkm-controller and the real
# apiserver, with simulated agents. Two Nodes report compiles in their node status entries (pods
# served, pods that compiled, kernels, entries, bytes, the top kernel names, since); the CRD
# refuses counts below 0 and kernel names outside [A-Za-z0-9_.-]; the controller sums them into
# status.compiles (the earliest since, the top names by pods across nodes, hit), which
# `kubectl get tkc` shows in its Hit column; the sums follow a node's counts; kubectl tkm status
# shows the HIT column and kubectl tkm why names the kernels pods keep compiling.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/ctrl_helpers.bash"

ctrl_crds
NS=$(e2e_namespace)
CTRL_NS=$NS
P="e2e-cmp-$RANDOM"
N1=$P-a N2=$P-b
KT=$TKM_BUILD_DIR/kubectl-tkm/kubectl-tkm
[[ -x $KT ]] || fail "build kubectl-tkm first"
finish() {
  ctrl_drain_and_kill
  kubectl delete node "$N1" "$N2" --wait=false >/dev/null 2>&1
}
e2e_on_exit finish

step "a signed cache image, two Nodes, the controller"
ctrl_keys
REPO=$TKM_REGISTRY/e2e-cmp-$RANDOM/cache
DA=$(ctrl_image "$REPO" v1)
ctrl_sign "$REPO@$DA"
PUB=$(sed 's/^/      /' "$E2E_TMP/cosign.pub")
U1=$(ctrl_node "$N1") U2=$(ctrl_node "$N2")
ctrl_start c1
cat <<EOF2 | kubectl -n "$NS" apply -f - >/dev/null
apiVersion: tkm.io/v1alpha1
kind: TritonKernelCache
metadata: {name: stale}
spec:
  cacheImage: $REPO:v1
  signaturePolicy:
    mode: Enforce
    publicKey: |
$PUB
EOF2
cond_is() { [[ $(ctrl_cond "$NS" "tkc/$2" "$3") == "$1" ]]; }
wait_for 30 "stale: Verified=True" cond_is True stale Verified

# entry COMPILES: a compatible, extracted entry at the pinned digest with compiles
entry() {
  echo "{\"digest\":\"$DA\",\"verified\":true,\"extracted\":true,\"compatibleGPUs\":[{\"ids\":[0],\"gpuType\":\"nvidia-h200\"}],\"compiles\":$1}"
}
C1='{"podsServed":6,"podsCompiled":2,"tritonKernels":5,"inductorEntries":1,"vllmEntries":0,"bytes":1000,"topKernels":[{"name":"_attn_fwd","pods":2},{"name":"triton_poi_fused_add_0","pods":1}],"since":"2026-11-28T01:00:00Z"}'
C2='{"podsServed":4,"podsCompiled":3,"tritonKernels":9,"inductorEntries":0,"vllmEntries":2,"bytes":3000,"topKernels":[{"name":"_attn_fwd","pods":3},{"name":"k.other-1","pods":1}],"since":"2026-11-28T00:30:00Z"}'

step "the CRD refuses counts below 0 and kernel names outside [A-Za-z0-9_.-]{1,128}"
bad=$(ctrl_report "$NS" "$N1" "$U1" "{\"stale\":$(entry '{"podsServed":-1}')}" 2>&1 || true)
assert_contains "$bad" "podsServed" "podsServed: -1 refused by the CRD"
bad=$(ctrl_report "$NS" "$N1" "$U1" "{\"stale\":$(entry '{"topKernels":[{"name":"a b","pods":1}]}')}" 2>&1 || true)
assert_contains "$bad" "topKernels[0].name" "a kernel name with a space refused by the CRD"

step "two nodes report compiles: the cache status sums them"
ctrl_report "$NS" "$N1" "$U1" "{\"stale\":$(entry "$C1")}"
ctrl_report "$NS" "$N2" "$U2" "{\"stale\":$(entry "$C2")}"
hit_is() { [[ $(kubectl -n "$NS" get tkc stale -o jsonpath='{.status.compiles.hit}') == "$1" ]]; }
wait_for 30 "status.compiles.hit: 5 of 10 pods compiled nothing" hit_is "5/10"
assert_eq "2 10 5 14 1 2 4000 2026-11-28T00:30:00Z" \
  "$(kubectl -n "$NS" get tkc stale -o jsonpath='{.status.compiles.nodes} {.status.compiles.podsServed} {.status.compiles.podsCompiled} {.status.compiles.tritonKernels} {.status.compiles.inductorEntries} {.status.compiles.vllmEntries} {.status.compiles.bytes} {.status.compiles.since}')" \
  "status.compiles: nodes, the sums and the earliest since"
assert_eq "_attn_fwd=5 k.other-1=1 triton_poi_fused_add_0=1" \
  "$(kubectl -n "$NS" get tkc stale -o json | jq -r '[.status.compiles.topKernels[] | "\(.name)=\(.pods)"] | join(" ")')" \
  "topKernels: pods summed across nodes, most first, then by name"
out=$(kubectl -n "$NS" get tkc stale)
assert_contains "$(head -1 <<<"$out")" "HIT" "kubectl get tkc has a Hit column"
assert_contains "$out" "5/10" "kubectl get tkc shows the hits"

step "kubectl tkm: the HIT column and why names the kernels"
st=$("$KT" status -n "$NS" --no-color --width 0)
assert_contains "$(head -1 <<<"$st")" "HIT" "kubectl tkm status has a HIT column"
assert_contains "$st" "tkc/stale   5/10" "the hits of the cache"
why=$("$KT" why stale -n "$NS" --no-color)
assert_contains "$why" "5 of 10 pods served compiled beside the cache since 2026-11-28T00:30:00Z: 14 Triton kernels" "why: the compiles step"
assert_contains "$why" "kernels pods keep compiling" "why: the kernels are listed"
assert_contains "$why" "  _attn_fwd                                5" "why: the top kernel with its pods"
assert_contains "$why" "tkmctl capture (docs/capture.md)" "why: re-capture advised"
why1=$("$KT" why stale -n "$NS" --node "$N2" --no-color)
assert_contains "$why1" "most compiled: _attn_fwd (3), k.other-1 (1)" "why --node: the node's own kernels"
assert_eq "5/10" "$("$KT" status -n "$NS" -o json | jq -r '.caches[0].compiles.hit')" "kubectl tkm status -o json: compiles"

step "a node's counts change: the sums follow"
ctrl_report "$NS" "$N2" "$U2" "{\"stale\":$(entry '{"podsServed":8,"podsCompiled":3,"tritonKernels":9,"since":"2026-11-28T00:30:00Z"}')}"
wait_for 30 "status.compiles.hit: 9 of 14" hit_is "9/14"
assert_eq "_attn_fwd=2 triton_poi_fused_add_0=1" \
  "$(kubectl -n "$NS" get tkc stale -o json | jq -r '[.status.compiles.topKernels[] | "\(.name)=\(.pods)"] | join(" ")')" \
  "topKernels follow: node 2 names none now"

step "the cache goes"
kubectl -n "$NS" delete tkc stale --wait=false >/dev/null
gone() { ! kubectl -n "$NS" get tkc stale >/dev/null 2>&1; }
wait_for 30 "the cache is finalized" gone
pass "ctrl_compiles"
