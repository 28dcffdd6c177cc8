#!/usr/bin/env bash
# inductor_agent: tkm-agent (the daemon, real apiserver and registry, the H200 GPU root)
# with a torch.compile image built from the real fixtures (Triton sm90 + the H100
# Inductor cache + MCV's vLLM example):
#   - the node status judges the H200 compatible with the image (both parts: sm90, and
#     the driver's CUDA 13.0 runs torch 2.11.0+cu130);
#   - Materialize pulls and extracts it into the store as triton/ inductor/ vllm/ (the
#     label check reads the Triton part under triton/), and a second cache whose
#     Inductor part was made for sm80 is refused on the H200 with the reason.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/agent.inc"
DESC=$TKM_BUILD_DIR/agent/proto-tkm_agent_proto/agent.desc
CLIENT=$TKM_SOURCE_DIR/tests/e2e/agent_rpc_client.py
[[ -s $DESC ]] || fail "missing $DESC (build first)"
e2e_crds
agent_ns
cd "$E2E_TMP"
BASE=$TKM_REGISTRY/e2e-inductor-agent-$RANDOM
for f in triton-cache/triton-3.6.0-cuda-sm90.tar.gz inductor-cache/torch-2.11.0-cu130-sm90-block.tar.gz \
  vllm-cache/mcv-vllm-example-rocm.tar.gz; do
  [[ -s $TKM_FIXTURES/$f ]] || fail "missing fixture $f"
  tar -xzf "$TKM_FIXTURES/$f" -C "$E2E_TMP"
done
image() { # REPO INDUCTOR_DIR -> digest
  "$TKMCTL" build tcache --inductor-dir "$2" --vllm-dir vllm-cache --push "$1:v1" -o json >"$(basename "$1").json" ||
    fail "tkmctl build --push $1"
  jq -r .pushed "$(basename "$1").json" | sed 's/.*@//'
}
D=$(image "$BASE/blocks" inductor-cache)
cp -r inductor-cache inductor-a100
grep -rl "cc=90" inductor-a100 --include='*.py' | xargs sed -i 's/cc=90/cc=80/'
rm -rf inductor-a100/triton
DA=$(image "$BASE/blocks-a100" inductor-a100)
P="  signaturePolicy: {mode: Disabled}"
kubectl -n "$NS" create configmap tkm-config --from-literal=signatureMode=Disabled >/dev/null
cache_create tkc "$NS" blocks "$BASE/blocks:v1" "$D" "$P"
cache_create tkc "$NS" blocksa100 "$BASE/blocks-a100:v1" "$DA" "$P"
N=e2e-ind-$RANDOM
agent_node "$N"
agent_start ind h200 "$N" "$NS"
S=$E2E_TMP/ind/run/agent.sock

step "judged per GPU, both parts"
wait_jp 90 "the H200 is compatible with the torch.compile image" nvidia-h200 tkcns "$N" "$NS" '{.status.caches.blocks.compatibleGPUs[0].gpuType}'
wait_jp 30 "an Inductor part for sm80: refused" "Inductor part: arch mismatch: Inductor part built for sm80, GPU 0 is sm90" \
  tkcns "$N" "$NS" '{.status.caches.blocksa100.incompatibleGPUs[0].message}'

step "Materialize: one store entry with triton/ inductor/ vllm/"
wait_for 60 "ready" bash -c "printf '%s\n' '{\"m\":\"Status\"}' | /usr/bin/python3 '$CLIENT' '$DESC' '$S' 2>/dev/null | grep -q '\"ready\": true'"
R=$(printf '{"m":"Materialize","ns":"%s","pod":"p1","uid":"0f8e7d6c-1111-4222-8333-000000000001","vol":"v1","attrs":{"cacheName":"blocks"},"timeout":90}\n' "$NS" |
  /usr/bin/python3 "$CLIENT" "$DESC" "$S" 2>&1) || fail "grpcio client: $R"
assert_eq OK "$(jq -r .code <<<"$R")" "Materialize answered OK: $(jq -r .details <<<"$R")"
SP=$(jq -r .resp.store_path <<<"$R")
for d in triton inductor/fxgraph inductor/aotautograd inductor/triton/0 vllm/torch_compile_cache; do
  [[ -d $SP/$d ]] || fail "no $d in the store entry $SP"
done
pass "the store entry holds triton/, inductor/, vllm/"
assert_eq "$(cd tcache && find . -type f | wc -l)" "$(cd "$SP/triton" && find . -type f | wc -l)" "the Triton part whole"
assert_eq "$(cd inductor-cache && find . -type f | wc -l)" "$(cd "$SP/inductor" && find . -type f | wc -l)" "the Inductor part whole"
e2e_done
