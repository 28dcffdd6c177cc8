#!/usr/bin/env bash
# agent_limits: the real tkm-agent's bounds against a hostile registry and a flood of idle
# socket connections (issue 23 items 7 and 8).
#  - A registry that trickles the layer (2 bytes/s: never a stall by the 1 byte/s measure)
#    cannot hold a pull: with --pull-deadline 3s, Materialize ends with PullDeadlineExceeded,
#    within bounds, and the agent's log names the reason.
#  - 3,000 idle connections to the socket with --socket-max-connections 1000: 2,000 are
#    closed at once and counted in tkm_agent_socket_refused_connections_total; the other
#    1,000 are closed after --socket-idle-timeout (and not before), counted in
#    tkm_agent_socket_idle_closed_total; then a real call is answered.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/agent.inc"
e2e_crds
agent_ns
cd "$E2E_TMP"
FX=$TKM_FIXTURES/triton-cache/triton-3.6.0-cuda-sm90.tar.gz

step "an image served by a registry that trickles its layer"
mkdir l
tar -xzf "$FX" -C l
"$TKMCTL" build "l/$(ls l)" --output lay >/dev/null 2>&1 || fail "tkmctl build"
D=$(jq -r '.manifests[0].digest' lay/index.json)
python3 "$TKM_SOURCE_DIR/tests/e2e/trickle_registry.py" lay trickle.port trickle.log 0.5 &
e2e_on_exit "kill $! 2>/dev/null"
wait_for 10 "the trickling registry listens" test -s trickle.port
REG=127.0.0.1:$(cat trickle.port)
# the cache switches signature checks off for itself: the admin allows it (issue 23)
kubectl -n "$NS" create configmap tkm-config --from-literal=signatureFloor=Disabled >/dev/null
cache_create tkc "$NS" slow "$REG/e2e/vadd:v1" "$D" "  signaturePolicy: {mode: Disabled}"
NODE=e2e-limits-$RANDOM
agent_node "$NODE"
agent_start h200 h200 "$NODE" "$NS" --pull-deadline 3s --socket-max-connections 1000 \
  --socket-idle-timeout 3s --metrics-bind-address 127.0.0.1:0
SOCK=$E2E_TMP/h200/run/agent.sock
wait_jp 60 "slow: judged from its manifest and config (no layer needed)" nvidia-h200 tkcns "$NODE" "$NS" \
  '{.status.caches.slow.compatibleGPUs[0].gpuType}'
wait_for 30 "the socket exists" test -S "$SOCK"

step "Materialize: the trickled layer is stopped by the pull deadline"
t0=$SECONDS
agent_call "$SOCK" "{\"m\":\"Materialize\",\"ns\":\"$NS\",\"pod\":\"p0\",\"uid\":\"0f8e7d6c-1111-4222-8333-000000000001\",\"vol\":\"v0\",\"attrs\":{\"cacheName\":\"slow\"},\"timeout\":60}"
took=$((SECONDS - t0))
assert_eq "$(agent_field .code)" UNAVAILABLE "Materialize: UNAVAILABLE ($(agent_field .details))"
LAYER=$(jq -r '.layers[0].digest' "lay/blobs/sha256/${D#sha256:}")
assert_contains "$(agent_field .details)" "PullDeadlineExceeded: pulling $LAYER" "the reason names the layer"
assert_contains "$(agent_field .details)" "download deadline of 3 s reached" "the message names the deadline"
assert_not_contains "$(agent_field .details)" "HTTP 200" "not an HTTP status"
((took >= 2 && took <= 20)) || fail "Materialize took ${took}s (deadline 3s)"
pass "ended after ${took}s"
grep -q "/blobs/$LAYER" trickle.log || fail "the layer was never requested"
pass "the layer was requested and trickled"
assert_contains "$(agent_log h200)" "download deadline of 3 s reached" "the agent's log says so"

step "3,000 idle connections against a cap of 1,000"
MADDR=$(sed -n 's|.*metrics on http://\([^/]*\)/metrics.*|\1|p' "$E2E_TMP/h200.log" | head -1)
[[ -n $MADDR ]] || fail "no metrics address in the agent's log"
metric() { curl -sf "http://$MADDR/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
assert_eq "$(metric tkm_agent_socket_refused_connections_total)" 0 "no refusal yet"
python3 "$TKM_SOURCE_DIR/tests/e2e/socket_flood.py" "$SOCK" 3000 flood.out &
FLOOD=$!
e2e_on_exit "kill $FLOOD 2>/dev/null"
wait_for 60 "3,000 connected" grep -q "^connected 3000" flood.out
wait_for 30 "2,000 refused and counted" test "$(metric tkm_agent_socket_refused_connections_total)" = 2000
wait_for 30 "the refused ones see their connection closed" grep -q "^closed 2000 " flood.out
assert_eq "$(metric tkm_agent_socket_idle_closed_total)" 0 "none closed as idle yet"
wait_for 30 "the idle ones closed after the idle timeout" grep -q "^closed 3000 " flood.out
t_idle=$(awk '$1 == "closed" && $2 == 3000 {print $3}' flood.out)
awk -v t="$t_idle" 'BEGIN { exit !(t >= 2.5 && t <= 20) }' || fail "the idle connections closed after ${t_idle}s (timeout 3s)"
pass "idle connections closed after ${t_idle}s"
wait "$FLOOD" || fail "the flood client saw connections left open"
wait_for 10 "1,000 counted as idle-closed" test "$(metric tkm_agent_socket_idle_closed_total)" = 1000
agent_call "$SOCK" '{"m":"Status"}'
assert_eq "$(agent_field .code) $(agent_field .resp.ready)" "OK true" "a real call is answered afterwards"
kill -0 "${AGENT_PID[h200]}" || fail "the agent died"
e2e_done
