#!/usr/bin/env bash
# inductor_parts: a torch.compile cache image end to end, with the real fixtures
# (an Inductor cache made on an H100 with torch 2.11.0+cu130, Triton's sm90
# fixture, upstream MCV's vLLM example) and the real registry:
#   - tkmctl build --inductor-dir --vllm-dir pushes one image whose config carries
#     every part's labels (MCV's cache.vllm.image/* and io.kserve.km/* exactly);
#   - tkmctl inspect shows every part, from the registry (labels only) and from
#     an extracted directory;
#   - tkmctl extract --mount-path lays it out as triton/ inductor/ vllm/ with every
#     part's group files pointing at the mount path;
#   - tkm-agent --once judges the Inductor part per GPU (the recorded H100 node of
#     e2e.agent_gpu_replay): compatible, and an Inductor cache made for another
#     arch is refused with the reason;
#   - bad input: an Inductor dir that is none, a flag contradicting the cache.
source "$(dirname "$0")/lib.sh"

TKMCTL=$TKM_BUILD_DIR/cli/tkmctl
AGENT=$TKM_BUILD_DIR/agent/tkm-agent
NVML=$TKM_BUILD_DIR/fakenvml/libnvidia-ml.so.1
R=$TKM_SOURCE_DIR/bench/gpu/results-agent-once/2026-11-23-h100
for f in "$TKMCTL" "$AGENT" "$NVML" "$R/nvidia-smi-query.csv" "$R/nvidia-smi.xml" \
  "$TKM_FIXTURES/inductor-cache/torch-2.11.0-cu130-sm90-block.tar.gz" \
  "$TKM_FIXTURES/vllm-cache/mcv-vllm-example-rocm.tar.gz"; do
  [[ -e $f ]] || fail "missing $f"
done
T=$E2E_TMP
REF=$TKM_REGISTRY/e2e-inductor-parts-$RANDOM/cache:v1
tar -xzf "$TKM_FIXTURES/triton-cache/triton-3.6.0-cuda-sm90.tar.gz" -C "$T"
tar -xzf "$TKM_FIXTURES/inductor-cache/torch-2.11.0-cu130-sm90-block.tar.gz" -C "$T"
tar -xzf "$TKM_FIXTURES/vllm-cache/mcv-vllm-example-rocm.tar.gz" -C "$T"

step "tkmctl build with all three parts, pushed to the registry"
"$TKMCTL" build "$T/tcache" --inductor-dir "$T/inductor-cache" --vllm-dir "$T/vllm-cache" \
  --vllm-root-env VLLM_CACHE_ROOT=/home/vllm/.cache/vllm --output "$T/img" --push "$REF" -o json >"$T/build.json"
assert_eq "$(jq -r .inductor_entries "$T/build.json")" 3 "3 Inductor entries (2 FX graphs, 1 AOTAutograd)"
assert_eq "$(jq -r .vllm_entries "$T/build.json")" 1 "1 vLLM cache hash dir"

step "inspect from the registry: every part's labels"
"$TKMCTL" inspect "$REF" -o json >"$T/inspect.json"
assert_eq "$(jq -r .entryCount "$T/inspect.json")" 4 "Triton part: 4 kernels"
assert_eq "$(jq -r '.parts.inductor.summary.torch_version' "$T/inspect.json")" "2.11.0+cu130" "Inductor part: torch from the cache"
assert_eq "$(jq -r '.parts.inductor.summary.sources.arch' "$T/inspect.json")" cache "Inductor part: arch read from the cache itself"
assert_eq "$(jq -r '.parts.inductor.summary.targets[0].arch' "$T/inspect.json")" 90 "Inductor part: sm90"
assert_eq "$(jq -r '.parts.vllm.kserve["io.kserve.km/cache-hash"]' "$T/inspect.json")" d4ec7c2a7d "vLLM: KServe cache-hash"
assert_eq "$(jq -r '.parts.vllm.kserve["io.kserve.km/cache-root-env"]' "$T/inspect.json")" VLLM_CACHE_ROOT=/home/vllm/.cache/vllm "vLLM: cache-root-env"
assert_eq "$(jq -r '.parts.vllm.format' "$T/inspect.json")" triton "vLLM: format"
assert_eq "$(jq -c '.parts.vllm.summary' "$T/inspect.json")" '{"targets":[{"backend":"hip","arch":"gfx90a","warp_size":64}]}' "vLLM: MCV's summary"
out=$("$TKMCTL" inspect "$REF")
assert_contains "$out" "Inductor:     3 FX graph + AOTAutograd entries" "text inspect shows the Inductor part"
assert_contains "$out" "vLLM:         1 cache hash dirs (d4ec7c2a7d)" "text inspect shows the vLLM part"

step "extract for pods that see the volume at /cache"
"$TKMCTL" extract "$T/img" --output "$T/store" --mount-path /cache >/dev/null
for d in triton inductor/fxgraph inductor/aotautograd inductor/triton/0 vllm/torch_compile_cache; do
  [[ -d $T/store/$d ]] || fail "no $d in the extracted store"
done
pass "triton/ inductor/ vllm/ laid out"
g=$(find "$T/store/inductor/triton/0" -name '__grp__*.json' -print -quit)
assert_contains "$(cat "$g")" '"/cache/inductor/triton/0/' "Inductor's own Triton groups point at the mount path"
g=$(find "$T/store/vllm" -name '__grp__*.json' -print -quit)
assert_contains "$(cat "$g")" '"/cache/vllm/torch_compile_cache/d4ec7c2a7d/rank_0_0/triton_cache/' "vLLM's Triton groups point at the mount path"
assert_not_contains "$(cat "$T"/store/triton/*/__grp__*.json)" "$T" "no producer path left in the Triton part"
assert_contains "$("$TKMCTL" inspect "$T/store")" "torch 2.11.0+cu130 (cache)" "inspect of the extracted directory shows the parts"

step "tkm-agent --once judges the Inductor part on the recorded H100"
IFS=, read -r _ name uuid driver cc mem bus devid _ < <(sed -n '2p' "$R/nvidia-smi-query.csv" | sed 's/, /,/g')
cuda=$(sed -n 's:.*<cuda_version>\([0-9.]*\)</cuda_version>.*:\1:p' "$R/nvidia-smi.xml" | head -1)
cat >"$T/nvml.conf" <<CONF
driver=$driver
cuda=$(( ${cuda%%.*} * 1000 + ${cuda#*.} * 10 ))
[gpu]
name=$name
uuid=$uuid
cc=$cc
mem=$(( ${mem% MiB} * 1048576 ))
busid=$bus
pcidevid=${devid,,}
mig=0
CONF
short=$(tr 'A-F' 'a-f' <<<"${bus#0000}")
dev=$T/sys/bus/pci/devices/$short
mkdir -p "$dev" "$T/sys/bus/pci/drivers/nvidia" "$T/proc/driver/nvidia"
echo 0x10de >"$dev/vendor"
printf '0x%s\n' "$(tr 'A-F' 'a-f' <<<"${devid:2:4}")" >"$dev/device"
echo 0x030200 >"$dev/class"
ln -s ../../drivers/nvidia "$dev/driver"
echo "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  $driver  Release Build" >"$T/proc/driver/nvidia/version"
once() { # LAYOUT OUT
  local rc=0
  TKM_FAKE_NVML=$T/nvml.conf "$AGENT" --once -o json --image "$1" --node-name replay \
    --sysfs-root "$T/sys" --procfs-root "$T/proc" --nvml-lib "$NVML" >"$2" 2>"$2.stderr" || rc=$?
  echo "$rc"
}
assert_eq "$(once "$T/img" "$T/once-ok.json")" 0 "compatible: exit 0"
assert_eq "$(jq -r '.status.caches.image.compatibleGPUs[0].gpuType' "$T/once-ok.json")" nvidia-h100 "the H100 is compatible with both parts"
assert_eq "$(jq -r '.status.caches.image.incompatibleGPUs | length' "$T/once-ok.json")" 0 "no GPU refused"
# the same Inductor cache as if made on an A100: its code says cc=80
cp -r "$T/inductor-cache" "$T/inductor-a100"
grep -rl "cc=90" "$T/inductor-a100" --include='*.py' | xargs sed -i 's/cc=90/cc=80/'
rm -rf "$T/inductor-a100/triton"
"$TKMCTL" build "$T/tcache" --inductor-dir "$T/inductor-a100" --output "$T/img-a100" >/dev/null
assert_eq "$(once "$T/img-a100" "$T/once-a100.json")" 1 "an Inductor part for sm80: exit 1"
assert_contains "$(jq -r '.status.caches.image.incompatibleGPUs[0].message' "$T/once-a100.json")" \
  "Inductor part: arch mismatch: Inductor part built for sm80, GPU 0 is sm90" "refused with the reason"

step "tkmctl check judges the Inductor part the same way"
rc=0
TKM_FAKE_NVML=$T/nvml.conf "$TKMCTL" check --image-layout "$T/img" --sysfs-root "$T/sys" --procfs-root "$T/proc" \
  --nvml-lib "$NVML" -o json >"$T/check-ok.json" 2>&1 || rc=$?
assert_eq 0 "$rc" "check: compatible, exit 0"
assert_contains "$(jq -r '.results[0].reason' "$T/check-ok.json")" "; Inductor part compatible: Inductor part of torch 2.11.0+cu130 (CUDA 13.0, Triton 3.6.0) for sm90" "check: the reason names both parts"
rc=0
TKM_FAKE_NVML=$T/nvml.conf "$TKMCTL" check --image-layout "$T/img-a100" --sysfs-root "$T/sys" --procfs-root "$T/proc" \
  --nvml-lib "$NVML" >"$T/check-a100.txt" 2>&1 || rc=$?
assert_eq 1 "$rc" "check: an sm80 Inductor part, exit 1"
assert_contains "$(cat "$T/check-a100.txt")" "INCOMPATIBLE Inductor part: arch mismatch: Inductor part built for sm80, GPU 0 is sm90" "check: the reason"

step "bad input: a clear error, nothing written"
expect_fail "an Inductor dir that is none" "$TKMCTL" build "$T/tcache" --inductor-dir "$T/tcache" --output "$T/bad1"
assert_contains "$OUT" "is it a TORCHINDUCTOR_CACHE_DIR" "a Triton cache is not an Inductor cache"
[[ ! -e $T/bad1 ]] || fail "a layout was written for a refused build"
expect_fail "a contradicting flag" "$TKMCTL" build "$T/tcache" --inductor-dir "$T/inductor-cache" --cuda-version 12.4 --output "$T/bad2"
assert_contains "$OUT" "--cuda-version 12.4 contradicts the Inductor cache, which records cuda-version 13.0" "a flag contradicting the cache"
[[ ! -e $T/bad2 ]] || fail "a layout was written for a refused build"
expect_fail "a vLLM dir that is none" "$TKMCTL" build "$T/tcache" --vllm-dir "$T/inductor-cache" --output "$T/bad3"
assert_contains "$OUT" "torch_compile_cache" "a vLLM root without torch_compile_cache/"
e2e_done
