#!/usr/bin/env bash
# agent_prefetch_slots: staged prefetch end to end (issue 26). Three real tkm-agent processes, the
# real tkm-controller and a registry of the test's own that logs every request
# (hack/registry.sh --access-log). tkm-config prefetch=true, prefetchSlots=1: the agents pull the
# cache's layer one at a time, counted from the registry's own log (3 GETs, never 2 at once),
# while the others report prefetch Waiting in their node status; once extracted the field goes.
# Then one agent alone, two new caches granted to it at once: --max-concurrent-pulls 1 makes it
# download them one after the other (the second queued), and --pull-bandwidth 500K makes each
# download last: the registry's log shows the second GET starting after the first download (the
# registry's own duration ends when the bytes are in the socket buffers, so the starts count).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/agent.inc"
e2e_crds
agent_ns
CTRL=$TKM_BUILD_DIR/controller/tkm-controller
[[ -x $CTRL ]] || fail "no tkm-controller in $TKM_BUILD_DIR"
cd "$E2E_TMP"

step "a registry with an access log; 12M caches (bench/gen_cache.py) pushed there"
REG=$("$TKM_SOURCE_DIR/hack/registry.sh" start "$E2E_TMP/reg" --access-log)
e2e_on_exit "'$TKM_SOURCE_DIR/hack/registry.sh' stop '$E2E_TMP/reg'"
mkdir -p fx && tar -xzf "$TKM_FIXTURES/triton-cache/triton-3.6.0-cuda-sm90.tar.gz" -C fx
# push NAME: a 12M cache of its own as $REG/e2e/NAME:v1; prints "LAYER_DIGEST LAYER_SIZE"
push() {
  rm -rf src && python3 "$TKM_SOURCE_DIR/bench/gen_cache.py" "fx/$(ls fx)" src 12M "e2e-pf-$1-$RANDOM" >/dev/null
  local out
  out=$("$TKMCTL" build src --push "$REG/e2e/$1:v1" -o json 2>build.err) || fail "tkmctl build --push: $(cat build.err)"
  jq -r '"\(.layer) \(.layer_size)"' <<<"$out"
}
read -r LAYER PFSIZE < <(push pf)
read -r LQ1 Q1SIZE < <(push q1)
read -r LQ2 _ < <(push q2)
[[ $LAYER == sha256:* && $LQ1 == sha256:* && $LQ2 == sha256:* ]] || fail "no layer digests: $LAYER $LQ1 $LQ2"
# gets DIGEST...: "GETS PEAK GAP" of those blobs from the registry's own log (bench/registry_gets.py)
gets() { python3 "$TKM_SOURCE_DIR/bench/registry_gets.py" "$E2E_TMP/reg/registry.log" "$@"; }


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
# tkc NAME: a cache of the image $REG/e2e/NAME:v1
tkc() {
  printf 'apiVersion: tkm.io/v1alpha1\nkind: TritonKernelCache\nmetadata: {name: %s}\nspec:\n  cacheImage: "%s"\n' \
    "$1" "$REG/e2e/$1:v1" | kubectl -n "$NS" apply -f - >/dev/null
}
tkc pf
# states: "<node>=<extracted>/<prefetch>" of every node status, sorted
states() {
  kubectl -n "$NS" get tkcns -o json |
    jq -r '[.items[] | "\(.metadata.name)=\(.status.caches.pf.extracted // false)/\(.status.caches.pf.prefetch // "-")"] | sort | join(" ")'
}
waiting_seen() { [[ $(states) == *"false/Waiting"* ]]; }
wait_for 120 "a node waits for a pull slot (prefetch: Waiting in its node status)" waiting_seen
all_extracted() { [[ $(states) == "${NODES[0]}=true/- ${NODES[1]}=true/- ${NODES[2]}=true/-" ]]; }
wait_for 180 "all three extracted, the prefetch field gone" all_extracted
pf_status() { kubectl -n "$NS" get tkc pf -o json | jq -r '"\(.status.prefetch.granted | length)|\(.status.prefetch.waiting)"'; }
pf_status_is() { [[ $(pf_status) == "$1" ]]; }
wait_for 30 "the cache status: no grants held, nobody waiting" pf_status_is "0|0"

step "the registry's own log: three GETs of the layer, never two at once"
wait_for 10 "three layer GETs logged" bash -c "[[ \$(python3 '$TKM_SOURCE_DIR/bench/registry_gets.py' '$E2E_TMP/reg/registry.log' '$LAYER' | cut -d' ' -f1) == 3 ]]"
read -r n peak gap < <(gets "$LAYER")
# at_least GAP BYTES WHAT: GAP (s, between two GETs starting) is at least 1 s. Pulls started
# together start within about 0.2 s of each other here; one after the other, a download of BYTES
# capped at 500 kB/s (libcurl's CURLOPT_MAX_RECV_SPEED_LARGE, measured here at 650 kB/s
# and more: an average that loopback's socket buffers let run ahead) and, for a new
# node, its extraction and the controller's grant, come between them (3.3-3.7 s in runs here).
at_least() {
  awk -v g="$1" 'BEGIN{exit !(g >= 1.0)}' || fail "$3: $1 s apart, expected at least 1 s"
  pass "$3: $1 s apart (layer of $2 bytes)"
}
assert_eq 3 "$n" "one layer GET per node"
assert_eq 1 "$peak" "prefetchSlots=1: at most one layer GET in flight at any time"
at_least "$gap" "$PFSIZE" "prefetchSlots=1: each node's GET starts after the previous node's download"

step "one agent alone, two new caches granted to it at once: --max-concurrent-pulls 1 queues the second"
agent_stop a1
agent_stop a2
tkc q1
tkc q2
q_extracted() {
  [[ $(kubectl -n "$NS" get tkcns "${NODES[0]}" -o jsonpath='{.status.caches.q1.extracted}/{.status.caches.q2.extracted}') == true/true ]]
}
wait_for 180 "q1 and q2 extracted on ${NODES[0]}" q_extracted
wait_for 10 "two layer GETs logged" bash -c "[[ \$(python3 '$TKM_SOURCE_DIR/bench/registry_gets.py' '$E2E_TMP/reg/registry.log' '$LQ1' '$LQ2' | cut -d' ' -f1) == 2 ]]"
read -r n _ gap < <(gets "$LQ1" "$LQ2")
assert_eq 2 "$n" "one GET of each layer"
at_least "$gap" "$Q1SIZE" "--max-concurrent-pulls 1: the second GET starts after the first download"
