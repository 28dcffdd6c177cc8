#!/usr/bin/env bash
# ctrl_agent: tkm-controller with real tkm-agents (fake GPU roots from tests/fixtures/gpu):
# the controller pins the digest, the agents on an H200 node and an A100 node judge it,
# the cache goes Ready with counts 2/1/1 and the A100 named in failedNodes; a deleted
# cache is gone well before --cleanup-timeout (120 s): the agents drop the entries of a cache
# with a deletionTimestamp at once, the finalizer then goes, and no node status names it.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/agent.inc"
source "$(dirname "$0")/ctrl_helpers.bash"

ctrl_crds
agent_ns
CTRL_NS=$NS
e2e_on_exit "kubectl -n $NS delete tkc --all --wait=false >/dev/null 2>&1; sleep 3; ctrl_kill_all"
REPO=$TKM_REGISTRY/e2e-ctrl-agent-$RANDOM/vadd
agent_image "$REPO" "$TKM_FIXTURES/triton-cache/triton-3.6.0-cuda-sm90.tar.gz" >/dev/null
D=$("$CRANE" digest "$REPO:v1")
# the caches here switch signature checks off for themselves: the admin allows it (issue 23)
kubectl -n "$NS" create configmap tkm-config --from-literal=signatureFloor=Disabled >/dev/null
cache_create tkc "$NS" a "$REPO:v1" "" "  signaturePolicy: {mode: Disabled}"
H=e2e-ctrl-h200-$RANDOM A=e2e-ctrl-a100-$RANDOM
agent_node "$H"
agent_node "$A"

step "the controller pins, two real agents judge"
ctrl_start c1 --cleanup-timeout 120s
pinned() { [[ $(kubectl -n "$NS" get tkc a -o jsonpath='{.status.resolvedDigest}') == "$D" ]]; }
wait_for 30 "the controller pins the digest" pinned
agent_start h200 h200 "$H" "$NS"
agent_start a100 a100 "$A" "$NS"
counts() { [[ $(kubectl -n "$NS" get tkc a -o jsonpath='{.status.counts.nodes}/{.status.counts.compatible}/{.status.counts.incompatible}') == 2/1/1 ]]; }
wait_for 90 "counts nodes/compatible/incompatible = 2/1/1 from the agents' reports" counts
assert_eq True "$(ctrl_cond "$NS" tkc/a Ready)" "Ready with one compatible node"
assert_eq "$A" "$(kubectl -n "$NS" get tkc a -o jsonpath='{.status.failedNodes[0].node}')" "the A100 node is in failedNodes"
echo "A100 verdict: $(kubectl -n "$NS" get tkc a -o jsonpath='{.status.failedNodes[0].reason}: {.status.failedNodes[0].message}')"

step "delete: entries dropped, the finalizer goes"
t0=$SECONDS
kubectl -n "$NS" delete tkc a --wait=false >/dev/null
gone() { ! kubectl -n "$NS" get tkc a >/dev/null 2>&1; }
wait_for 30 "the cache is gone, its entries dropped by the agents (the controller's timeout is 120 s)" gone
pass "gone after $((SECONDS - t0)) s"
for n in "$H" "$A"; do
  assert_not_contains "$(kubectl -n "$NS" get tkcns "$n" -o jsonpath='{.status.caches}')" '"a"' "node $n no longer reports the cache"
done
e2e_done
