#!/usr/bin/env bash
# bench_simagents: the simulated agents of bench/controller.sh write what the
# apiserver then returns: N Nodes, N TritonKernelCacheNodeStatus objects owned
# by their Node with C caches at the given digest (compatible, or incompatible
# with reason ArchMismatch on the first fraction of the nodes), applied on
# /status by the field manager tkm-agent; `pods` creates Pending Pods, half
# bound to another node; `wait` returns only once every cache is Ready with
# counts.nodes >= N and times out (exit 1) while one is short of it; --variants 3
# --variant-digests: every entry names its node's variant as {digest, gpuIds}.
source "$(dirname "$0")/lib.sh"

SIM=$TKM_BUILD_DIR/bench/bench_simagents
[[ -x $SIM ]] || fail "missing $SIM (build first)"
kubectl apply -f "$TKM_SOURCE_DIR/crds/" >/dev/null
e2e_crds_established tritonkernelcachenodestatuses
NS=$(e2e_namespace)
e2e_on_exit "kubectl -n $NS delete pods --all --wait=false >/dev/null 2>&1; kubectl delete nodes -l tkm.io/bench-sim=true --wait=false >/dev/null 2>&1"
D=sha256:$(printf 'bench-simagents' | sha256sum | cut -d' ' -f1)
N=20 C=5

step "setup: $N Nodes and their empty node status objects"
expect_ok "setup" "$SIM" setup --nodes $N --ns "$NS" --kind tkm
assert_eq "$N" "$(kubectl get nodes -l tkm.io/bench-sim=true -o name | wc -l | tr -d ' ')" "$N Nodes labelled"
assert_eq "$N" "$(kubectl -n "$NS" get tkcns -o name | wc -l | tr -d ' ')" "$N node status objects"

step "write: one apply on /status per node"
expect_ok "write" e2e_valgrind "$SIM" write --nodes $N --caches $C --ns "$NS" --kind tkm --digest "$D" --incompatible 0.25
assert_contains "$OUT" "\"writes\":$N,\"failed\":0" "$N writes, none failed"
J=$(kubectl -n "$NS" get tkcns -o json)
assert_eq "$N" "$(jq --arg d "$D" --argjson c $C '[.items[] | select(.status.cacheCount == $c and ([.status.caches[] | select(.digest == $d)] | length) == $c)] | length' <<<"$J")" "every node status lists $C caches at the digest"
assert_eq "5 15" "$(jq -r '[.items[] | select(.status.caches["bench-00004"].incompatibleGPUs[0].reason == "ArchMismatch")] | length' <<<"$J") $(jq -r '[.items[] | select(.status.caches["bench-00004"].compatibleGPUs[0].gpuType == "nvidia-h200")] | length' <<<"$J")" "a quarter of the nodes incompatible, the rest compatible"
UID7=$(kubectl get node sim-00007 -o jsonpath='{.metadata.uid}')
assert_eq "Node/sim-00007/$UID7" "$(jq -r '.items[] | select(.metadata.name == "sim-00007") | .metadata.ownerReferences[0] | "\(.kind)/\(.name)/\(.uid)"' <<<"$J")" "owned by its Node"
MGR=$(kubectl -n "$NS" get tkcns sim-00007 --show-managed-fields -o jsonpath='{range .metadata.managedFields[*]}{.manager}:{.operation}:{.subresource};{end}')
assert_contains "$MGR" "tkm-agent:Apply:status" "applied on /status by tkm-agent"

step "write --variants 3 --variant-digests: each entry names its node's variant by digest and GPU ids only"
VA=sha256:$(printf a%.0s $(seq 64)) VB=sha256:$(printf b%.0s $(seq 64)) VC=sha256:$(printf c%.0s $(seq 64))
expect_ok "write --variants 3" "$SIM" write --nodes $N --caches $C --ns "$NS" --kind tkm --digest "$D" --variants 3 --variant-digests "$VA,$VB,$VC"
J=$(kubectl -n "$NS" get tkcns -o json)
vof() { jq -c --arg n "$1" '.items[] | select(.metadata.name == $n) | .status.caches["bench-00004"].variants' <<<"$J"; }
assert_eq "[{\"digest\":\"$VA\",\"gpuIds\":[0]}] [{\"digest\":\"$VB\",\"gpuIds\":[0]}] [{\"digest\":\"$VC\",\"gpuIds\":[0]}]" \
  "$(vof sim-00003) $(vof sim-00001) $(vof sim-00005)" "node i uses the i % 3rd digest given"

step "pods: Pending Pods bound to another node or none"
# The ServiceAccount admission plugin wants the namespace's "default" ServiceAccount,
# which kube-controller-manager makes only when a test node runs (hack/node.sh).
kubectl -n "$NS" create serviceaccount default >/dev/null 2>&1 || true
expect_ok "pods" "$SIM" pods --count 10 --ns "$NS" --node sim-other
assert_eq "5 5" "$(kubectl -n "$NS" get pods -o json | jq -r '([.items[] | select(.spec.nodeName == "sim-other")] | length), ([.items[] | select(.spec.nodeName == null)] | length)' | paste -sd' ')" "5 bound to sim-other, 5 to no node"

step "wait: Ready with counts.nodes >= $N"
for i in $(seq 0 $((C - 1))); do
  kubectl -n "$NS" create -f - >/dev/null <<EOF
{"apiVersion":"tkm.io/v1alpha1","kind":"TritonKernelCache","metadata":{"name":"bench-0000$i"},"spec":{"cacheImage":"127.0.0.1:5000/bench/cache:v1"}}
EOF
done
ready() { # NAME NODES
  kubectl -n "$NS" patch tkc "$1" --subresource=status --type=merge -p "{\"status\":{\"counts\":{\"nodes\":$2},\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\",\"reason\":\"Bench\",\"message\":\"e2e\",\"lastTransitionTime\":\"2026-01-01T00:00:00Z\",\"observedGeneration\":1}]}}" >/dev/null
}
for i in 0 1 2 3; do ready "bench-0000$i" $N; done
ready bench-00004 $((N - 1))
expect_fail "wait times out while one cache counts $((N - 1)) nodes" "$SIM" wait --nodes $N --caches $C --ns "$NS" --kind tkm --timeout 5
assert_contains "$OUT" '"ready":4,"timeout":true' "4 of $C ready"
ready bench-00004 $N
expect_ok "wait returns once all are Ready" e2e_valgrind "$SIM" wait --nodes $N --caches $C --ns "$NS" --kind tkm --timeout 20
assert_contains "$OUT" "\"ready\":$C,\"all_ready_ms\":" "all $C ready"

e2e_done
