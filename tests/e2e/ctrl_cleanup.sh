#!/usr/bin/env bash
# ctrl_cleanup: the finalizer keeps a deleted cache until every node status entry of
# it is gone: entries the agents drop themselves, and (after --cleanup-timeout) those
# of a node whose agent does not, removed by the controller. A cache deleted while the
# controller is down is cleaned up after it starts. The status objects of a deleted
# Node disappear (no garbage collector runs in this cluster: the controller does it),
# also when the Node was deleted while the controller was down.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/ctrl_helpers.bash"

ctrl_crds
NS=$(e2e_namespace)
CTRL_NS=$NS
P="e2e-cleanup-$RANDOM"
N1=$P-1 N2=$P-2 N3=$P-3
finish() {
  kubectl -n "$NS" delete tkc --all --wait=false >/dev/null 2>&1
  for _ in $(seq 20); do [[ -z $(kubectl -n "$NS" get tkc -o name 2>/dev/null) ]] && break; sleep 0.5; done
  ctrl_kill_all
  kubectl delete node "$N1" "$N2" "$N3" --wait=false >/dev/null 2>&1
}
e2e_on_exit finish

REPO=$TKM_REGISTRY/e2e-ctrl-$RANDOM/cache
D=$(ctrl_image "$REPO" v1)
U1=$(ctrl_node "$N1") U2=$(ctrl_node "$N2") U3=$(ctrl_node "$N3")
# the caches here switch signature checks off for themselves: the admin allows it (issue 23)
kubectl -n "$NS" create configmap tkm-config --from-literal=signatureFloor=Disabled >/dev/null
for c in gone keep forced; do
  cat <<EOF2 | kubectl -n "$NS" apply -f - >/dev/null
apiVersion: tkm.io/v1alpha1
kind: TritonKernelCache
metadata: {name: $c}
spec: {cacheImage: "$REPO:v1", signaturePolicy: {mode: Disabled}}
EOF2
done
both="{\"gone\":$(ctrl_entry "$D" compat),\"keep\":$(ctrl_entry "$D" compat)}"
only_keep="{\"keep\":$(ctrl_entry "$D" compat)}"
ctrl_report "$NS" "$N1" "$U1" "$both"
ctrl_report "$NS" "$N2" "$U2" "$both"
ctrl_report "$NS" "$N3" "$U3" "$only_keep"

step "the controller adds its finalizer and aggregates"
ctrl_start c1
has_fin() { [[ $(kubectl -n "$NS" get tkc "$1" -o jsonpath='{.metadata.finalizers}') == *tkm.io/cleanup* ]]; }
wait_for 30 "finalizer on gone" has_fin gone
wait_for 30 "finalizer on forced" has_fin forced
pinned() { [[ -n $(kubectl -n "$NS" get tkc "$1" -o jsonpath='{.status.resolvedDigest}') ]]; }
wait_for 30 "forced is pinned (state written)" pinned forced
ready() { [[ $(ctrl_cond "$NS" "tkc/$1" Ready) == True ]]; }
wait_for 30 "gone is Ready (verification Disabled: usable)" ready gone
assert_eq "VerificationDisabled" "$(ctrl_reason "$NS" tkc/gone Verified)" "Verified reason says checks are disabled"

step "the cache is deleted while the controller is down"
ctrl_kill c1 KILL
kubectl -n "$NS" delete tkc gone --wait=false >/dev/null
kubectl -n "$NS" patch tkc forced --type=json -p '[{"op":"remove","path":"/metadata/finalizers"}]' >/dev/null
kubectl -n "$NS" delete tkc forced >/dev/null
sleep 1
assert_eq "gone" "$(kubectl -n "$NS" get tkc gone -o jsonpath='{.metadata.name}')" "the finalizer holds the deleted cache"
step "agent 1 drops its entry; agent 2 is dead and does not"
ctrl_report "$NS" "$N1" "$U1" "$only_keep"
ctrl_start c2
absent() { ! kubectl -n "$NS" get tkc "$1" >/dev/null 2>&1; }
wait_for 30 "the deleted cache is finished after the controller starts" absent gone
assert_contains "$(cat "$E2E_TMP/c2.log")" "forgot the state of 1 cache(s) that no longer exist" "the state of a cache force-removed while down is dropped"
entries() { kubectl -n "$NS" get tkcns "$1" -o jsonpath='{.status.caches}' | python3 -c 'import json,sys; print(" ".join(sorted(json.load(sys.stdin))))'; }
assert_eq "keep" "$(entries "$N2")" "the dead agent's entry was removed by the controller, the other kept"
assert_eq "keep" "$(entries "$N1")" "agent 1's object keeps its other cache"
assert_contains "$(cat "$E2E_TMP/c2.log")" "removing the entry of node $N2" "the controller says whose entry it removed"
assert_not_contains "$(cat "$E2E_TMP/c2.log")" "removing the entry of node $N1" "it did not touch the entry the agent dropped"
wait_for 20 "keep is still Ready" ready keep

step "a deleted Node's status objects disappear"
kubectl delete node "$N3" >/dev/null
ns_absent() { ! kubectl -n "$NS" get tkcns "$1" >/dev/null 2>&1; }
wait_for 20 "tkcns of the deleted node $N3 removed" ns_absent "$N3"
counts() { [[ $(kubectl -n "$NS" get tkc keep -o jsonpath='{.status.counts.nodes}') == "$1" ]]; }
wait_for 20 "keep counts 2 nodes now" counts 2

step "a Node deleted while the controller is down"
ctrl_kill c2 TERM
kubectl delete node "$N2" >/dev/null
ctrl_start c3
wait_for 30 "tkcns of $N2 removed after the controller starts" ns_absent "$N2"
assert_eq "$N1" "$(kubectl -n "$NS" get tkcns -o jsonpath='{.items[*].metadata.name}')" "the live node's status object stays"
e2e_done
