#!/usr/bin/env bash
# agent_prefetch_slots: staged prefetch end to end (issue 26). Three real tkm-agent processes, the
# real tkm-controller and a registry of the test's own that logs every request
# (hack/registry.sh --access-log). tkm-config prefetch=true, prefetchSlots=1: the agents pull the
# cache's layer one at a time, counted from the registry's own log (3 GETs, never 2 at once),
# while the others report prefetch Waiting in their node status; once extracted the field goes.
# --pull-bandwidth keeps each download long enough that pulls started together would overlap.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/agent.inc"
e2e_crds
agent_ns
CTRL=$TKM_BUILD_DIR/controller/tkm-controller
[[ -x $CTRL ]] || fail "no tkm-controller in $TKM_BUILD_DIR"
cd "$E2E_TMP"

step "a registry with an access log; a 12M cache (bench/gen_cache.py) pushed there"
REG=$("$TKM_SOURCE_DIR/hack/registry.sh" start "$E2E_TMP/reg" --access-log)
e2e_on_exit "'$TKM_SOURCE_DIR/hack/registry.sh' stop '$E2E_TMP/reg'"
mkdir -p fx && tar -xzf "$TKM_FIXTURES/triton-cache/triton-3.6.0-cuda-sm90.tar.gz" -C fx
python3 "$TKM_SOURCE_DIR/bench/gen_cache.py" "fx/$(ls fx)" src 12M "e2e-pf-$RANDOM" >/dev/null
out=$("$TKMCTL" build src --push "$REG/e2e/pf:v1" -o json 2>build.err) || fail "tkmctl build --push: $(cat build.err)"
LAYER=$(jq -r .layer <<<"$out")
[[ $LAYER == sha256:* ]] || fail "no layer digest: $out"
pass "layer $LAYER, $(jq -r .layer_size <<<"$out") bytes"

step "tkm-config prefetchSlots=1, the controller, three agents capped at 500k/s each"
kubectl -n "$NS" create configmap tkm-config --from-literal=signatureMode=Disabled \
  --from-literal=prefetch=true --from-literal=prefetchSlots=1 >/dev/null
"$CTRL" --kubeconfig "$KUBECONFIG" --namespace "$NS" --state-dir "$E2E_TMP/ctrl-state" \
  --metrics-bind-address 0 --health-probe-bind-address 0 "${E2E_REACH_FLAGS[@]}" >"$E2E_TMP/ctrl.log" 2>&1 &
CPID=$!
e2e_on_exit "kill $CPID 2>/dev/null; wait $CPID 2>/dev/null; tail -n 20 '$E2E_TMP/ctrl.log' >&2"
S=$RANDOM
NODES=("e2e-pf1-$S" "e2e-pf2-$S" "e2e-pf3-$S")
for i in 0 1 2; do
  agent_node "${NODES[i]}"
  agent_start "a$i" h200 "${NODES[i]}" "$NS" --pull-bandwidth 500K --max-concurrent-pulls 1
done

step "the cache declared: the nodes pull one at a time"
printf 'apiVersion: tkm.io/v1alpha1\nkind: TritonKernelCache\nmetadata: {name: pf}\nspec:\n  cacheImage: "%s"\n' \
  "$REG/e2e/pf:v1" | kubectl -n "$NS" apply -f - >/dev/null
# states: "<node>=<extracted>/<prefetch>" of every node status, sorted
states() {
  kubectl -n "$NS" get tkcns -o json |
    jq -r '[.items[] | "\(.metadata.name)=\(.status.caches.pf.extracted // false)/\(.status.caches.pf.prefetch // "-")"] | sort | join(" ")'
}
waiting_seen() { [[ $(states) == *"false/Waiting"* ]]; }
wait_for 120 "a node waits for a pull slot (prefetch: Waiting in its node status)" waiting_seen
all_extracted() { [[ $(states) == "${NODES[0]}=true/- ${NODES[1]}=true/- ${NODES[2]}=true/-" ]]; }
wait_for 180 "all three extracted, the prefetch field gone" all_extracted
assert_eq "0|0" "$(kubectl -n "$NS" get tkc pf -o json | jq -r '"\(.status.prefetch.granted | length)|\(.status.prefetch.waiting)"')" \
  "the cache status: no grants held, nobody waiting"

step "the registry's own log: three GETs of the layer, never two at once"
wait_for 10 "three layer GETs logged" bash -c "[[ \$(python3 '$TKM_SOURCE_DIR/bench/registry_gets.py' '$E2E_TMP/reg/registry.log' '$LAYER' | cut -d' ' -f1) == 3 ]]"
read -r gets peak < <(python3 "$TKM_SOURCE_DIR/bench/registry_gets.py" "$E2E_TMP/reg/registry.log" "$LAYER")
echo "layer GETs: $gets, peak $peak at once; node states: $(states)"
assert_eq 3 "$gets" "one layer GET per node"
assert_eq 1 "$peak" "prefetchSlots=1: at most one layer GET in flight at any time"
