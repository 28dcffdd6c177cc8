#!/usr/bin/env bash
# node_capture: the cache lifecycle (issue 25) on the real node, tkm deployed as make demo does
# (node_scenario.inc with the controller, NODE_SETUP_ONLY=1), with the fake workload
# (bench/gpu/fake_workload.py, which treats TRITON_CACHE_DIR as Triton's FileCacheManager does;
# its kernels are those of a real Triton 3.6 cache, FAKE_SEED):
#   - `tkmctl capture --push --sign-key -- <workload>` on the host captures what the workload
#     compiled, pushes it, prints the cosign command, which signs it with the deployment's key;
#   - a TritonKernelCache declares it: Ready; a pod running the same workload from it compiles
#     nothing: the agent counts one pod served and none compiled (tkm-csi counted its scratch at
#     unpublish), in /metrics, the node status and the cache status (hit 1/1);
#   - pods run with a "new shape" (the workload's kernels are another cache's: 4 kernels the
#     captured one lacks) compile 4 kernels each: the counter, the node status, the cache status
#     and `kubectl tkm why` say 4 and name add_kernel, matmul_kernel and softmax_kernel;
#   - a real Prometheus scraping the node's tkm-agent and tkm-controller with manifests/monitoring/tkm-rules.yaml:
#     after three such pods of four served, TKMCacheStale goes pending for the cache.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
NODE_WITH_CONTROLLER=1 NODE_SETUP_ONLY=1
# shellcheck source=tests/e2e/node_scenario.inc
source "$(dirname "$0")/node_scenario.inc"
# shellcheck source=tests/e2e/prom.inc
source "$(dirname "$0")/prom.inc"
WL=$TKM_SOURCE_DIR/bench/gpu/fake_workload.py
F90=$TKM_FIXTURES/triton-3.6-sm90-native/cache
F80=$TKM_FIXTURES/triton-3.6-sm80-cross/cache
KT=$TKM_BUILD_DIR/kubectl-tkm/kubectl-tkm
[[ -f $WL && -d $F90 && -d $F80 && -x $KT ]] || fail "missing $WL, $F90, $F80 or $KT"
N80=$(find "$F80" -mindepth 1 -maxdepth 1 -type d | wc -l)
N90=$(find "$F90" -mindepth 1 -maxdepth 1 -type d | wc -l)
NAMES80=$(find "$F80" -name '__grp__*.json' -printf '%f\n' | sed 's/^__grp__//; s/\.json$//' | sort -u | tr '\n' ' ')
assert_eq "4 add_kernel matmul_kernel softmax_kernel " "$N80 $NAMES80" "the new shape's kernels (the sm80 fixture)"
# the pods are hostNetwork; manifests/overlays/local's ports: controller 28080, agent 28090
AGENT_METRICS=http://127.0.0.1:28090/metrics

step "a real Prometheus scrapes the node's tkm-agent and tkm-controller every second, with the alert rules"
prom_start "- job_name: tkm-agent
  static_configs:
  - targets: ['127.0.0.1:28090']
    labels: {node: $TKM_NODE_NAME}
- job_name: tkm-controller
  static_configs:
  - targets: ['127.0.0.1:28080']"
up2() { [[ $(promv 'sum(up{job=~"tkm-agent|tkm-controller"})') == 2 ]]; }
wait_for 60 "both targets are up" up2

step "tkmctl capture -- the workload: pushed, signed with the printed command"
REPO3=$TKM_REGISTRY/e2e-node-capture-$RANDOM/captured
mkdir "$E2E_TMP/ctmp"
TMPDIR=$E2E_TMP/ctmp FAKE_SEED=$F90 FAKE_COMPILE_S=0 "$TKMCTL" capture --push "$REPO3:v1" \
  --sign-key "$IMG/cosign.key" --no-nvml -o json -- python3 "$WL" triton \
  >"$E2E_TMP/capture.json" 2>"$E2E_TMP/capture.err" || fail "tkmctl capture: $(cat "$E2E_TMP/capture.err")"
assert_contains "$(cat "$E2E_TMP/capture.err")" "\"compile_misses\": $N90" "the workload compiled its $N90 kernels under capture"
PUSHED=$(jq -r .pushed "$E2E_TMP/capture.json")
[[ $PUSHED == "$REPO3:v1@sha256:"* || $PUSHED == "$REPO3@sha256:"* ]] || fail "capture -o json: pushed '$PUSHED'"
CD=${PUSHED##*@}
assert_eq "$(find "$F90" -type f | wc -l)" "$(jq -r .captured.triton.files "$E2E_TMP/capture.json")" "capture -o json: the Triton part's files, as many as the workload's kernels have"
assert_eq "" "$(find "$E2E_TMP/ctmp" -mindepth 1)" "capture left no temporary directory"
SIGN=$(jq -r .signCommand "$E2E_TMP/capture.json")
assert_eq "cosign sign --key $IMG/cosign.key $PUSHED" "$SIGN" "the printed cosign command"
read -r -a sign_argv <<<"${SIGN#cosign }"
expect_ok "run it (cosign v3, offline)" "$COSIGN" "${sign_argv[@]}" --use-signing-config=false --tlog-upload=false

step "declared: Ready; a pod running the same workload from it compiles nothing"
kubectl apply -f - >/dev/null <<EOT
apiVersion: tkm.io/v1alpha1
kind: TritonKernelCache
metadata: {name: captured, namespace: $NSA}
spec:
  cacheImage: $REPO3:v1
  mountPath: $MP
EOT
wait_for 60 "the controller pinned the captured digest" is "$NSA" tkc/captured '{.status.resolvedDigest}' "$CD"
wait_for 60 "Verified=True" is "$NSA" tkc/captured '{.status.conditions[?(@.type=="Verified")].status}' True
wait_for 90 "Ready=True" is "$NSA" tkc/captured '{.status.conditions[?(@.type=="Ready")].status}' True

# wl_pod NAME SEED: a pod running the fake workload once with the cache at $MP, its kernels SEED's
wl_pod() {
  "$hack/node.sh" apply - >/dev/null <<EOT
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: $NSA}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 0
  hostNetwork: true
  automountServiceAccountToken: false
  containers:
  - name: w
    image: $TKM_PYTHON_IMAGE
    imagePullPolicy: IfNotPresent
    command: ["python3", "/wl/fake_workload.py", "triton"]
    env:
    - {name: TRITON_CACHE_DIR, value: $MP}
    - {name: FAKE_SEED, value: /seed}
    - {name: FAKE_COMPILE_S, value: "0"}
    volumeMounts:
    - {name: k, mountPath: $MP}
    - {name: wl, mountPath: /wl, readOnly: true}
    - {name: seed, mountPath: /seed, readOnly: true}
  volumes:
  - name: k
    csi: {driver: csi.tkm.io, volumeAttributes: {cacheName: captured}}
  - name: wl
    hostPath: {path: $(dirname "$WL"), type: Directory}
  - name: seed
    hostPath: {path: $2, type: Directory}
EOT
}
# run_pod NAME SEED: runs it to completion, prints its JSON line, deletes it (kubelet unpublishes)
run_pod() {
  wl_pod "$1" "$2" || fail "apply pod $1"
  wait_for 180 "pod $1 Succeeded" is "$NSA" "pod/$1" '{.status.phase}' Succeeded
  kubectl -n "$NSA" logs "$1" | tail -1 >"$E2E_TMP/$1.json"
  kubectl -n "$NSA" delete pod "$1" --wait=true --timeout=120s >/dev/null || fail "delete pod $1"
}
# metric NAME PART: the node agent's sample NAME{namespace=$NSA,cache=$NSA/captured[,part=PART]}
metric() {
  local sel="namespace=\"$NSA\",cache=\"$NSA/captured\"${2:+,part=\"$2\"}"
  curl -sf --max-time 10 "$AGENT_METRICS" | awk -v s="$1{$sel}" '$1 == s { print $2 }'
}
served_is() { [[ $(metric tkm_agent_pods_served_total) == "$1" ]]; }
ns_compiles() { kubectl -n "$NSA" get tkcns "$TKM_NODE_NAME" -o jsonpath='{.status.caches.captured.compiles.podsServed} {.status.caches.captured.compiles.podsCompiled} {.status.caches.captured.compiles.tritonKernels}'; }
ns_is() { [[ $(ns_compiles) == "$1" ]]; }
hit_is() { [[ $(kubectl -n "$NSA" get tkc captured -o jsonpath='{.status.compiles.hit}') == "$1" ]]; }

run_pod hit1 "$F90"
assert_eq "$N90 0" "$(jq -r '"\(.compile_hits) \(.compile_misses)"' "$E2E_TMP/hit1.json")" "the workload found all $N90 kernels in the mounted cache"
wait_for 60 "the agent counted the pod at unpublish: 1 served" served_is 1
assert_eq "0 0" "$(metric tkm_agent_pods_compiled_total) $(metric tkm_agent_pod_compiles_total triton)" "none compiled, 0 Triton kernels"
wait_for 60 "the node status: 1 served, 0 compiled, 0 kernels" ns_is "1 0 0"
wait_for 60 "the cache status: hit 1/1" hit_is 1/1

step "a new shape: the pod compiles $N80 kernels beside the cache"
run_pod shape1 "$F80"
assert_eq "0 $N80" "$(jq -r '"\(.compile_hits) \(.compile_misses)"' "$E2E_TMP/shape1.json")" "the workload compiled its $N80 kernels"
wait_for 60 "the agent counted it: 2 served" served_is 2
assert_eq "1 $N80" "$(metric tkm_agent_pods_compiled_total) $(metric tkm_agent_pod_compiles_total triton)" "tkm_agent_pods_compiled_total 1, tkm_agent_pod_compiles_total{part=triton} $N80"
wait_for 60 "the node status: 2 served, 1 compiled, $N80 kernels" ns_is "2 1 $N80"
assert_eq "add_kernel=1 matmul_kernel=1 softmax_kernel=1" \
  "$(kubectl -n "$NSA" get tkcns "$TKM_NODE_NAME" -o json | jq -r '[.status.caches.captured.compiles.topKernels[] | "\(.name)=\(.pods)"] | sort | join(" ")')" \
  "the node status names the kernels, one pod each"
wait_for 60 "the cache status: hit 1/2" hit_is 1/2
why=$("$KT" why captured -n "$NSA" --no-color) || fail "kubectl tkm why: $why"
assert_contains "$why" "1 of 2 pods served compiled beside the cache since " "why: the compiles step"
assert_contains "$why" ": $N80 Triton kernels" "why: $N80 kernels"
for k in add_kernel matmul_kernel softmax_kernel; do
  assert_contains "$why" "  $k " "why names $k"
done
assert_contains "$why" "tkmctl capture" "why: re-capture advised"
st=$("$KT" status -n "$NSA" --no-color --width 0) || fail "kubectl tkm status: $st"
assert_contains "$st" "tkc/captured" "kubectl tkm status lists the cache"
assert_contains "$(grep 'tkc/captured' <<<"$st")" "1/2" "with its hits"

step "two more pods of the new shape: TKMCacheStale goes pending in Prometheus"
run_pod shape2 "$F80"
run_pod shape3 "$F80"
wait_for 60 "the agent counted them: 4 served" served_is 4
assert_eq "3 $((3 * N80))" "$(metric tkm_agent_pods_compiled_total) $(metric tkm_agent_pod_compiles_total triton)" "3 pods compiled, $((3 * N80)) kernels"
seen() { [[ $(promv "sum(tkm_agent_pods_served_total{cache=\"$NSA/captured\"})") == 4 ]]; }
wait_for 60 "Prometheus scraped the 4 pods served" seen
# The agent creates the series at 0 when it first tracks a volume of the cache: increase() counts
# the first pod released too (a series born at 1 would lose it: about 3.1 here, under the alert's 3
# once a pod of the hour was a hit).
inc=$(promv "sum(increase(tkm_agent_pods_served_total{cache=\"$NSA/captured\"}[1h]))")
awk -v v="$inc" 'BEGIN { exit !(v != "" && v >= 3.9) }' || fail "increase(pods served [1h]) is '$inc', expected about 4"
pass "increase(tkm_agent_pods_served_total[1h]) = $inc: every pod served counted"
wait_for 60 "TKMCacheStale pending" alert_pending TKMCacheStale
assert_eq "$NSA/captured" "$(curl -sf "$PROM/api/v1/alerts" | jq -r '.data.alerts[] | select(.labels.alertname == "TKMCacheStale") | .labels.cache')" "the alert names the cache"
assert_eq "" "$(alerts | grep -v '^TKMCacheStale=' || true)" "no other alert"
wait_for 60 "the cache status: hit 1/4" hit_is 1/4
e2e_done
