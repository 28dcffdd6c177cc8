#!/usr/bin/env bash
# agent_socket: the real tkm-agent's socket, called by grpcio (/usr/bin/python3,
# tests/e2e/agent_rpc_client.py) as the CSI driver would. A cache declared by name or by
# image is pulled, extracted into the store and answered with a store path whose files
# are the fixture's; an undeclared image and another namespace's cache are refused; an
# incompatible node answers an empty volume (the Empty fallback, the default policy) with
# the reason, one Warning event on the pod and the metric, pulling nothing; Release drops the
# reference; the node status shows extracted and pods[]; a deleted cache's compiles series leave
# /metrics, the others stay.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/agent.inc"
e2e_crds
agent_ns
NSA=$NS
agent_ns
NSB=$NS
cd "$E2E_TMP"
FX=$TKM_FIXTURES/triton-cache/triton-3.6.0-cuda-sm90.tar.gz
REPO=$TKM_REGISTRY/e2e-agent-socket-$RANDOM/vadd
D=$(agent_image "$REPO" "$FX")
mkdir fx && tar -xzf "$FX" -C fx
# the caches here switch signature checks off for themselves: the admin allows it (issue 23)
kubectl -n "$NSA" create configmap tkm-config --from-literal=signatureFloor=Disabled >/dev/null
cache_create tkc "$NSA" vadd "$REPO:v1" "$D" "  mountPath: /home/ml/.triton/cache
  signaturePolicy: {mode: Disabled}"
cache_create tkc "$NSB" other "$REPO:v1" "$D" "  signaturePolicy: {mode: Disabled}"
cache_create tkc "$NSB" gone "$REPO:v1" "$D" "  signaturePolicy: {mode: Disabled}"
S=$RANDOM
N1=e2e-sock-h200-$S N2=e2e-sock-a100-$S
agent_node "$N1"
agent_node "$N2"
agent_start h200 h200 "$N1" "$NSA" --metrics-bind-address 127.0.0.1:0 --health-probe-bind-address 127.0.0.1:0
agent_start a100 a100 "$N2" "$NSA" --metrics-bind-address 127.0.0.1:0
SOCK1=$E2E_TMP/h200/run/agent.sock SOCK2=$E2E_TMP/a100/run/agent.sock

mat() { # NS POD VOL ATTRS_JSON
  printf '{"m":"Materialize","ns":"%s","pod":"%s","uid":"0f8e7d6c-1111-4222-8333-%012d","vol":"%s","attrs":%s,"timeout":60}' "$1" "$2" "$RANDOM" "$3" "$4"
}

step "the socket: mode 0600 in a 0700 directory, ready once synced"
wait_for 30 "socket exists" test -S "$SOCK1"
assert_eq "$(stat -c %a "$SOCK1") $(stat -c %a "$(dirname "$SOCK1")")" "600 700" "socket and directory modes"
wait_jp 60 "vadd judged on $N1" nvidia-h200 tkcns "$N1" "$NSA" '{.status.caches.vadd.compatibleGPUs[0].gpuType}'
agent_call "$SOCK1" '{"m":"Status"}'
assert_eq "$(agent_field .code) $(agent_field .resp.ready) $(agent_field .resp.node_name)" "OK true $N1" "Status: ready"

step "Materialize by name: pulled, extracted, the fixture's files"
t0=$(date +%s.%N)
agent_call "$SOCK1" "$(mat "$NSA" trainer-0 vol-1 '{"cacheName":"vadd"}')"
echo "first Materialize (pull + extract + check): $(echo "$(date +%s.%N) - $t0" | bc) s"
assert_eq "$(agent_field .code)" OK "Materialize OK: $(agent_field .details)"
P=$(agent_field .resp.store_path)
assert_eq "$(agent_field .resp.target_arch) $(agent_field .resp.mount_path) $(agent_field .resp.digest) $(agent_field .resp.cache_namespace)/$(agent_field .resp.cache_name)" \
  "90 /home/ml/.triton/cache $D $NSA/vadd" "arch, mountPath hint, digest, cache"
[[ $P == "$E2E_TMP/h200/store/"* && -d $P ]] || fail "store path '$P' is not a directory in the store"
diff -r fx/tcache "$P" >diff.out 2>&1 || fail "the store's files differ from the fixture: $(head -5 diff.out)"
pass "the store path holds exactly the fixture's files"

step "Materialize by image, idempotent per volume"
agent_call "$SOCK1" "$(mat "$NSA" trainer-1 vol-2 "{\"cacheImage\":\"$REPO:v1\"}")" "$(mat "$NSA" trainer-0 vol-1 '{"cacheName":"vadd"}')"
assert_eq "$(jq -rs '.[0].code + " " + .[1].code' <<<"$R")" "OK OK" "by image OK, repeat OK"
assert_eq "$(jq -rs '.[0].resp.store_path' <<<"$R")" "$P" "same store path"
wait_jp 30 "node status: extracted, two pods" "true trainer-0 trainer-1" tkcns "$N1" "$NSA" \
  '{.status.caches.vadd.extracted} {.status.caches.vadd.pods[*].name}'

step "/metrics, /healthz, /readyz"
wait_for 10 "metrics address logged" grep -q "metrics on http://" "$E2E_TMP/h200.log"
MURL=$(grep -o "metrics on http://[^ ]*" "$E2E_TMP/h200.log" | head -1 | sed 's/metrics on //')
HURL=$(grep -o "probes on http://[^ ]*" "$E2E_TMP/h200.log" | head -1 | sed 's/probes on //; s|/healthz$||')
assert_eq 200 "$(curl -s -o /dev/null -w '%{http_code}' "$HURL/readyz")" "/readyz 200 once synced"
assert_eq 200 "$(curl -s -o /dev/null -w '%{http_code}' "$HURL/healthz")" "/healthz 200"
M=$(curl -s "$MURL")
assert_contains "$M" 'tkm_agent_caches{state="usable"}' "caches by state"
assert_contains "$M" "tkm_agent_extractions_total 1" "one extraction counted"
assert_contains "$M" "tkm_agent_extraction_seconds_count 1" "its seconds observed"
assert_contains "$M" "tkm_agent_store_entries 1" "one store entry"
assert_contains "$M" "tkm_agent_store_references 2" "two references"
assert_contains "$M" "tkm_agent_gpus 1" "one GPU"
assert_contains "$M" "process_resident_memory_bytes" "process metrics"

step "refusals"
agent_call "$SOCK1" "$(mat "$NSA" p vol-3 "{\"cacheImage\":\"$TKM_REGISTRY/nobody/declared:v1\"}")"
assert_eq "$(agent_field .code)" PERMISSION_DENIED "an undeclared image is refused"
agent_call "$SOCK1" "$(mat "$NSB" p vol-4 '{"cacheName":"vadd"}')"
assert_eq "$(agent_field .code)" PERMISSION_DENIED "another namespace's cache is refused"
assert_contains "$(agent_field .details)" "vadd" "the refusal names the cache"
agent_call "$SOCK1" "$(mat "$NSA" p vol-5 '{"cacheName":"vadd","bogus":"x"}')"
assert_eq "$(agent_field .code)" INVALID_ARGUMENT "an unknown attribute is refused"
wait_jp 60 "vadd judged on $N2" ArchMismatch tkcns "$N2" "$NSA" '{.status.caches.vadd.incompatibleGPUs[0].reason}'

step "an incompatible node: the Empty fallback (the default whenIncompatible)"
agent_call "$SOCK2" "$(mat "$NSA" p vol-6 '{"cacheName":"vadd"}')" "$(mat "$NSA" p vol-6 '{"cacheName":"vadd"}')"
assert_eq "$(jq -rs 'map(.code + " " + (.resp.empty|tostring) + " " + .resp.empty_reason + " " + (.resp.parts|join(",")) + " [" + .resp.store_path + "]") | join("; ")' <<<"$R")" \
  "OK true ArchMismatch triton []; OK true ArchMismatch triton []" "an empty volume, twice for one volume: the reason, the parts, no store path"
assert_contains "$(jq -rs '.[0].resp.empty_message' <<<"$R")" "no GPU on node $N2 can use cache $NSA/vadd: arch mismatch" "the message says why"
[[ -z $(ls "$E2E_TMP/a100/store/sha256" 2>/dev/null) ]] || fail "the A100 node's store is not empty"
pass "nothing pulled on the incompatible node"
wait_for 30 "Warning CacheNotUsed on pod p" bash -c "kubectl -n $NSA get events --field-selector involvedObject.name=p,reason=CacheNotUsed -o jsonpath='{.items[0].type}' | grep -q Warning"
assert_eq "$(kubectl -n "$NSA" get events --field-selector involvedObject.name=p,reason=CacheNotUsed -o jsonpath='{.items[0].count}')" 1 "one event for the volume (not one per call)"
wait_for 10 "metrics address logged" grep -q "metrics on http://" "$E2E_TMP/a100.log"
MURL2=$(grep -o "metrics on http://[^ ]*" "$E2E_TMP/a100.log" | head -1 | sed 's/metrics on //')
assert_contains "$(curl -s "$MURL2")" 'tkm_agent_empty_volumes_total{reason="ArchMismatch"} 1' "the empty volume counted by reason"
wait_jp 30 "the empty volume's pod in pods[]" p tkcns "$N2" "$NSA" '{.status.caches.vadd.pods[*].name}'
agent_call "$SOCK2" '{"m":"Release","vol":"vol-6"}' '{"m":"Release","vol":"vol-6"}'
assert_eq "$(jq -rs 'map(.code) | join(" ")' <<<"$R")" "OK NOT_FOUND" "the empty volume released, then unknown"

step "no mountPath anywhere: a Warning Event on the pod"
agent_call "$SOCK1" "$(mat "$NSB" loader-0 vol-7 '{"cacheName":"other"}')"
assert_eq "$(agent_field .code) $(agent_field .resp.mount_path)" "OK " "other (no mountPath) materialized, no hint"
wait_for 30 "Warning NoMountPath on pod loader-0" bash -c "kubectl -n $NSB get events --field-selector involvedObject.name=loader-0,reason=NoMountPath -o jsonpath='{.items[0].type}' | grep -q Warning"
agent_call "$SOCK1" '{"m":"Release","vol":"vol-7"}'

step "Release"
# with tkm-csi's scratch counts: trainer-0 compiled 3 kernels and an FX graph, trainer-1 nothing
agent_call "$SOCK1" '{"m":"Release","vol":"vol-1","scratch":{"triton_kernels":3,"inductor_fxgraph":1,"files":9,"bytes":4096,"kernel_names":["add_kernel","bad name","add_kernel_2"]}}' \
  '{"m":"Release","vol":"vol-1"}' '{"m":"Release","vol":"vol-2","scratch":{"files":0}}'
assert_eq "$(jq -rs 'map(.code) | join(" ")' <<<"$R")" "OK NOT_FOUND OK" "released, then unknown"
M=$(curl -s "$MURL")
assert_contains "$M" "tkm_agent_pods_served_total{namespace=\"$NSA\",cache=\"$NSA/vadd\"} 2" "two pods served counted"
assert_contains "$M" "tkm_agent_pods_compiled_total{namespace=\"$NSA\",cache=\"$NSA/vadd\"} 1" "one of them compiled"
assert_contains "$M" "tkm_agent_pod_compiles_total{namespace=\"$NSA\",cache=\"$NSA/vadd\",part=\"triton\"} 3" "3 Triton kernels"
assert_contains "$M" "tkm_agent_pod_compiles_total{namespace=\"$NSA\",cache=\"$NSA/vadd\",part=\"inductor\"} 1" "1 Inductor entry"
assert_not_contains "$M" "trainer-0" "no pod names in labels"
wait_jp 30 "pods[] empty" "" tkcns "$N1" "$NSA" '{.status.caches.vadd.pods[*].name}'
assert_eq "$(jp tkcns "$N1" "$NSA" '{.status.caches.vadd.extracted}')" true "still extracted (grace period)"

step "a deleted cache: its series leave /metrics"
agent_call "$SOCK1" "$(mat "$NSB" gone-0 vol-8 '{"cacheName":"gone"}')"
assert_eq "$(agent_field .code)" OK "gone materialized: $(agent_field .details)"
agent_call "$SOCK1" '{"m":"Release","vol":"vol-8","scratch":{"triton_kernels":2,"files":2,"bytes":10}}'
assert_eq "$(agent_field .code)" OK "gone released with a count"
M=$(curl -s "$MURL")
assert_contains "$M" "tkm_agent_pod_compiles_total{namespace=\"$NSB\",cache=\"$NSB/gone\",part=\"triton\"} 2" "gone's 2 kernels counted"
kubectl -n "$NSB" delete tkc gone >/dev/null
wait_for 30 "no series of $NSB/gone" bash -c "! curl -s '$MURL' | grep -qF 'cache=\"$NSB/gone\"'"
M=$(curl -s "$MURL")
assert_contains "$M" "tkm_agent_pods_served_total{namespace=\"$NSA\",cache=\"$NSA/vadd\"} 2" "vadd's series stay"
assert_contains "$M" "tkm_agent_pod_compiles_total{namespace=\"$NSA\",cache=\"$NSA/vadd\",part=\"triton\"} 3" "vadd's kernels stay"

step "restart keeps the store"
agent_call "$SOCK1" "$(mat "$NSA" trainer-9 vol-9 '{"cacheName":"vadd"}')"
assert_eq "$(agent_field .code)" OK "materialized before the restart"
agent_stop h200
agent_start h200 h200 "$N1" "$NSA"
wait_for 30 "socket back" test -S "$SOCK1"
wait_for 60 "ready again" bash -c "printf '%s\n' '{\"m\":\"Status\"}' | /usr/bin/python3 '$CLIENT' '$DESC' '$SOCK1' | grep -q '\"ready\": true'"
agent_call "$SOCK1" "$(mat "$NSA" trainer-9 vol-9 '{"cacheName":"vadd"}')"
assert_eq "$(agent_field .code) $(agent_field .resp.store_path)" "OK $P" "same answer after a restart"
n=$(grep -c "tkm-agent: extracted sha256:" "$E2E_TMP/h200.log" || true)
assert_eq 1 "$n" "extracted once, not again after the restart"
agent_stop h200
agent_stop a100
assert_not_contains "$(agent_log h200)$(agent_log a100)" "ERROR" "no error in the logs"
e2e_done
