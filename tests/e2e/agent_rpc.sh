#!/usr/bin/env bash
# agent_rpc: tkm-agent's socket for the CSI driver (agent/rpc.c, agent/declared.c) against
# the real apiserver. e2e_agent_rpc is a HARNESS (not tkm-agent): real informers on
# TritonKernelCache (all namespaces) and TritonKernelCacheCluster plus the agent socket,
# answering Materialize with the declared cache's spec. The client is grpcio
# (/usr/bin/python3, tests/e2e/agent_rpc_client.py) with the messages of the descriptor set
# protoc-c wrote for agent/agent.proto.
source "$(dirname "$0")/lib.sh"

PBIN=$TKM_BUILD_DIR/tests/e2e_agent_rpc
DESC=$TKM_BUILD_DIR/agent/proto-tkm_agent_proto/agent.desc
CLIENT=$TKM_SOURCE_DIR/tests/e2e/agent_rpc_client.py
[[ -x $PBIN ]] || fail "missing $PBIN (build first)"
[[ -s $DESC ]] || fail "missing $DESC (build first)"
kubectl apply -f "$TKM_SOURCE_DIR/crds/" >/dev/null
e2e_crds_established tritonkernelcaches tritonkernelcacheclusters
NSA=$(e2e_namespace)
NSB=$(e2e_namespace)
SUF=$RANDOM$RANDOM
CL=e2e-agentrpc-cl-$SUF
IMG_A=registry.example.com:5000/e2e/agentrpc-vec:v$SUF
IMG_CL=registry.example.com:5000/e2e/agentrpc-shared:v$SUF
IMG_NONE=registry.example.com:5000/e2e/agentrpc-nobody:v$SUF
DIGEST=sha256:$(printf 'ab%.0s' {1..32})
UID1=0f8e7d6c-1111-4222-8333-944455556666
SOCK=$E2E_TMP/run/tkm/agent.sock
e2e_on_exit "kubectl delete tkcc $CL --wait=false >/dev/null 2>&1"

step "caches: TritonKernelCache vec in $NSA (with a pinned digest), TritonKernelCacheCluster $CL"
kubectl apply -f - >/dev/null <<EOF
apiVersion: tkm.io/v1alpha1
kind: TritonKernelCache
metadata: {name: vec, namespace: $NSA}
spec: {cacheImage: "$IMG_A", mountPath: /home/ml/.triton/cache}
---
apiVersion: tkm.io/v1alpha1
kind: TritonKernelCacheCluster
metadata: {name: $CL}
spec: {cacheImage: "$IMG_CL"}
EOF
kubectl -n "$NSA" patch tkc vec --subresource=status --type=merge \
  -p "{\"status\":{\"resolvedDigest\":\"$DIGEST\"}}" >/dev/null

step "the harness: informers + the agent socket"
vg=()
if command -v valgrind >/dev/null && [[ ${TKM_E2E_VALGRIND:-1} == 1 ]]; then
  vg=(valgrind -q --leak-check=full '--show-leak-kinds=definite,indirect'
    '--errors-for-leak-kinds=definite,indirect' --error-exitcode=9
    --suppressions="$TKM_SOURCE_DIR/tests/valgrind.supp")
fi
"${vg[@]}" "$PBIN" --socket "$SOCK" >"$E2E_TMP/out" 2>"$E2E_TMP/err" &
pid=$!
e2e_on_exit "kill -9 $pid 2>/dev/null"
wait_for 90 "the harness synced both informers" grep -q '^SYNCED' "$E2E_TMP/out"

# rpc JSON: one call through grpcio; the result line (code, details, resp) in $R.
rpc() {
  R=$(printf '%s\n' "$1" | /usr/bin/python3 "$CLIENT" "$DESC" "$SOCK" 2>&1) || fail "grpcio client: $R"
}
# mat NS POD VOL ATTRS [TIMEOUT]
mat() {
  rpc "{\"m\":\"Materialize\",\"ns\":\"$1\",\"pod\":\"$2\",\"uid\":\"$UID1\",\"vol\":\"$3\",\"attrs\":$4,\"timeout\":${5:-10}}"
}
j() { jq -r "$1" <<<"$R"; }
mat_code_is() { # CODE NS NAME
  mat "$2" pod-x vol-x "{\"cacheName\":\"$3\"}"
  [[ $(j .code) == "$1" ]]
}

step "the socket: mode 0600 in a 0700 directory"
assert_eq "socket 600" "$(stat -c '%F %a' "$SOCK")" "socket file mode"
assert_eq "directory 700" "$(stat -c '%F %a' "$(dirname "$SOCK")")" "socket directory mode"

step "Status"
rpc '{"m":"Status"}'
assert_eq "OK true e2e-harness 0.1.0" "$(j '[.code, .resp.ready, .resp.node_name, .resp.version] | join(" ")')" "Status: ready"

step "declared caches -> OK"
mat "$NSA" pod-a vol-a1 '{"cacheName":"vec"}'
assert_eq OK "$(j .code)" "$NSA asks for its cache vec by name: $R"
assert_eq "$NSA|vec|/home/ml/.triton/cache|$DIGEST|/harness/store/$NSA/vec|harness" \
  "$(j '[.resp.cache_namespace, .resp.cache_name, .resp.mount_path, .resp.digest, .resp.store_path, .resp.target_arch] | join("|")')" \
  "the answer carries the cache's spec, pinned digest and mountPath hint"
mat "$NSA" pod-a vol-a2 "{\"cacheImage\":\"$IMG_A\",\"mountPath\":\"/custom/cache\",\"readOnly\":\"true\",\"csi.storage.k8s.io/pod.namespace\":\"$NSA\",\"csi.storage.k8s.io/ephemeral\":\"true\"}"
assert_eq "OK vec /custom/cache" "$(j '[.code, .resp.cache_name, .resp.mount_path] | join(" ")')" "$NSA asks by image; the volume's mountPath wins; csi.storage.k8s.io/* ignored"
for ns in "$NSA" "$NSB"; do
  mat "$ns" pod-c "vol-c-$ns" "{\"cacheName\":\"$CL\"}"
  assert_eq "OK||$CL|" "$(j '[.code, .resp.cache_namespace, .resp.cache_name, .resp.mount_path] | join("|")')" "$ns gets the cluster cache by name"
done
mat "$NSB" pod-c vol-c-img "{\"cacheImage\":\"$IMG_CL\"}"
assert_eq "OK $CL" "$(j '[.code, .resp.cache_name] | join(" ")')" "$NSB gets the cluster cache by image"
mat "$NSA" pod-a vol-a1 '{"cacheName":"vec"}'
assert_eq "OK vec" "$(j '[.code, .resp.cache_name] | join(" ")')" "a repeated Materialize of the same volume answers the same"

step "undeclared -> PERMISSION_DENIED"
mat "$NSB" pod-b vol-b1 '{"cacheName":"vec"}'
assert_eq PERMISSION_DENIED "$(j .code)" "$NSB asks for $NSA's cache by name"
assert_eq "cache \"vec\" is not declared for namespace \"$NSB\": no TritonKernelCache $NSB/vec and no TritonKernelCacheCluster vec" "$(j .details)" "the message names both kinds"
mat "$NSB" pod-b vol-b2 "{\"cacheImage\":\"$IMG_A\"}"
assert_eq PERMISSION_DENIED "$(j .code)" "$NSB asks for $NSA's image"
assert_contains "$(j .details)" "no cache in namespace $NSB or cluster-wide declares image $IMG_A" "the message names namespace and image"
mat "$NSA" pod-a vol-a3 "{\"cacheImage\":\"$IMG_NONE\"}"
assert_eq PERMISSION_DENIED "$(j .code)" "an image nobody declares"
mat "$NSA" pod-a vol-a4 "{\"cacheImage\":\"$IMG_A-other\"}"
assert_eq PERMISSION_DENIED "$(j .code)" "an image that only starts like a declared one"

step "bad requests -> INVALID_ARGUMENT"
bad() { # ATTRS EXPECTED-IN-DETAILS [NS POD]
  mat "${3-$NSA}" "${4:-pod-a}" vol-bad "$1"
  assert_eq INVALID_ARGUMENT "$(j .code)" "refused: $1"
  assert_contains "$(j .details)" "$2" "message for $1"
}
bad "{\"cacheName\":\"vec\",\"cacheImage\":\"$IMG_A\"}" "cacheName and cacheImage are both set"
bad '{"readOnly":"true"}' "no cache named"
bad '{"cacheName":"vec","kernelName":"x"}' 'unknown volume attribute "kernelName"'
bad '{"cacheName":"vec","readOnly":"yes"}' 'volume attribute readOnly is "yes": it must be "true" or "false"'
bad '{"cacheName":"vec","mountPath":"cache"}' 'mountPath "cache" is not an absolute path'
bad '{"cacheName":"vec","mountPath":"/a/../etc"}' 'has a ".." component'
bad '{"cacheName":"vec","mountPath":"/a\u0000b"}' 'volume attribute "mountPath" contains a NUL byte'
bad '{"cacheName":"Vec"}' 'cacheName "Vec" is not a cache name'
bad '{"cacheName":"vec","csi.storage.k8s.io/pod.namespace":"elsewhere"}' 'csi.storage.k8s.io/pod.namespace is "elsewhere"'
bad '{"cacheName":"vec"}' 'pod_namespace is missing' ""
bad '{"cacheName":"vec"}' 'pod_name "Bad_Pod" is not a pod name' "$NSA" Bad_Pod
rpc '{"m":"Materialize","ns":"a","pod":"p","uid":"u","vol":"a/b","attrs":{"cacheName":"vec"}}'
assert_eq INVALID_ARGUMENT "$(j .code)" "a volume id with a slash"

step "Release"
rpc '{"m":"Release","vol":"vol-a1"}'
assert_eq "OK true" "$(j '[.code, .resp.released] | join(" ")')" "Release of a materialized volume"
rpc '{"m":"Release","vol":"vol-a1"}'
assert_eq NOT_FOUND "$(j .code)" "Release again: NOT_FOUND"
rpc '{"m":"Release","vol":"csi-never-seen"}'
assert_eq "NOT_FOUND volume \"csi-never-seen\" is not known to this agent (nothing to release)" "$(j '[.code, .details] | join(" ")')" "Release of an unknown volume"
rpc '{"m":"Release","vol":""}'
assert_eq "INVALID_ARGUMENT volume_id is missing" "$(j '[.code, .details] | join(" ")')" "Release without a volume id"

step "the informers follow the apiserver"
kubectl -n "$NSB" apply -f - >/dev/null <<EOF
apiVersion: tkm.io/v1alpha1
kind: TritonKernelCache
metadata: {name: late}
spec: {cacheImage: "$IMG_NONE"}
EOF
wait_for 30 "a TritonKernelCache created now is declared" mat_code_is OK "$NSB" late
mat "$NSB" pod-b vol-b3 "{\"cacheImage\":\"$IMG_NONE\"}"
assert_eq "OK late $NSB" "$(j '[.code, .resp.cache_name, .resp.cache_namespace] | join(" ")')" "its image is declared for $NSB"
mat "$NSA" pod-a vol-a5 "{\"cacheImage\":\"$IMG_NONE\"}"
assert_eq PERMISSION_DENIED "$(j .code)" "but still not for $NSA"
kubectl -n "$NSB" delete tkc late >/dev/null
wait_for 30 "a deleted TritonKernelCache is no longer declared" mat_code_is PERMISSION_DENIED "$NSB" late

step "a client deadline cancels the call; the late answer is dropped"
mat "$NSA" slow-pod vol-slow '{"cacheName":"vec"}' 0.5
assert_eq DEADLINE_EXCEEDED "$(j .code)" "the client gave up after 0.5 s"
wait_for 10 "the harness saw the cancel" grep -q '^CANCEL vol-slow$' "$E2E_TMP/out"
wait_for 10 "its late reply was dropped (-ECANCELED)" grep -q '^LATE vol-slow -125$' "$E2E_TMP/out"
rpc '{"m":"Release","vol":"vol-slow"}'
assert_eq NOT_FOUND "$(j .code)" "a cancelled Materialize took no reference"

step "peer credentials are logged"
assert_contains "$(cat "$E2E_TMP/err")" "agent-rpc: Materialize from pid " "the caller's pid is logged"
grep -qE "Materialize from pid [0-9]+ uid $(id -u) gid $(id -g): pod $NSA/pod-a " "$E2E_TMP/err" ||
  fail "no peer credentials line for $NSA/pod-a in: $(head -c 2000 "$E2E_TMP/err")"
pass "uid and gid logged with the pod"

step "shutdown"
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
((rc == 0)) || { tail -30 "$E2E_TMP/err" >&2; fail "e2e_agent_rpc exited $rc"; }
pass "the harness exited 0 on SIGTERM (valgrind clean when enabled)"
[[ ! -e $SOCK ]] || fail "socket $SOCK left behind"
pass "socket removed on close"
e2e_done
