#!/usr/bin/env bash
# ctrl_variants: mixed fleets (issue 24) through tkm-controller and the real apiserver, with
# simulated agents. Two Node objects (no kubelet): one reports the cache usable with its variant,
# one reports its GPU without a variant (NoVariant, served as an empty volume). The controller
# labels exactly the compatible Node (tkc.tkm.io/<ns>.<name>=true), writes status.variants,
# gpuTypesWithoutVariant, variantSummary (the Variants column of kubectl get tkc) and nodeLabel;
# the label follows the node status (removed when the node stops being compatible, back when it
# is again), a stray label under the controller's prefix is removed, and the label goes with the
# cache. A node names its variant by digest only: the target in status.variants is the one the
# signed index gives it; a digest the index does not list is not counted (the node has not caught
# up). The CRD refuses a bad whenIncompatible and a bad fallback; kubectl tkm schedule prints
# the recipe with the label, and a Deployment with that nodeSelector is accepted.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/ctrl_helpers.bash"

ctrl_crds
NS=$(e2e_namespace)
CTRL_NS=$NS
P="e2e-var-$RANDOM"
N1=$P-h200 N2=$P-a100
KT=$TKM_BUILD_DIR/kubectl-tkm/kubectl-tkm
[[ -x $KT ]] || fail "build kubectl-tkm first"
finish() {
  ctrl_drain_and_kill
  kubectl delete node "$N1" "$N2" --wait=false >/dev/null 2>&1
}
e2e_on_exit finish

step "a signed variant index (one sm90 variant), two Nodes, the controller"
ctrl_keys
REPO=$TKM_REGISTRY/e2e-var-$RANDOM/cache
DA=$(ctrl_image "$REPO" v1 --add-variant)
ctrl_sign "$REPO@$DA"
V90=$("$CRANE" manifest "$REPO@$DA" | jq -r '.manifests[] | select(.annotations["cache.triton.image/arch"] == "90") | .digest')
[[ $V90 == sha256:* ]] || fail "no sm90 variant in the index $DA"
case $(uname -m) in x86_64) HOSTCPU=amd64 ;; aarch64) HOSTCPU=arm64 ;; *) HOSTCPU=$(uname -m) ;; esac
PLATFORM=linux/$HOSTCPU
ONPLAT=$([[ $HOSTCPU == amd64 ]] || echo " $PLATFORM") # variantSummary names a platform but amd64
PUB=$(sed 's/^/      /' "$E2E_TMP/cosign.pub")
U1=$(ctrl_node "$N1") U2=$(ctrl_node "$N2")
ctrl_start c1

step "the CRDs: whenIncompatible is Fail or Empty, fallback only Empty"
bad=$(kubectl -n "$NS" apply -f - 2>&1 <<EOF2 || true
apiVersion: tkm.io/v1alpha1
kind: TritonKernelCache
metadata: {name: bad-policy}
spec: {cacheImage: "$REPO:v1", whenIncompatible: Skip}
EOF2
)
assert_contains "$bad" 'spec.whenIncompatible: Unsupported value: "Skip"' "whenIncompatible: Skip refused by the CRD"
cat <<EOF2 | kubectl -n "$NS" apply -f - >/dev/null
apiVersion: tkm.io/v1alpha1
kind: TritonKernelCache
metadata: {name: mixed}
spec:
  cacheImage: $REPO:v1
  whenIncompatible: Empty
  signaturePolicy:
    mode: Enforce
    publicKey: |
$PUB
EOF2
cond_is() { [[ $(ctrl_cond "$NS" "tkc/$2" "$3") == "$1" ]]; }
wait_for 30 "mixed: Verified=True" cond_is True mixed Verified
LABEL="tkc.tkm.io/$NS.mixed"
label_is() { [[ $(kubectl -n "$NS" get tkc mixed -o jsonpath='{.status.nodeLabel}') == "$1" ]]; }
wait_for 20 "status.nodeLabel names the label" label_is "$LABEL"
compat_var() { # [VARIANT DIGEST]
  echo "{\"digest\":\"$DA\",\"verified\":true,\"extracted\":true,\"compatibleGPUs\":[{\"ids\":[0,1],\"gpuType\":\"nvidia-h200\"}],\"variants\":[{\"digest\":\"${1:-$V90}\",\"gpuIds\":[0,1]}]}"
}
novariant() {
  echo "{\"digest\":\"$DA\",\"verified\":true,\"fallback\":\"Empty\",\"incompatibleGPUs\":[{\"ids\":[0],\"gpuType\":\"nvidia-a100\",\"reason\":\"NoVariant\",\"message\":\"no variant for GPU 0 (cuda sm80 warp 32); the image has linux/amd64 cuda sm90 warp 32\"}]}"
}
bad=$(ctrl_report "$NS" "$N2" "$U2" "{\"mixed\":$(novariant | sed 's/"Empty"/"Fail"/')}" 2>&1 || true)
assert_contains "$bad" 'Unsupported value: "Fail"' "a node status with fallback Fail is refused by the CRD"

step "one node compatible with its variant, one without a variant: the label on exactly the first"
ctrl_report "$NS" "$N1" "$U1" "{\"mixed\":$(compat_var)}"
ctrl_report "$NS" "$N2" "$U2" "{\"mixed\":$(novariant)}"
node_label() { kubectl get node "$1" -o json | jq -r --arg k "$LABEL" '.metadata.labels[$k] // "absent"'; }
labels_are() { [[ "$(node_label "$N1") $(node_label "$N2")" == "$1" ]]; }
wait_for 20 "$N1 labelled, $N2 not" labels_are "true absent"
wait_for 20 "mixed: Ready=True" cond_is True mixed Ready
summary_is() { [[ $(kubectl -n "$NS" get tkc mixed -o jsonpath='{.status.variantSummary}') == "$1" ]]; }
wait_for 20 "status.variantSummary" summary_is "cuda/90$ONPLAT: 1 node; none for: nvidia-a100"
assert_eq "$V90 $PLATFORM cuda 90 32 1 2" \
  "$(kubectl -n "$NS" get tkc mixed -o jsonpath='{.status.variants[0].digest} {.status.variants[0].platform} {.status.variants[0].backend} {.status.variants[0].arch} {.status.variants[0].warpSize} {.status.variants[0].nodes} {.status.variants[0].gpus}')" \
  "status.variants: the variant (its target from the signed index), 1 node, 2 GPUs"
assert_eq '["nvidia-a100"]' "$(kubectl -n "$NS" get tkc mixed -o jsonpath='{.status.gpuTypesWithoutVariant}')" "status.gpuTypesWithoutVariant"
assert_eq "2/1/1" "$(kubectl -n "$NS" get tkc mixed -o jsonpath='{.status.counts.nodes}/{.status.counts.compatible}/{.status.counts.incompatible}')" "counts: the Empty node is incompatible"
out=$(kubectl -n "$NS" get tkc mixed)
assert_contains "$(head -1 <<<"$out")" "VARIANTS" "kubectl get tkc has a Variants column"
assert_contains "$out" "cuda/90$ONPLAT: 1 node; none for: nvidia-a100" "kubectl get tkc shows the summary"

step "kubectl tkm: status by variant, the schedule recipe, and a Deployment using it"
st=$("$KT" status -n "$NS" --no-color)
assert_contains "$st" "By variant:" "kubectl tkm status has the by-variant table"
assert_contains "$st" "cuda/90 $PLATFORM warp 32 (${V90:0:19})" "the variant is named (its target from the cache status)"
assert_contains "$st" "no variant: nvidia-a100 (NoVariant)" "the GPU type without a variant"
assert_contains "$st" "$N2 (empty volume)" "the node served an empty volume"
rec=$("$KT" schedule mixed -n "$NS")
assert_contains "$rec" "  $LABEL: \"true\"" "kubectl tkm schedule prints the nodeSelector"
sel=$(awk '/^nodeSelector:/{p=1} p&&/^---/{exit} p' <<<"$rec" | sed 's/^/      /')
cat <<EOF2 | kubectl -n "$NS" apply --dry-run=server -f - >/dev/null || fail "a Deployment with the recipe's nodeSelector is refused"
apiVersion: apps/v1
kind: Deployment
metadata: {name: uses-mixed}
spec:
  selector: {matchLabels: {app: uses-mixed}}
  template:
    metadata: {labels: {app: uses-mixed}}
    spec:
$sel
      containers: [{name: c, image: registry.invalid/x:1}]
EOF2
pass "the recipe's nodeSelector is valid in a Deployment"
assert_eq "$N1" "$(kubectl get nodes -l "$LABEL=true" -o jsonpath='{.items[*].metadata.name}')" "the selector matches exactly the compatible node"

step "a variant digest the signed index does not list: not trusted, the node counts as not caught up"
VX=sha256:$(printf '7%.0s' $(seq 64))
ctrl_report "$NS" "$N2" "$U2" "{\"mixed\":$(compat_var "$VX")}"
counts_are() { [[ $(kubectl -n "$NS" get tkc mixed -o jsonpath='{.status.counts.nodes}/{.status.counts.compatible}/{.status.counts.incompatible}') == "$1" ]]; }
wait_for 20 "counts: $N2 neither compatible nor incompatible" counts_are "2/1/0"
assert_eq "True RollingOut" "$(ctrl_cond "$NS" tkc/mixed Progressing) $(ctrl_reason "$NS" tkc/mixed Progressing)" "Progressing: RollingOut (1 of 2 nodes not at the pinned digest)"
assert_eq "$V90 1" "$(kubectl -n "$NS" get tkc mixed -o jsonpath='{.status.variants[*].digest} {.status.variants[0].nodes}')" "status.variants lists only the index's variant"
ctrl_report "$NS" "$N2" "$U2" "{\"mixed\":$(novariant)}"
wait_for 20 "counts back: $N2 incompatible" counts_are "2/1/1"

step "after a restart (the summary taken from the status) the index is read again for the variants"
reads() { grep -cF "reading the summary labels of $DA" "$E2E_TMP/c1.log" || true; }
n0=$(reads)
ctrl_kill c1
ctrl_start c1
ctrl_report "$NS" "$N1" "$U1" "{\"mixed\":$(compat_var | sed 's/"gpuIds":\[0,1\]/"gpuIds":[0]/')}"
variant_is() { [[ $(kubectl -n "$NS" get tkc mixed -o jsonpath='{.status.variants[0].gpus} {.status.variants[0].backend}/{.status.variants[0].arch} {.status.variants[0].platform} {.status.variants[0].warpSize}') == "$1" ]]; }
wait_for 30 "status.variants after the restart: 1 GPU, the target from the index" variant_is "1 cuda/90 $PLATFORM 32"
assert_eq "2/1/1 True" "$(kubectl -n "$NS" get tkc mixed -o jsonpath='{.status.counts.nodes}/{.status.counts.compatible}/{.status.counts.incompatible}') $(ctrl_cond "$NS" tkc/mixed Ready)" "counts and Ready as before the restart"
assert_eq "1" "$(($(reads) - n0))" "the restarted controller read the index once (for its variants)"

step "the label follows the node status"
ctrl_report "$NS" "$N1" "$U1" "{\"mixed\":$(novariant)}"
wait_for 20 "$N1's label removed once it has no variant" labels_are "absent absent"
wait_for 20 "the summary follows" summary_is "none for: nvidia-a100"
ctrl_report "$NS" "$N1" "$U1" "{\"mixed\":$(compat_var)}"
wait_for 20 "$N1 labelled again" labels_are "true absent"
kubectl label node "$N2" "$LABEL=true" "tkc.tkm.io/$NS.ghost=true" >/dev/null
stray_gone() { [[ $(kubectl get node "$N2" -o json | jq '[.metadata.labels | keys[] | select(startswith("tkc.tkm.io/"))] | length') == 0 ]]; }
wait_for 20 "labels under the controller's prefix that no usable cache explains are removed" stray_gone

step "a burst of node reports: the steps between them are only the settle wait (the object not loaded), the status then counts every node"
# A settle time longer than the gap between two reports (kubectl, even on a loaded machine),
# so that each report finds the cache still settling from the one before.
ctrl_kill c1
ctrl_start c1 --status-settle 3s
wait_for 30 "mixed: Ready=True after the restart" cond_is True mixed Ready
settle_only() { grep -o 'caught up: .*; [0-9]* steps were only the settle wait' "$E2E_TMP/c1.log" | tail -1 | sed 's/.*; \([0-9]*\) steps.*/\1/'; }
# Seven rounds, the roles swapping each round: the last leaves N2 compatible and N1 not, the
# opposite of the state before the burst, so the end state is the last round's and nothing older.
for r in 1 2 3 4 5 6 7; do
  if ((r % 2)); then a=$(compat_var) b=$(novariant); else a=$(novariant) b=$(compat_var); fi
  ctrl_report "$NS" "$N2" "$U2" "{\"mixed\":$a}"
  ctrl_report "$NS" "$N1" "$U1" "{\"mixed\":$b}"
done
wait_for 30 "$N2 labelled, $N1 not, after the burst (its last round)" labels_are "absent true"
# the status is written once the reports settle (3 s): wait for it, a check at once may see a
# write from the middle of the burst (a rollout's writes are delayed at most --status-max-delay)
burst_status() {
  local got
  got=$(kubectl -n "$NS" get tkc mixed -o jsonpath='{.status.counts.nodes}/{.status.counts.compatible}/{.status.counts.incompatible} {.status.conditions[?(@.type=="Ready")].message}')
  [[ $got == "2/1/1 "*"1 incompatible ($N1: NoVariant"* ]]
}
wait_for 30 "counts 2/1/1 and the Ready message naming $N1 incompatible, after the burst" burst_status
# the count is the process's since its start: the "caught up" line after the burst's last write
caught_up() { local n; n=$(settle_only); [[ -n $n ]] && ((n > 0)); }
wait_for 30 "the controller caught up after the burst, some steps only the settle wait (each would otherwise load and parse the cache object)" caught_up
echo "ok: $(settle_only) steps of the burst were only the settle wait"

step "the cache goes: so does its label"
kubectl -n "$NS" delete tkc mixed --wait=false >/dev/null
wait_for 20 "$N2's label removed when the cache is deleted" labels_are "absent absent"
# (no agent drops the entries: the controller removes them after --cleanup-timeout, 3 s here)
gone() { ! kubectl -n "$NS" get tkc mixed >/dev/null 2>&1; }
wait_for 30 "the cache is finalized" gone
assert_eq "absent absent" "$(node_label "$N1") $(node_label "$N2")" "no label left"
pass "ctrl_variants"
