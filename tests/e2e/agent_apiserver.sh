#!/usr/bin/env bash
# agent_apiserver: the apiserver down for a minute. The agent keeps running with its
# state (no crash, no exit, no hot loop against the dead port), and once the apiserver
# is back it catches up: a cache created after the restart and one deleted reach its
# node status without restarting the agent.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/agent.inc"
call() {
  R=$(printf '%s\n' "$@" | /usr/bin/python3 "$CLIENT" "$DESC" "$E2E_TMP/h200/run/agent.sock" 2>&1) || fail "grpcio client: $R"
}
mat() { # POD VOL
  printf '{"m":"Materialize","ns":"%s","pod":"%s","uid":"0f8e7d6c-1111-4222-8333-%012d","vol":"%s","attrs":{"cacheName":"a"},"timeout":30}' "$NS" "$1" "$RANDOM" "$2"
}
e2e_crds
agent_ns
cd "$E2E_TMP"
REPO=$TKM_REGISTRY/e2e-agent-apiserver-$RANDOM/vadd
D=$(agent_image "$REPO" "$TKM_FIXTURES/triton-cache/triton-3.6.0-cuda-sm90.tar.gz")
# the caches here switch signature checks off for themselves: the admin allows it (issue 23)
kubectl -n "$NS" create configmap tkm-config --from-literal=signatureFloor=Disabled >/dev/null
cache_create tkc "$NS" a "$REPO:v1" "$D" "  signaturePolicy: {mode: Disabled}"
cache_create tkc "$NS" b "$REPO:v1" "$D" "  signaturePolicy: {mode: Disabled}"
NODE=e2e-apiserver-$RANDOM
agent_node "$NODE"
agent_start h200 h200 "$NODE" "$NS"
wait_jp 60 "a judged" nvidia-h200 tkcns "$NODE" "$NS" '{.status.caches.a.compatibleGPUs[0].gpuType}'
wait_jp 60 "b judged" nvidia-h200 tkcns "$NODE" "$NS" '{.status.caches.b.compatibleGPUs[0].gpuType}'

call "$(mat p1 v1)"
assert_eq OK "$(jq -r .code <<<"$R")" "materialized before the outage"
P=$(jq -r .resp.store_path <<<"$R")

step "stop kube-apiserver for 60 s"
PIDF=$TKM_CLUSTER_DIR/kube-apiserver.pid
PID=$(cat "$PIDF")
grep -q kube-apiserver "/proc/$PID/cmdline" || fail "pid $PID is not kube-apiserver"
e2e_on_exit "kubectl get --raw /readyz >/dev/null 2>&1 || '$TKM_SOURCE_DIR/hack/cluster.sh' restart-apiserver >/dev/null 2>&1"
kill -TERM "$PID"
for _ in $(seq 100); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
kill -KILL "$PID" 2>/dev/null || true # as hack/lib.sh's stop_pidfile: TERM, 10 s, KILL
wait_for 30 "kube-apiserver stopped" bash -c "! kill -0 $PID 2>/dev/null"
t0=$SECONDS
sleep 20
kill -HUP "${AGENT_PID[h200]}" # a GPU re-probe while the apiserver is away
call "$(mat p2 v2)" '{"m":"Release","vol":"v1"}'
assert_eq "OK $P OK" "$(jq -rs '.[0].code + " " + .[0].resp.store_path + " " + .[1].code' <<<"$R")" "the socket serves from the store while the apiserver is down"
sleep 40
kill -0 "${AGENT_PID[h200]}" || fail "the agent exited while the apiserver was down"
pass "the agent ran through $((SECONDS - t0)) s without the apiserver"
n=$(grep -c "watch failed" "$E2E_TMP/h200.log" || true)
((n >= 1 && n <= 60)) || fail "expected a bounded number of watch retries in 60 s (5 informers, backoff to 30 s), saw $n"
pass "$n watch retries logged in 60 s (backoff, no hot loop)"

step "restart it; the agent catches up"
"$TKM_SOURCE_DIR/hack/cluster.sh" restart-apiserver >/dev/null 2>&1 || fail "restart-apiserver"
wait_for 60 "apiserver ready" kubectl get --raw /readyz
t1=$SECONDS
cache_create tkc "$NS" c "$REPO:v1" "$D" "  signaturePolicy: {mode: Disabled}"
kubectl -n "$NS" delete tkc b >/dev/null
wait_jp 90 "c reported after the outage" nvidia-h200 tkcns "$NODE" "$NS" '{.status.caches.c.compatibleGPUs[0].gpuType}'
wait_jp 30 "b removed after the outage" "" tkcns "$NODE" "$NS" '{.status.caches.b.digest}'
echo "caught up $((SECONDS - t1)) s after the apiserver came back"
assert_eq "$(jp tkcns "$NODE" "$NS" '{.status.caches.a.digest}')" "$D" "a kept"
agent_stop h200
e2e_done
