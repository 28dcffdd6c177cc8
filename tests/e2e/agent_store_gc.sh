#!/usr/bin/env bash
# agent_store_gc: the store's policies at the daemon level. tkm-config prefetch: true
# extracts usable caches ahead of demand; a released digest is removed once the grace
# period has passed; the disk budget refuses (RESOURCE_EXHAUSTED) a cache that does not
# fit beside the ones in use and evicts unused ones, least recently used first.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/agent.inc"
e2e_crds
agent_ns
cd "$E2E_TMP"
FXD=$TKM_FIXTURES/triton-cache
BASE=$TKM_REGISTRY/e2e-agent-gc-$RANDOM
D=$(agent_image "$BASE/vadd" "$FXD/triton-3.6.0-cuda-sm90.tar.gz")            # 758102 bytes
DS=$(agent_image "$BASE/small" "$FXD/triton-3.6.0-cuda-sm90-binary-only.tar.gz") # ~86 KB
DB=$(agent_image "$BASE/big" "$FXD/triton-3.6.0-cuda-sm90-inductor-block.tar.gz") # ~4.7 MB
# a third size: the sm90 cache without its largest directory (~372 KB)
mkdir trim && tar -xzf "$FXD/triton-3.6.0-cuda-sm90.tar.gz" -C trim
rm -rf "trim/tcache/$(cd trim/tcache && du -sb -- * | sort -n | tail -1 | cut -f2)"
tar -czf trim.tar.gz -C trim tcache
DT=$(agent_image "$BASE/trim" trim.tar.gz)
mat() { # POD VOL CACHE
  printf '{"m":"Materialize","ns":"%s","pod":"%s","uid":"0f8e7d6c-1111-4222-8333-%012d","vol":"%s","attrs":{"cacheName":"%s"},"timeout":60}' "$NS" "$1" "$RANDOM" "$2" "$3"
}
entries() { find "$1/sha256" -maxdepth 1 -name '*.complete' 2>/dev/null | wc -l; }
P="  signaturePolicy: {mode: Disabled}"

step "prefetch: true extracts ahead of demand"
kubectl -n "$NS" create configmap tkm-config --from-literal=signatureMode=Disabled --from-literal=prefetch=true >/dev/null
cache_create tkc "$NS" vadd "$BASE/vadd:v1" "$D" "$P"
N1=e2e-gc-pre-$RANDOM
agent_node "$N1"
agent_start pre h200 "$N1" "$NS" --gc-grace 1h
wait_jp 60 "extracted without a Materialize" true tkcns "$N1" "$NS" '{.status.caches.vadd.extracted}'
assert_eq 1 "$(entries "$E2E_TMP/pre/store")" "one entry in the store"
agent_stop pre
kubectl -n "$NS" delete configmap tkm-config >/dev/null
# prefetch off again; the caches here still switch signatures off, which the admin allows (issue 23)
kubectl -n "$NS" create configmap tkm-config --from-literal=signatureFloor=Disabled >/dev/null

step "concurrent Materialize calls for one digest share one pull"
N0=e2e-gc-conc-$RANDOM
agent_node "$N0"
agent_start conc h200 "$N0" "$NS"
SC=$E2E_TMP/conc/run/agent.sock
wait_for 60 "ready" bash -c "printf '%s\n' '{\"m\":\"Status\"}' | /usr/bin/python3 '$CLIENT' '$DESC' '$SC' 2>/dev/null | grep -q '\"ready\": true'"
wait_jp 60 "judged" nvidia-h200 tkcns "$N0" "$NS" '{.status.caches.vadd.compatibleGPUs[0].gpuType}'
pids=()
for i in 1 2 3 4 5; do
  printf '%s\n' "$(mat "c$i" "vc$i" vadd)" | /usr/bin/python3 "$CLIENT" "$DESC" "$SC" >"conc$i.out" 2>&1 &
  pids+=($!)
done
wait "${pids[@]}" # the clients only (the agents run in the background too)
assert_eq "OK OK OK OK OK" "$(cat conc?.out | jq -r .code | tr '\n' ' ' | sed 's/ $//')" "five concurrent calls answered"
assert_eq 1 "$(jq -r .resp.store_path conc?.out | sort -u | wc -l)" "one store path"
assert_eq 1 "$(grep -c 'tkm-agent: extracted sha256:' "$E2E_TMP/conc.log")" "one extraction"
agent_stop conc

step "grace period: a released digest goes"
cache_create tkc "$NS" small "$BASE/small:v1" "$DS" "$P"
cache_create tkc "$NS" big "$BASE/big:v1" "$DB" "$P"
N2=e2e-gc-$RANDOM
agent_node "$N2"
agent_start gc h200 "$N2" "$NS" --gc-grace 3s --store-budget 1000000
SG=$E2E_TMP/gc/run/agent.sock
wait_jp 60 "judged" nvidia-h200 tkcns "$N2" "$NS" '{.status.caches.small.compatibleGPUs[0].gpuType}'
wait_jp 60 "judged" nvidia-h200 tkcns "$N2" "$NS" '{.status.caches.vadd.compatibleGPUs[0].gpuType}'
agent_call "$SG" "$(mat p1 v1 small)"
assert_eq "$(agent_field .code)" OK "small materialized"
sleep 5
assert_eq 1 "$(entries "$E2E_TMP/gc/store")" "a referenced entry stays past the grace period"
agent_call "$SG" '{"m":"Release","vol":"v1"}'
wait_jp 30 "released small removed after 3 s" false tkcns "$N2" "$NS" '{.status.caches.small.extracted}'
assert_eq 0 "$(entries "$E2E_TMP/gc/store")" "the store is empty"

step "disk budget (1000000 bytes)"
agent_call "$SG" "$(mat p2 v2 big)"
assert_eq "$(agent_field .code)" RESOURCE_EXHAUSTED "a 4.7 MB cache does not fit a 1 MB budget"
assert_contains "$(agent_field .details)" "StoreFull: cache $NS/big needs " "named StoreFull, with the bytes needed"
assert_contains "$(agent_field .details)" "the store's budget of 1000000 bytes has 1000000 free" "and those free in the budget"
wait_jp 30 "the refusal is big's lastFailure in the node status" StoreFull tkcns "$N2" "$NS" '{.status.caches.big.lastFailure.reason}'
agent_call "$SG" "$(mat p3 v3 vadd)"
assert_eq "$(agent_field .code)" OK "vadd (758102 bytes) fits"
agent_call "$SG" "$(mat p4 v4 small)"
assert_eq "$(agent_field .code)" OK "small fits beside it"
agent_call "$SG" '{"m":"Release","vol":"v3"}'
assert_eq "$(agent_field .code)" OK "vadd released (within its grace period)"
assert_eq 2 "$(entries "$E2E_TMP/gc/store")" "vadd (unused, in grace) and small (in use) kept"
agent_stop gc
agent_start gc h200 "$N2" "$NS" --gc-grace 1h --store-budget 1000000
wait_for 60 "ready" bash -c "printf '%s\n' '{\"m\":\"Status\"}' | /usr/bin/python3 '$CLIENT' '$DESC' '$SG' 2>/dev/null | grep -q '\"ready\": true'"
cache_create tkc "$NS" trim "$BASE/trim:v1" "$DT" "$P"
wait_jp 60 "trim judged" nvidia-h200 tkcns "$N2" "$NS" '{.status.caches.trim.compatibleGPUs[0].gpuType}'
agent_call "$SG" "$(mat p5 v5 trim)"
assert_eq "$(agent_field .code)" OK "trim fits once the unused vadd is evicted: $(agent_field .details)"
wait_jp 30 "vadd evicted (least recently used, unreferenced)" false tkcns "$N2" "$NS" '{.status.caches.vadd.extracted}'
assert_eq "true true" "$(jp tkcns "$N2" "$NS" '{.status.caches.small.extracted} {.status.caches.trim.extracted}')" "the referenced ones stay"
agent_stop gc
assert_not_contains "$(agent_log gc)$(agent_log pre)$(agent_log conc)" "ERROR" "no error in the logs"
e2e_done
