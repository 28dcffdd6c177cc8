#!/usr/bin/env bash
# inductor_agent: tkm-agent (the daemon, real apiserver and registry, the H200 GPU root)
# with a torch.compile image built from the real fixtures (Triton sm90 + the H100
# Inductor cache + MCV's vLLM example):
#   - the node status judges the H200 compatible with the image (both parts: sm90, and
#     the driver's CUDA 13.0 runs torch 2.11.0+cu130);
#   - Materialize pulls and extracts it into the store as triton/ inductor/ vllm/ (the
#     label check reads the Triton part under triton/), and a second cache whose
#     Inductor part was made for sm80 is refused on the H200 with the reason;
#   - an image shaped as upstream MCV makes it from a vLLM cache (no Triton labels) is
#     read through its cache.vllm.image labels and judged (MCV's example is ROCm gfx90a:
#     refused on the H200, with the reason).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/agent.inc"
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
step "an upstream MCV vLLM-only image (no Triton labels): judged by its vLLM summary"
# what MCV's builder makes: one plain tar layer (io.vllm.cache/, io.vllm.manifest/), cache.vllm.image labels
M=$E2E_TMP/mcv
mkdir -p "$M/ctx/io.vllm.manifest" "$M/layout/blobs/sha256"
cp -r vllm-cache "$M/ctx/io.vllm.cache"
echo '{"vllm":[{"vllmHash":"d4ec7c2a7d","cacheFormat":"triton"}]}' >"$M/ctx/io.vllm.manifest/manifest.json"
tar -C "$M/ctx" -cf "$M/layer.tar" io.vllm.cache io.vllm.manifest
blob() { # FILE -> digest hex, stored in the layout
  local h
  h=$(sha256sum "$1" | cut -d' ' -f1)
  cp "$1" "$M/layout/blobs/sha256/$h"
  echo "$h"
}
L=$(blob "$M/layer.tar")
jq -cn --arg d "sha256:$L" '{architecture:"amd64",os:"linux",config:{Labels:{
  "cache.vllm.image/entry-count":"1","cache.vllm.image/cache-size-bytes":"2255554",
  "cache.vllm.image/format":"triton",
  "cache.vllm.image/summary":"{\"targets\":[{\"backend\":\"hip\",\"arch\":\"gfx90a\",\"warp_size\":64}]}"}},
  rootfs:{type:"layers",diff_ids:[$d]}}' >"$M/config.json"
C=$(blob "$M/config.json")
jq -cn --arg c "sha256:$C" --argjson cs "$(stat -c %s "$M/config.json")" --arg l "sha256:$L" \
  --argjson ls "$(stat -c %s "$M/layer.tar")" '{schemaVersion:2,mediaType:"application/vnd.oci.image.manifest.v1+json",
  config:{mediaType:"application/vnd.oci.image.config.v1+json",digest:$c,size:$cs},
  layers:[{mediaType:"application/vnd.oci.image.layer.v1.tar",digest:$l,size:$ls}]}' >"$M/manifest.json"
MD=$(blob "$M/manifest.json")
echo '{"imageLayoutVersion":"1.0.0"}' >"$M/layout/oci-layout"
jq -cn --arg d "sha256:$MD" --argjson s "$(stat -c %s "$M/manifest.json")" '{schemaVersion:2,manifests:[{
  mediaType:"application/vnd.oci.image.manifest.v1+json",digest:$d,size:$s,
  annotations:{"org.opencontainers.image.ref.name":"v1"}}]}' >"$M/layout/index.json"
"$TKMCTL" push "$M/layout" "$BASE/mcv-vllm:v1" -o json >"$M/push.json" 2>"$M/push.err" || fail "tkmctl push: $(cat "$M/push.err")"
DV=$(jq -r .digest "$M/push.json")
assert_contains "$("$TKMCTL" inspect "$BASE/mcv-vllm:v1")" "hip   arch gfx90a" "tkmctl inspect reads MCV's vLLM labels"
cache_create tkc "$NS" mcvvllm "$BASE/mcv-vllm:v1" "$DV" "$P"
t0=$SECONDS
until [[ -n $(jp tkcns "$N" "$NS" '{.status.caches.mcvvllm.incompatibleGPUs[0].message}') ]]; do
  ((SECONDS - t0 < 60)) || fail "the MCV vLLM image was not judged in 60 s"
  sleep 0.5
done
assert_contains "$(jp tkcns "$N" "$NS" '{.status.caches.mcvvllm.incompatibleGPUs[0].message}')" \
  "backend mismatch: cache built for hip" "judged by its vLLM summary (ROCm gfx90a): the H200 refused, with the reason"
e2e_done
