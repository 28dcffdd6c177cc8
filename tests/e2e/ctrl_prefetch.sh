#!/usr/bin/env bash
# ctrl_prefetch: staged prefetch (issue 26) through tkm-controller and the real apiserver, with
# simulated agents. tkm-config prefetchSlots=2: four Nodes report prefetch Waiting at the pinned
# digest; the controller grants one alone (nobody has the digest extracted: the first pull warms
# a mirror), then two at a time in name order as nodes finish; a node that fails gives its slot
# back; a node that stays Pulling past prefetchGrantTimeout loses its slot and is not granted
# again; a node whose status object goes frees its slot; prefetchSlots removed: the field goes.
# The CRD refuses a prefetch state other than Waiting or Pulling.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/ctrl_helpers.bash"

ctrl_crds
NS=$(e2e_namespace)
CTRL_NS=$NS
P="e2e-pf-$RANDOM"
NA=$P-a NB=$P-b NC=$P-c ND=$P-d
finish() {
  ctrl_drain_and_kill
  kubectl delete node "$NA" "$NB" "$NC" "$ND" --wait=false >/dev/null 2>&1
}
e2e_on_exit finish

step "a cache image, four Nodes, tkm-config prefetchSlots=2"
REPO=$TKM_REGISTRY/e2e-pf-$RANDOM/cache
D=$(ctrl_image "$REPO" v1)
[[ $D == sha256:* ]] || fail "no digest: $D"
declare -A U
for n in "$NA" "$NB" "$NC" "$ND"; do U[$n]=$(ctrl_node "$n"); done
kubectl -n "$NS" create configmap tkm-config --from-literal=signatureMode=Disabled \
  --from-literal=prefetch=true --from-literal=prefetchSlots=2 \
  --from-literal=prefetchGrantTimeout=20s >/dev/null

# report NODE STATE: STATE Waiting|Pulling, extracted, failed (an error, not extracted)
report() {
  local e
  case $2 in
  Waiting | Pulling) e="{\"digest\":\"$D\",\"verified\":true,\"extracted\":false,\"prefetch\":\"$2\"}" ;;
  extracted) e=$(ctrl_entry "$D" compat) ;;
  failed) e=$(ctrl_entry "$D" error "pulling: connection refused") ;;
  esac
  ctrl_report "$NS" "$1" "${U[$1]}" "{\"big\":$e}"
}
# grants: "<granted names, ','>|<waiting>|<slots>"
grants() {
  kubectl -n "$NS" get tkc big -o json |
    jq -r '.status.prefetch | if . == null then "none" else "\((.granted // []) | join(","))|\(.waiting)|\(.slots)" end'
}
grants_are() { [[ $(grants) == "$1" ]]; }

step "the CRD refuses a prefetch state other than Waiting or Pulling"
bad=$(ctrl_report "$NS" "$NA" "${U[$NA]}" "{\"big\":{\"digest\":\"$D\",\"prefetch\":\"Granted\"}}" 2>&1 || true)
assert_contains "$bad" "prefetch" "prefetch: Granted refused by the CRD"

step "four nodes wait, then the controller starts: the first wave is one node alone (nobody has the digest extracted)"
# All four wait before the controller sees any of them: with it running, the reports (two kubectl
# calls each) may land further apart than --status-settle, and a node that waits alone is granted
# alone, as it should be; the wave in name order is what this step checks.
for n in "$ND" "$NC" "$NB" "$NA"; do report "$n" Waiting; done
ctrl_start c1
printf 'apiVersion: tkm.io/v1alpha1\nkind: TritonKernelCache\nmetadata: {name: big}\nspec:\n  cacheImage: "%s"\n' \
  "$REPO:v1" | kubectl -n "$NS" apply -f - >/dev/null
pinned() { [[ $(kubectl -n "$NS" get tkc big -o jsonpath='{.status.resolvedDigest}') == "$D" ]]; }
wait_for 30 "the digest is pinned" pinned
wait_for 30 "granted: $NA alone, 3 waiting" grants_are "$NA|3|2"
report "$NA" Pulling
sleep 1 # the controller sees it and must not grant anyone else while A pulls alone
assert_eq "$NA|3|2" "$(grants)" "Pulling: still one at a time"

step "A has it extracted: the next wave is two, in name order"
report "$NA" extracted
wait_for 30 "granted: $NB,$NC, 1 waiting" grants_are "$NB,$NC|1|2"

step "B fails: its slot goes to D; C keeps its own"
report "$NB" failed
report "$NC" Pulling
wait_for 30 "granted: $NC,$ND, 0 waiting" grants_are "$NC,$ND|0|2"

step "D finishes; C stays Pulling (a node that died): its slot times out and is not granted again"
report "$ND" extracted
wait_for 30 "granted: $NC" grants_are "$NC|0|2"
wait_for 40 "after prefetchGrantTimeout (20s): no grant, C counted as waiting" grants_are "|1|2"
sleep 1
assert_eq "|1|2" "$(grants)" "C is not granted again while its entry stays the same"

step "B waits again and is granted; its status object goes: the slot frees"
report "$NB" Waiting
wait_for 30 "granted: $NB" grants_are "$NB|1|2"
kubectl -n "$NS" delete tkcns "$NB" >/dev/null
wait_for 30 "B gone: no grant" grants_are "|1|2"

step "prefetchSlots removed from tkm-config: no fleet-wide limit, the field goes"
kubectl -n "$NS" patch configmap tkm-config --type=json -p '[{"op":"remove","path":"/data/prefetchSlots"}]' >/dev/null
wait_for 30 "status.prefetch is gone" grants_are "none"
