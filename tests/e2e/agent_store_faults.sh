#!/usr/bin/env bash
# agent_store_faults: what can go wrong between the registry and the store, at the
# daemon level, each ending in a gRPC code and a node status reason, never a crash and
# never a partial cache in the store:
#   - a config label lying about the arch (sm80 said, sm90 kernels): LabelMismatch, the
#     entry removed from the store;
#   - a malicious layer (a '../' path escaping the cache): refused, nothing extracted;
#   - disk full while extracting and while pulling (the store on a tmpfs too small):
#     RESOURCE_EXHAUSTED StoreFull with the bytes needed and free, the cache's lastFailure
#     in the node status (cleared once it materializes), the metric, nothing partial;
#   - kill -9 during extraction and right after a reference was written (SQLite): the
#     restarted agent reconciles, answers, and the store holds only complete entries.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/agent.inc"
CRANE=$("$TKM_SOURCE_DIR/hack/testbin/build.sh" --path crane)
e2e_crds
agent_ns
cd "$E2E_TMP"
FX=$TKM_FIXTURES/triton-cache/triton-3.6.0-cuda-sm90.tar.gz
BIG=$TKM_FIXTURES/triton-cache/triton-3.6.0-cuda-sm90-inductor-block.tar.gz
BASE=$TKM_REGISTRY/e2e-agent-store-$RANDOM
D=$(agent_image "$BASE/vadd" "$FX")
DB=$(agent_image "$BASE/big" "$BIG")
mat() { # POD VOL CACHE
  printf '{"m":"Materialize","ns":"%s","pod":"%s","uid":"0f8e7d6c-1111-4222-8333-%012d","vol":"%s","attrs":{"cacheName":"%s"},"timeout":60}' "$NS" "$1" "$RANDOM" "$2" "$3"
}
# partial STORE: prints what in the store is not a complete entry (a tree without its
# .complete marker); staging/ and locks/ are lib/store's own and purged at open.
partial() {
  local d
  for d in "$1"/sha256/*; do
    [[ -e $d ]] || continue
    [[ $d == *.complete ]] && continue
    [[ -f $d.complete ]] || echo "$d"
  done
}

step "a label lying about the arch"
LABEL='{"targets":[{"backend":"cuda","arch":"80","warp_size":32}],"triton_versions":["3.6.0"]}'
"$CRANE" mutate "$BASE/vadd:v1" --label "cache.triton.image/summary=$LABEL" -t "$BASE/lie:v1" >/dev/null 2>&1 || fail "crane mutate"
DL=$("$CRANE" digest "$BASE/lie:v1")
step "a malicious layer: io.triton.cache/../../escaped"
/usr/bin/python3 - evil.tar.gz <<'PY'
import io, sys, tarfile
with tarfile.open(sys.argv[1], "w:gz") as t:
    for name, data in (("io.triton.cache/k1/add.json", b'{"hash":"x"}'), ("io.triton.cache/../../escaped", b"pwned")):
        i = tarfile.TarInfo(name); i.size = len(data); t.addfile(i, io.BytesIO(data))
PY
"$CRANE" append -f evil.tar.gz -t "$BASE/evil:v0" >/dev/null 2>&1 || fail "crane append"
"$CRANE" mutate "$BASE/evil:v0" --label 'cache.triton.image/summary={"targets":[{"backend":"cuda","arch":"90","warp_size":32}]}' -t "$BASE/evil:v1" >/dev/null 2>&1
DE=$("$CRANE" digest "$BASE/evil:v1")
# the caches here switch signature checks off for themselves: the admin allows it (issue 23)
kubectl -n "$NS" create configmap tkm-config --from-literal=signatureFloor=Disabled >/dev/null
P="  signaturePolicy: {mode: Disabled}"
cache_create tkc "$NS" vadd "$BASE/vadd:v1" "$D" "$P"
cache_create tkc "$NS" big "$BASE/big:v1" "$DB" "$P"
cache_create tkc "$NS" lie "$BASE/lie:v1" "$DL" "$P"
cache_create tkc "$NS" evil "$BASE/evil:v1" "$DE" "$P"
S=$RANDOM
NA=e2e-store-a100-$S NH=e2e-store-h200-$S
agent_node "$NA"
agent_node "$NH"
agent_start a100 a100 "$NA" "$NS"
agent_start h200 h200 "$NH" "$NS"
SA=$E2E_TMP/a100/run/agent.sock SH=$E2E_TMP/h200/run/agent.sock

wait_jp 60 "A100 judges 'lie' compatible by its label" nvidia-a100 tkcns "$NA" "$NS" '{.status.caches.lie.compatibleGPUs[0].gpuType}'
agent_call "$SA" "$(mat p1 v-lie lie)"
assert_eq "$(agent_field .code)" FAILED_PRECONDITION "the lying label is refused at extraction"
assert_contains "$(agent_field .details)" "LabelMismatch: label mismatch: the image config's cache.triton.image/summary label says [cuda 80 warp 32], but the 4 kernels in the layer are built for [cuda 90 warp 32]" "the reason names both"
wait_for 30 "node status: LabelMismatch" bash -c "kubectl get tkcns $NA -n $NS -o jsonpath='{.status.caches.lie.error}' | grep -q '^LabelMismatch: label mismatch'"
wait_for 10 "the entry is removed from the store" bash -c "[[ -z \$(ls '$E2E_TMP/a100/store/sha256' 2>/dev/null) ]]"

wait_jp 60 "H200 judges 'evil' by its label" nvidia-h200 tkcns "$NH" "$NS" '{.status.caches.evil.compatibleGPUs[0].gpuType}'
agent_call "$SH" "$(mat p2 v-evil evil)"
assert_eq "$(agent_field .code)" INTERNAL "the malicious layer is refused"
assert_contains "$(agent_field .details)" "ExtractFailed" "named as an extraction failure"
assert_contains "$(agent_field .details)" ".." "the reason names the bad path"
[[ ! -e $E2E_TMP/h200/escaped && ! -e $E2E_TMP/escaped && ! -e $E2E_TMP/h200/store/escaped ]] || fail "a file escaped the store"
assert_eq "" "$(partial "$E2E_TMP/h200/store")$(ls "$E2E_TMP/h200/store/sha256" 2>/dev/null)" "nothing of it in the store"
kill -0 "${AGENT_PID[h200]}" || fail "the agent died"
agent_stop a100

step "disk full while extracting and while pulling (the store on a 600 KiB tmpfs; vadd is 758 KB extracted, big's layer 830 KB to download)"
mkdir -p small
mount -t tmpfs -o size=600k tmpfs small || fail "mount tmpfs"
e2e_on_exit "umount '$E2E_TMP/small' 2>/dev/null || true"
agent_stop h200
NF=e2e-store-full-$S
agent_node "$NF"
agent_start full h200 "$NF" "$NS" --store-dir "$E2E_TMP/small/store" --metrics-bind-address 127.0.0.1:0
SF=$E2E_TMP/full/run/agent.sock
wait_jp 60 "judged" nvidia-h200 tkcns "$NF" "$NS" '{.status.caches.vadd.compatibleGPUs[0].gpuType}'
wait_jp 60 "judged" nvidia-h200 tkcns "$NF" "$NS" '{.status.caches.big.compatibleGPUs[0].gpuType}'
# nothing_partial WHAT: no entry, staging tree or pull left in the store
nothing_partial() {
  assert_eq "" "$(partial "$E2E_TMP/small/store")$(ls "$E2E_TMP/small/store/sha256" 2>/dev/null)" "$1: no partial cache in the store"
  assert_eq "" "$(ls -A "$E2E_TMP/small/store/staging" 2>/dev/null)$(ls -A "$E2E_TMP/small/store/pulls" 2>/dev/null)" "$1: staging and pulls cleaned"
}
agent_call "$SF" "$(mat p3 v-full vadd)"
assert_eq "$(agent_field .code)" RESOURCE_EXHAUSTED "disk full while extracting: RESOURCE_EXHAUSTED ($(agent_field .details))"
assert_contains "$(agent_field .details)" "StoreFull: cache $NS/vadd needs " "named StoreFull"
free_said=$(agent_field .details | sed -n 's/.*filesystem has \([0-9]*\) bytes free.*/\1/p')
[[ -n $free_said && $free_said -gt 0 && $free_said -le 614400 ]] || fail "the bytes free are said (got '$free_said')"
pass "the bytes needed and free are said ($free_said free)"
nothing_partial "extracting"
wait_jp 30 "node status: vadd's lastFailure is StoreFull" StoreFull tkcns "$NF" "$NS" '{.status.caches.vadd.lastFailure.reason}'
assert_contains "$(jp tkcns "$NF" "$NS" '{.status.caches.vadd.lastFailure.message}')" "bytes free on node $NF" "the node status says the bytes"
agent_call "$SF" "$(mat p3 v-full2 big)"
assert_eq "$(agent_field .code)" RESOURCE_EXHAUSTED "disk full while pulling: RESOURCE_EXHAUSTED, not UNAVAILABLE RegistryUnreachable ($(agent_field .details))"
assert_contains "$(agent_field .details)" "StoreFull: cache $NS/big needs " "named StoreFull"
assert_contains "$(agent_field .details)" "pulling sha256:" "while pulling"
nothing_partial "pulling"
wait_jp 30 "node status: big's lastFailure is StoreFull" StoreFull tkcns "$NF" "$NS" '{.status.caches.big.lastFailure.reason}'
metrics() { curl -s "$(grep -o 'metrics on http://[^ ]*' "$E2E_TMP/full.log" | tail -1 | sed 's/metrics on //')"; }
assert_eq 2 "$(metrics | awk '$1 == "tkm_agent_materialize_failures_total{reason=\"StoreFull\"}" {print $2}')" "tkm_agent_materialize_failures_total{reason=\"StoreFull\"} 2"
step "the store grows (the tmpfs remounted at 8 MiB): vadd materializes and its lastFailure goes"
mount -o remount,size=8m "$E2E_TMP/small" || fail "remount"
agent_call "$SF" "$(mat p3 v-full vadd)"
assert_eq "$(agent_field .code)" OK "materialized once there is room: $(agent_field .details)"
wait_jp 30 "node status: vadd's lastFailure cleared" "" tkcns "$NF" "$NS" '{.status.caches.vadd.lastFailure}'
assert_eq StoreFull "$(jp tkcns "$NF" "$NS" '{.status.caches.big.lastFailure.reason}')" "big's stays until big succeeds"
agent_call "$SF" '{"m":"Release","vol":"v-full"}'
kill -0 "${AGENT_PID[full]}" || fail "the agent died"
agent_stop full
umount "$E2E_TMP/small"

step "kill -9 during extraction"
NK=e2e-store-kill-$S
agent_node "$NK"
for delay in 0.2 0.4 0.7; do
  agent_start kill h200 "$NK" "$NS"
  SK=$E2E_TMP/kill/run/agent.sock
  wait_for 60 "ready" bash -c "printf '%s\n' '{\"m\":\"Status\"}' | /usr/bin/python3 '$CLIENT' '$DESC' '$SK' 2>/dev/null | grep -q '\"ready\": true'"
  (printf '%s\n' "$(mat p4 v-kill big)" | /usr/bin/python3 "$CLIENT" "$DESC" "$SK" >/dev/null 2>&1 &)
  sleep "$delay"
  kill -KILL "${AGENT_PID[kill]}"
  wait "${AGENT_PID[kill]}" 2>/dev/null || true
  AGENT_PID[kill]=
  assert_eq "" "$(partial "$E2E_TMP/kill/store")" "kill -9 after ${delay}s: no partial entry visible"
done
agent_start kill h200 "$NK" "$NS"
wait_for 60 "ready after the kills" bash -c "printf '%s\n' '{\"m\":\"Status\"}' | /usr/bin/python3 '$CLIENT' '$DESC' '$SK' 2>/dev/null | grep -q '\"ready\": true'"
assert_eq "" "$(ls -A "$E2E_TMP/kill/store/staging" 2>/dev/null)" "staging purged on start"
agent_call "$SK" "$(mat p4 v-kill big)"
assert_eq "$(agent_field .code)" OK "materialized after the kills: $(agent_field .details)"
mkdir big && tar -xzf "$BIG" -C big
diff -r big/tcache-inductor "$(agent_field .resp.store_path)" >/dev/null || fail "the store's files differ from the fixture"
pass "the complete cache, identical to the fixture"

step "SIGTERM during a pull and extraction: cancelled, nothing partial, exit 0"
NT=e2e-store-term-$S
agent_node "$NT"
for delay in 0.1 0.3; do
  agent_start term h200 "$NT" "$NS"
  ST=$E2E_TMP/term/run/agent.sock
  wait_for 60 "ready" bash -c "printf '%s\n' '{\"m\":\"Status\"}' | /usr/bin/python3 '$CLIENT' '$DESC' '$ST' 2>/dev/null | grep -q '\"ready\": true'"
  (printf '%s\n' "$(mat p6 v-term big)" | /usr/bin/python3 "$CLIENT" "$DESC" "$ST" >/dev/null 2>&1 &)
  sleep "$delay"
  pid=${AGENT_PID[term]}
  kill -TERM "$pid"
  rc=0
  wait "$pid" || rc=$?
  AGENT_PID[term]=
  [[ $rc == 0 ]] || { cat "$E2E_TMP/term.log" >&2; fail "SIGTERM after ${delay}s: exit $rc"; }
  pass "SIGTERM after ${delay}s: exit 0"
  assert_eq "" "$(partial "$E2E_TMP/term/store")$(ls -A "$E2E_TMP/term/store/staging" 2>/dev/null)$(ls -A "$E2E_TMP/term/store/pulls" 2>/dev/null)" "SIGTERM after ${delay}s: no partial entry, staging and pulls empty"
done

step "kill -9 right after a reference was written (SQLite)"
agent_call "$SK" "$(mat p5 v-sql big)"
assert_eq "$(agent_field .code)" OK "second volume"
kill -KILL "${AGENT_PID[kill]}"
wait "${AGENT_PID[kill]}" 2>/dev/null || true
AGENT_PID[kill]=
agent_start kill h200 "$NK" "$NS"
wait_for 60 "ready again" bash -c "printf '%s\n' '{\"m\":\"Status\"}' | /usr/bin/python3 '$CLIENT' '$DESC' '$SK' 2>/dev/null | grep -q '\"ready\": true'"
wait_jp 30 "both references survived" "v-kill v-sql" tkcns "$NK" "$NS" '{.status.caches.big.pods[*].volumeId}'
agent_call "$SK" '{"m":"Release","vol":"v-sql"}' '{"m":"Release","vol":"v-kill"}'
assert_eq "$(jq -rs 'map(.code) | join(" ")' <<<"$R")" "OK OK" "released after the restart"
agent_stop kill
for a in a100 h200 full kill term; do
  assert_not_contains "$(agent_log $a)" "ERROR" "$a: no error in the log"
done
e2e_done
