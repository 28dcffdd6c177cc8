#!/usr/bin/env bash
# kubectl_tkm: the kubectl plugin (kubectl-tkm) run by the real kubectl against the real
# apiserver, with node status objects as tkm-agents write them:
#   - small: 3 caches x 3 nodes (in use, ready, incompatible, failed, unverified, pending,
#     absent): `kubectl tkm status` (matrix, wide, grouped), `why` with and without --node,
#     compared with tests/e2e/golden/kubectl-tkm/*.txt (namespace, registry port and the
#     image digest normalised);
#   - check: a real image (tkmctl build of the fixture cache, pushed to the registry) judged
#     against the nodes' gpus[]: compatible on the H200 with CUDA 13.0, ArchMismatch on the
#     A100, PTX too new on the H200 whose driver has CUDA 12.4;
#   - 1000 nodes written by bench_simagents (998 H200, 2 MI300X) plus two exceptions:
#     the grouped table (golden) and the JSON counts;
#   - errors: a cache that does not exist, an unreachable apiserver, a bad flag.
# `status` runs with --kind tkc: cluster caches that other scenarios leave would add rows.
# TKM_GOLDEN_UPDATE=1 rewrites the golden files from this run instead of comparing.
source "$(dirname "$0")/lib.sh"

PLUGIN_DIR=$TKM_BUILD_DIR/kubectl-tkm
TKMCTL=$TKM_BUILD_DIR/cli/tkmctl
SIM=$TKM_BUILD_DIR/bench/bench_simagents
CRANE=$("$TKM_SOURCE_DIR/hack/testbin/build.sh" --path crane)
GOLDEN=$TKM_SOURCE_DIR/tests/e2e/golden/kubectl-tkm
[[ -x $PLUGIN_DIR/kubectl-tkm && -x $TKMCTL && -x $SIM ]] || fail "build kubectl-tkm, tkmctl and bench_simagents first"
export PATH=$PLUGIN_DIR:$PATH
unset COLUMNS NO_COLOR
e2e_crds
NS=$(e2e_namespace)
BIG=$(e2e_namespace)
e2e_on_exit "kubectl delete nodes -l tkm.io/bench-sim=true --wait=false >/dev/null 2>&1"

# normalise: the namespaces, the registry's port, the real image's digest
DIGEST=
norm() {
  sed -e "s/$NS/NS/g" -e "s/$BIG/BIG/g" -e "s/$TKM_REGISTRY/REGISTRY/g" \
    ${DIGEST:+-e "s/${DIGEST#sha256:}/IMAGEDIGEST/g" -e "s/${DIGEST:7:12}/IMAGEDIGEST12/g"}
}
# golden NAME CMD...: CMD's stdout, normalised, must equal golden/NAME.txt
golden() {
  local name=$1 got
  shift
  got=$("$@" 2>&1 | norm) || true
  if [[ ${TKM_GOLDEN_UPDATE:-0} == 1 ]]; then
    mkdir -p "$GOLDEN"
    printf '%s\n' "$got" >"$GOLDEN/$name.txt"
    pass "golden $name written"
    return
  fi
  [[ -f $GOLDEN/$name.txt ]] || fail "missing golden file $GOLDEN/$name.txt"
  if ! diff -u "$GOLDEN/$name.txt" <(printf '%s\n' "$got") >"$E2E_TMP/diff"; then
    fail "golden $name differs:
$(cat "$E2E_TMP/diff")"
  fi
  pass "golden $name"
}

step "plugin: kubectl finds kubectl-tkm on the PATH"
expect_ok "kubectl plugin list" kubectl plugin list
assert_contains "$OUT" "$PLUGIN_DIR/kubectl-tkm" "kubectl lists the plugin"
expect_ok "kubectl tkm --help" kubectl tkm --help
assert_contains "$OUT" "kubectl tkm status -A" "the help has examples"
for c in status why check; do
  expect_ok "kubectl tkm $c --help" kubectl tkm "$c" --help
  assert_contains "$OUT" "Examples:" "$c --help teaches with examples"
done

step "small: an image, 3 caches, 3 nodes"
SRC=$E2E_TMP/src
mkdir -p "$SRC"
tar -xzf "$TKM_FIXTURES/triton-cache/triton-3.6.0-cuda-sm90.tar.gz" -C "$SRC"
IMAGE=$TKM_REGISTRY/kubectl-tkm/vector-add:triton-3.6.0-sm90
expect_ok "tkmctl build --push" "$TKMCTL" build "$SRC/tcache" --push "$IMAGE"
DIGEST=$("$CRANE" digest "$IMAGE")
[[ $DIGEST == sha256:* ]] || fail "no digest in tkmctl's output: $OUT"
D2=sha256:$(printf 'kubectl-tkm matmul' | sha256sum | cut -d' ' -f1)
D3=sha256:$(printf 'kubectl-tkm softmax' | sha256sum | cut -d' ' -f1)
DOLD=sha256:$(printf 'kubectl-tkm softmax old' | sha256sum | cut -d' ' -f1)
T=2026-11-23T12:00:00Z
cache() { # NAME IMAGE DIGEST VERIFIED_STATUS VERIFIED_REASON VERIFIED_MESSAGE
  kubectl -n "$NS" create -f - >/dev/null <<EOF
{"apiVersion":"tkm.io/v1alpha1","kind":"TritonKernelCache","metadata":{"name":"$1"},"spec":{"cacheImage":"$2"}}
EOF
  kubectl -n "$NS" patch tkc "$1" --subresource=status --type=merge -p "$(jq -nc --arg d "$3" --arg vs "$4" --arg vr "$5" --arg vm "$6" --arg t "$T" \
    '{status:{observedGeneration:1,resolvedDigest:$d,conditions:[{type:"Verified",status:$vs,reason:$vr,message:$vm,lastTransitionTime:$t,observedGeneration:1},{type:"Ready",status:"True",reason:"CompatibleNodes",message:"compatible on 1 of 3 nodes",lastTransitionTime:$t,observedGeneration:1}]}}')" >/dev/null
}
cache vector-add "$IMAGE" "$DIGEST" True SignatureVerified "$DIGEST verified with key sha256:a2c3615aa6537d34 (spec.signaturePolicy (Enforce, key inline)); .sig tag"
cache matmul "$TKM_REGISTRY/kubectl-tkm/matmul:v2" "$D2" False NoSignature "no signature found for $D2 (policy: tkm-config (Enforce))"
cache softmax "$TKM_REGISTRY/kubectl-tkm/softmax:v1" "$D3" True SignatureVerified "$D3 verified with key sha256:a2c3615aa6537d34 (tkm-config); referrers"
H200='{"id":0,"gpuType":"nvidia-h200","vendor":"nvidia","productName":"NVIDIA H200","arch":"90","computeCapability":"9.0","warpSize":32,"driverVersion":"580.159.04","cudaDriverVersion":"13.0","memoryBytes":150754820096,"uuid":"GPU-e9406ba5","pciBusId":"0000:00:06.0"}'
A100='{"id":0,"gpuType":"nvidia-a100","vendor":"nvidia","productName":"NVIDIA A100-SXM4-80GB","arch":"80","computeCapability":"8.0","warpSize":32,"driverVersion":"570.124.06","cudaDriverVersion":"12.8","memoryBytes":85899345920}'
H200OLD=${H200/13.0/12.4}
ARCH_MSG="arch mismatch: cache built for sm90, GPU 0 (NVIDIA A100-SXM4-80GB) is sm80"
report() { # NODE GPUS CACHES
  local f=$E2E_TMP/report-$1.json
  cat >"$f" <<EOF
{"apiVersion":"tkm.io/v1alpha1","kind":"TritonKernelCacheNodeStatus","metadata":{"name":"$1","namespace":"$NS"},
 "status":{"nodeName":"$1","gpus":[$2],"caches":$3,"lastUpdated":"$T"}}
EOF
  kubectl apply --server-side --field-manager=tkm-agent -f "$f" >/dev/null
  kubectl apply --server-side --field-manager=tkm-agent --subresource=status -f "$f" >/dev/null
}
report node-a "$H200" "{
 \"vector-add\":{\"digest\":\"$DIGEST\",\"verified\":true,\"extracted\":true,\"compatibleGPUs\":[{\"ids\":[0],\"gpuType\":\"nvidia-h200\"}],
   \"pods\":[{\"namespace\":\"$NS\",\"name\":\"llama-0\",\"uid\":\"u-0\",\"volumeId\":\"v-0\"},{\"namespace\":\"$NS\",\"name\":\"llama-1\",\"uid\":\"u-1\",\"volumeId\":\"v-1\"}],\"lastUpdated\":\"$T\"},
 \"matmul\":{\"digest\":\"$D2\",\"verified\":false,\"extracted\":false,\"compatibleGPUs\":[{\"ids\":[0],\"gpuType\":\"nvidia-h200\"}],\"error\":\"NoSignature: no signature found for $D2\",\"lastUpdated\":\"$T\"},
 \"softmax\":{\"digest\":\"$DOLD\",\"verified\":true,\"extracted\":true,\"compatibleGPUs\":[{\"ids\":[0],\"gpuType\":\"nvidia-h200\"}],\"lastUpdated\":\"$T\"}}"
report node-b "$A100" "{
 \"vector-add\":{\"digest\":\"$DIGEST\",\"verified\":true,\"extracted\":false,\"incompatibleGPUs\":[{\"ids\":[0],\"gpuType\":\"nvidia-a100\",\"reason\":\"ArchMismatch\",\"message\":\"$ARCH_MSG\"}],\"lastUpdated\":\"$T\"},
 \"matmul\":{\"digest\":\"$D2\",\"verified\":false,\"extracted\":false,\"incompatibleGPUs\":[{\"ids\":[0],\"gpuType\":\"nvidia-a100\",\"reason\":\"ArchMismatch\",\"message\":\"$ARCH_MSG\"}],\"error\":\"NoSignature: no signature found for $D2\",\"lastUpdated\":\"$T\"}}"
report node-c "$H200OLD" "{
 \"vector-add\":{\"digest\":\"$DIGEST\",\"verified\":true,\"extracted\":false,\"compatibleGPUs\":[{\"ids\":[0],\"gpuType\":\"nvidia-h200\"}],\"error\":\"ExtractFailed: extracting $DIGEST: no space left on device (/var/lib/tkm)\",\"lastUpdated\":\"$T\"},
 \"matmul\":{\"digest\":\"$D2\",\"verified\":true,\"extracted\":false,\"compatibleGPUs\":[{\"ids\":[0],\"gpuType\":\"nvidia-h200\"}],\"lastUpdated\":\"$T\"},
 \"softmax\":{\"digest\":\"$D3\",\"verified\":true,\"extracted\":true,\"compatibleGPUs\":[{\"ids\":[0],\"gpuType\":\"nvidia-h200\"}],\"lastUpdated\":\"$T\"}}"

step "small: status, through the real kubectl"
golden status-small kubectl tkm status -n "$NS" --kind tkc
# the registry's port may have 4 or 5 digits: squeeze the padding of the wide table
wide() { kubectl tkm status -n "$NS" --kind tkc -o wide --width 0 | tr -s ' '; }
golden status-small-wide wide
golden status-small-by-gpu kubectl tkm status -n "$NS" --kind tkc --by gpu-type
OUT=$(kubectl tkm status -n "$NS" --kind tkc)
assert_not_contains "$OUT" $'\033' "no colour when piped"
OUT=$(script -qec "kubectl tkm status -n $NS --kind tkc" /dev/null)
assert_contains "$OUT" $'\033[1;32min use (2)' "colour on a terminal"
OUT=$(NO_COLOR=1 script -qec "kubectl tkm status -n $NS --kind tkc" /dev/null)
assert_not_contains "$OUT" $'\033[' "NO_COLOR turns colour off on a terminal"
# the node table is 54 columns wide, the table by GPU type too: at 53 one line per GPU type
OUT=$(kubectl tkm status -n "$NS" --kind tkc --width 54)
assert_contains "$OUT" "node-a       node-b" "54 columns: a column per node"
OUT=$(kubectl tkm status -n "$NS" --kind tkc --width 53)
assert_contains "$OUT" "GPU TYPE   NODES   STATE" "53 columns: one line per cache and GPU type"
OUT=$(COLUMNS=53 kubectl tkm status -n "$NS" --kind tkc)
assert_contains "$OUT" "GPU TYPE   NODES   STATE" "COLUMNS=53 too"
cp "$KUBECONFIG" "$E2E_TMP/kc"
kubectl --kubeconfig "$E2E_TMP/kc" config set-context kt-ctx --cluster=tkm-dev --user=admin --namespace="$NS" >/dev/null
expect_ok "--kubeconfig and --context pick the namespace" kubectl tkm status --kubeconfig "$E2E_TMP/kc" --context kt-ctx --kind tkc -o json
assert_eq "3 3" "$(jq -r '[(.caches | length), (.nodes | length)] | join(" ")' <<<"$OUT")" "3 caches x 3 nodes from the context's namespace"
expect_ok "status -o json" kubectl tkm status -n "$NS" --kind tkc -o json
assert_eq "inUse incompatible failed" "$(jq -r '[.caches[] | select(.name == "vector-add") | .nodes[].state] | join(" ")' <<<"$OUT")" "vector-add per node"
assert_eq "unverified unverified ready" "$(jq -r '[.caches[] | select(.name == "matmul") | .nodes[].state] | join(" ")' <<<"$OUT")" "matmul per node"
assert_eq "pending absent extracted" "$(jq -r '[.caches[] | select(.name == "softmax") | .nodes[].state] | join(" ")' <<<"$OUT")" "softmax per node"
assert_eq "2" "$(jq -r '.caches[] | select(.name == "vector-add") | .counts.pods' <<<"$OUT")" "two pods use vector-add"
expect_ok "status -o yaml" kubectl tkm status -n "$NS" --kind tkc -o yaml
assert_contains "$OUT" "kind: CacheStatus" "yaml document"
assert_contains "$OUT" $'  name: vector-add\n  image: "'"$IMAGE"'"' "vector-add's entry (a string that starts like a number is quoted)"
assert_contains "$OUT" $'  nodes:\n  - node: node-a\n    state: inUse\n    pods: 2\n' "its node-a cell, block style"
assert_contains "$OUT" $'verified: "True"' "a string that reads as a bool is quoted"

step "small: -A, and a cluster cache read from the cluster kind"
expect_ok "status -A" kubectl tkm status -A --kind tkc
assert_contains "$OUT" "NAMESPACE" "a NAMESPACE column"
assert_contains "$OUT" "$NS" "the namespace's caches are there"
CC=kt-$NS NODE=kt-$NS-node
e2e_on_exit "kubectl delete tkcc $CC --wait=false >/dev/null 2>&1; kubectl delete tkcnsc $NODE --wait=false >/dev/null 2>&1"
kubectl create -f - >/dev/null <<EOF
{"apiVersion":"tkm.io/v1alpha1","kind":"TritonKernelCacheCluster","metadata":{"name":"$CC"},"spec":{"cacheImage":"$IMAGE"}}
EOF
kubectl patch tkcc "$CC" --subresource=status --type=merge -p "{\"status\":{\"resolvedDigest\":\"$DIGEST\"}}" >/dev/null
cat >"$E2E_TMP/cl.json" <<EOF
{"apiVersion":"tkm.io/v1alpha1","kind":"TritonKernelCacheNodeStatusCluster","metadata":{"name":"$NODE"},
 "status":{"nodeName":"$NODE","gpus":[$H200],"caches":{"$CC":{"digest":"$DIGEST","verified":true,"extracted":false,"compatibleGPUs":[{"ids":[0],"gpuType":"nvidia-h200"}],"lastUpdated":"$T"}},"lastUpdated":"$T"}}
EOF
kubectl apply --server-side --field-manager=tkm-agent -f "$E2E_TMP/cl.json" >/dev/null
kubectl apply --server-side --field-manager=tkm-agent --subresource=status -f "$E2E_TMP/cl.json" >/dev/null
expect_ok "status tkcc/NAME" kubectl tkm status "tkcc/$CC" -o json
assert_eq "TritonKernelCacheCluster ready" "$(jq -r --arg n "$NODE" '.caches[0].kind + " " + (.caches[0].nodes[] | select(.node == $n) | .state)' <<<"$OUT")" "the cluster cache is ready on its node"
expect_ok "why NAME finds the cluster cache" kubectl tkm why "$CC" -n "$NS" --node "$NODE"
assert_contains "$OUT" "from TritonKernelCacheNodeStatusCluster $NODE status.caches[\"$CC\"].digest" "read from the cluster kind"

step "small: kubectl-tkm under valgrind (no leak, no error)"
expect_ok "status -o yaml under valgrind" e2e_valgrind "$PLUGIN_DIR/kubectl-tkm" status -n "$NS" --kind tkc -o yaml
expect_ok "status --by gpu-type under valgrind" e2e_valgrind "$PLUGIN_DIR/kubectl-tkm" status -n "$NS" --kind tkc --by gpu-type -o wide
expect_ok "why under valgrind" e2e_valgrind "$PLUGIN_DIR/kubectl-tkm" why vector-add -n "$NS" --node node-a -o json

step "small: why"
golden why-vector-add-node-a kubectl tkm why vector-add -n "$NS" --node node-a
golden why-vector-add-node-b kubectl tkm why tkc/vector-add -n "$NS" --node node-b
golden why-softmax-node-a kubectl tkm why softmax -n "$NS" --node node-a
golden why-vector-add kubectl tkm why vector-add -n "$NS"
expect_ok "why -o json" kubectl tkm why vector-add -n "$NS" --node node-c -o json
assert_eq "failed" "$(jq -r .nodeState <<<"$OUT")" "node-c failed"
assert_contains "$(jq -r '.nodeSteps[] | select(.step == "error") | .value' <<<"$OUT")" "ExtractFailed" "the error step"

step "check IMAGE: the nodes' GPU facts judged by lib/gpu"
golden check-small kubectl tkm check "$IMAGE" -n "$NS"
expect_ok "check -o json" kubectl tkm check "$IMAGE" -n "$NS" -o json
assert_eq "node-a:true node-b:false node-c:false" "$(jq -r '[.nodes[] | "\(.node):\(.compatible)"] | join(" ")' <<<"$OUT")" "H200 compatible, A100 and old-driver H200 not"
assert_contains "$(jq -r '.nodes[1].gpus[0].reason' <<<"$OUT")" "arch mismatch" "A100: arch mismatch"
assert_contains "$(jq -r '.nodes[2].gpus[0].reason' <<<"$OUT")" "PTX too new" "CUDA 12.4: PTX too new"
expect_ok "check under valgrind" e2e_valgrind "$PLUGIN_DIR/kubectl-tkm" check "$IMAGE" -n "$NS"
kubectl -n "$NS" delete tkcns node-a >/dev/null
expect_fail "check: no compatible node -> exit 1" kubectl tkm check "$IMAGE" -n "$NS"
assert_contains "$OUT" "0 of 2 nodes could use it" "says none"

step "errors"
expect_fail "a cache that does not exist" kubectl tkm status nope -n "$NS"
assert_contains "$OUT" "TritonKernelCache \"nope\" not found in namespace \"$NS\"" "names the cache and the namespace"
kubectl tkm why nope -n "$NS" >/dev/null 2>&1 && fail "why nope succeeded"
assert_eq 1 "$(kubectl tkm why nope -n "$NS" >/dev/null 2>&1; echo $?)" "exit status 1"
expect_fail "why on a node that reports nothing" kubectl tkm why vector-add -n "$NS" --node node-z
assert_contains "$OUT" "node \"node-z\" has no TritonKernelCacheNodeStatus" "names the node"
sed -E 's#server: https://127.0.0.1:[0-9]+#server: https://127.0.0.1:1#' "$KUBECONFIG" >"$E2E_TMP/dead.kubeconfig"
expect_fail "an unreachable apiserver" kubectl-tkm status --kubeconfig "$E2E_TMP/dead.kubeconfig"
assert_contains "$OUT" "cannot reach the apiserver at https://127.0.0.1:1" "names the apiserver"
expect_fail "an unreachable apiserver, under valgrind" e2e_valgrind "$PLUGIN_DIR/kubectl-tkm" why x --kubeconfig "$E2E_TMP/dead.kubeconfig"
expect_fail "a cache that does not exist, under valgrind" e2e_valgrind "$PLUGIN_DIR/kubectl-tkm" why nope -n "$NS"
expect_fail "a bad -o" kubectl tkm status -o xml
assert_contains "$OUT" "-o takes wide, json or yaml, not 'xml'" "names the value"
assert_eq 2 "$(kubectl-tkm status -o xml >/dev/null 2>&1; echo $?)" "usage error: exit 2"
expect_fail "a bad --request-timeout" kubectl tkm status --request-timeout soon
assert_contains "$OUT" "--request-timeout takes a duration" "names the flag"
expect_ok "--request-timeout 20s" kubectl tkm status -n "$NS" --kind tkc --request-timeout 20s

step "1000 nodes: bench_simagents writes their node status objects"
DS=sha256:$(printf 'kubectl-tkm 1000' | sha256sum | cut -d' ' -f1)
expect_ok "setup 1000 nodes" "$SIM" setup --nodes 1000 --ns "$BIG" --kind tkm
expect_ok "write 1000 statuses" "$SIM" write --nodes 1000 --caches 2 --ns "$BIG" --kind tkm --digest "$DS" --incompatible 0.002 --cache-prefix kt-
assert_contains "$OUT" '"writes":1000,"failed":0' "1000 writes"
for c in kt-00000 kt-00001; do
  kubectl -n "$BIG" create -f - >/dev/null <<EOF
{"apiVersion":"tkm.io/v1alpha1","kind":"TritonKernelCache","metadata":{"name":"$c"},"spec":{"cacheImage":"$TKM_REGISTRY/bench/cache:v1"}}
EOF
  kubectl -n "$BIG" patch tkc "$c" --subresource=status --type=merge -p "{\"status\":{\"resolvedDigest\":\"$DS\"}}" >/dev/null
done
kubectl -n "$BIG" patch tkcns sim-00500 --subresource=status --type=merge \
  -p '{"status":{"caches":{"kt-00001":{"extracted":false,"error":"ExtractFailed: no space left on device (/var/lib/tkm)"}}}}' >/dev/null
kubectl -n "$BIG" patch tkcns sim-00042 --subresource=status --type=merge \
  -p "{\"status\":{\"caches\":{\"kt-00000\":{\"pods\":[{\"namespace\":\"$BIG\",\"name\":\"server-0\",\"uid\":\"u\",\"volumeId\":\"v\"}]}}}}" >/dev/null
t0=$SECONDS
golden status-1000 kubectl tkm status -n "$BIG" --kind tkc
pass "1000-node status in $((SECONDS - t0)) s"
golden status-1000-width-40 kubectl tkm status -n "$BIG" --kind tkc --width 40
expect_ok "1000 nodes -o json" kubectl tkm status -n "$BIG" --kind tkc -o json
assert_eq "1000 2" "$(jq -r '[(.nodes | length), (.caches | length)] | join(" ")' <<<"$OUT")" "1000 nodes, 2 caches"
assert_eq "997 1 2 0" "$(jq -r '.caches[0].counts | [.extracted, .inUse, .incompatible, .failed] | join(" ")' <<<"$OUT")" "kt-00000: 997 extracted, 1 in use, 2 incompatible"
assert_eq "997 0 2 1" "$(jq -r '.caches[1].counts | [.extracted, .inUse, .incompatible, .failed] | join(" ")' <<<"$OUT")" "kt-00001: 997 extracted, 2 incompatible, 1 failed"
assert_eq "nvidia-h200:998 amd-mi300x:2" "$(jq -r '[.gpuTypes[] | "\(.gpuType):\(.nodes)"] | join(" ")' <<<"$OUT")" "GPU types"
assert_eq "failed" "$(jq -r '.caches[1].nodes[] | select(.node == "sim-00500") | .state' <<<"$OUT")" "sim-00500 failed"
OUT=$(kubectl tkm status -n "$BIG" --kind tkc --by node --width 0)
OUT=${OUT%%$'\n'*}
assert_eq 1001 "$(wc -w <<<"$OUT" | tr -d ' ')" "--by node: a column per node (CACHE + 1000)"

e2e_done
