#!/usr/bin/env bash
# agent_gpu_replay: the agent issue's real-GPU run, replayed. bench/gpu/agent-once.sh
# ran `tkm-agent --once -o json --image <layout>` on an NVIDIA H100 (results in
# bench/gpu/results-agent-once/2026-11-23-h100/). Here the same binary runs on a
# node made from what that machine's nvidia-smi reported in the same run (the fake
# NVML answers the CSV/XML values; a sysfs and procfs tree hold the PCI device and
# the driver version), with layouts built here from the same fixtures by tkmctl:
#   - the layouts' digests equal the ones judged on the GPU (the build is reproducible);
#   - every node status printed here equals the one printed on the GPU, field by
#     field, apart from the node name and timestamps: GPU facts, compatible /
#     incompatible verdicts and their reasons, and the exit status;
#   - the recorded facts are the real GPU's: nvidia-smi's name, UUID, CC, memory,
#     bus id, driver and CUDA versions.
# A missing or altered result file fails the test.
source "$(dirname "$0")/lib.sh"

R=$TKM_SOURCE_DIR/bench/gpu/results-agent-once/2026-11-23-h100
AGENT=$TKM_BUILD_DIR/agent/tkm-agent
TKMCTL=$TKM_BUILD_DIR/cli/tkmctl
NVML=$TKM_BUILD_DIR/fakenvml/libnvidia-ml.so.1
for f in "$AGENT" "$TKMCTL" "$NVML"; do [[ -e $f ]] || fail "missing $f (build first)"; done
for f in nvidia-smi-query.csv nvidia-smi.xml once-sm90.json once-inductor.json once-sm90-nonvml.json \
  once-sm90.rc once-inductor.rc once-sm90-nonvml.rc; do
  [[ -s $R/$f ]] || fail "missing result file $R/$f"
done
T=$E2E_TMP

step "a node made of the recorded nvidia-smi answers"
IFS=, read -r idx name uuid driver cc mem bus devid mig < <(sed -n '2p' "$R/nvidia-smi-query.csv" | sed 's/, /,/g')
cuda=$(sed -n 's:.*<cuda_version>\([0-9.]*\)</cuda_version>.*:\1:p' "$R/nvidia-smi.xml" | head -1)
[[ $idx == 0 && -n $name && -n $cuda ]] || fail "cannot read the recorded nvidia-smi output"
mib=${mem% MiB}
cat >"$T/nvml.conf" <<EOF
driver=$driver
cuda=$(( ${cuda%%.*} * 1000 + ${cuda#*.} * 10 ))
[gpu]
name=$name
uuid=$uuid
cc=$cc
mem=$(( mib * 1048576 ))
busid=$bus
pcidevid=${devid,,}
mig=$([[ $mig == Enabled ]] && echo 1 || echo 0)
EOF
short=$(tr 'A-F' 'a-f' <<<"${bus#0000}")
dev=$T/sys/bus/pci/devices/$short
mkdir -p "$dev" "$T/sys/bus/pci/drivers/nvidia" "$T/proc/driver/nvidia"
echo 0x10de >"$dev/vendor"
printf '0x%s\n' "$(tr 'A-F' 'a-f' <<<"${devid:2:4}")" >"$dev/device"
echo 0x030200 >"$dev/class"
ln -s ../../drivers/nvidia "$dev/driver"
echo "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  $driver  Release Build" >"$T/proc/driver/nvidia/version"
pass "node: $name ($uuid), CC $cc, driver $driver, CUDA $cuda"

step "the same layouts"
for c in sm90 inductor; do
  f=$TKM_FIXTURES/triton-cache/triton-3.6.0-cuda-$c.tar.gz
  [[ $c == inductor ]] && f=$TKM_FIXTURES/triton-cache/triton-3.6.0-cuda-sm90-inductor-block.tar.gz
  mkdir -p "$T/cache-$c"
  tar -xzf "$f" -C "$T/cache-$c"
  d=$T/cache-$c
  [[ $(find "$d" -mindepth 1 -maxdepth 1 | wc -l) -eq 1 && -d $(find "$d" -mindepth 1 -maxdepth 1) ]] && d=$(find "$d" -mindepth 1 -maxdepth 1)
  "$TKMCTL" build "$d" --output "$T/layout-$c" --tag "$c" >/dev/null
done

norm() { # JSON: the node status without the node name, timestamps and fallback
  # (fallback, issue 24: how the whenIncompatible policy serves the node, not a verdict of the
  # GPU, came after the GPU runs were recorded; replay() checks it on its own)
  jq -S 'del(.metadata.name, .status.nodeName, .status.lastUpdated) | .status.caches[] |= del(.lastUpdated, .fallback)' "$1"
}
replay() { # CASE LAYOUT [FLAGS...]
  local c=$1 l=$2 rc=0
  shift 2
  TKM_FAKE_NVML=$T/nvml.conf "$AGENT" --once -o json --image "$l" --node-name replay \
    --sysfs-root "$T/sys" --procfs-root "$T/proc" --nvml-lib "$NVML" "$@" >"$T/once-$c.json" 2>"$T/once-$c.stderr" || rc=$?
  assert_eq "$rc" "$(cat "$R/once-$c.rc")" "$c: the same exit status as on the GPU"
  assert_eq "$(jq -r '.status.caches.image.digest' "$T/once-$c.json")" "$(jq -r '.status.caches.image.digest' "$R/once-$c.json")" "$c: the same image digest"
  assert_eq "$(norm "$T/once-$c.json")" "$(norm "$R/once-$c.json")" "$c: the node status equals the GPU's, field by field"
  # no GPU compatible -> served as an empty volume (the default policy); else no fallback
  local want=null
  [[ $(jq '.status.caches.image.compatibleGPUs | length' "$T/once-$c.json") == 0 ]] && want='"Empty"'
  assert_eq "$want" "$(jq -c '.status.caches.image.fallback' "$T/once-$c.json")" "$c: fallback as the default whenIncompatible (Empty) says"
}
step "replayed verdicts equal the GPU's"
replay sm90 "$T/layout-sm90"
replay inductor "$T/layout-inductor"
replay sm90-nonvml "$T/layout-sm90" --no-nvml

step "the recorded run saw the real GPU"
G=$(jq -c '.status.gpus[0]' "$R/once-sm90.json")
assert_eq "$(jq -r .productName <<<"$G")" "$name" "product name = nvidia-smi's"
assert_eq "$(jq -r .uuid <<<"$G")" "$uuid" "UUID = nvidia-smi's"
assert_eq "$(jq -r .computeCapability <<<"$G")" "$cc" "compute capability = nvidia-smi's"
assert_eq "$(jq -r .memoryBytes <<<"$G")" "$(( mib * 1048576 ))" "memory = nvidia-smi's"
assert_eq "$(jq -r .driverVersion <<<"$G")/$(jq -r .cudaDriverVersion <<<"$G")" "$driver/$cuda" "driver and CUDA versions = nvidia-smi's"
assert_eq "$(jq -r '.status.caches.image.compatibleGPUs[0].gpuType' "$R/once-sm90.json")" "nvidia-h100" "the sm90 fixture is compatible with the H100"
assert_contains "$(jq -r '.status.caches.image.incompatibleGPUs[0].message' "$R/once-sm90-nonvml.json")" "NVML is unavailable" "without NVML the GPU fails closed"
e2e_done
