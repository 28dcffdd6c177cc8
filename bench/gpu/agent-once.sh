#!/usr/bin/env bash
# agent-once.sh: tkm-agent --once on a real GPU, for the agent issue: the GPU's
# real facts (NVML) and per-GPU verdicts for the fixture images, as the node
# status the agent would apply. Runs on the device machine (the `run` tool),
# from a bundle made here:
#
#   TKM_BUNDLE_BINS="cli/tkmctl agent/tkm-agent" bench/gpu/bundle.sh build .device/agent-once
#   run: bash bench/gpu/agent-once.sh .device/agent-once.tar.gz   (carry .device/agent-once.tar.gz)
#
# Writes to $OUT (default ./agent-once-out): nvidia-smi.xml / .txt / -query.csv,
# once-<case>.json, once-<case>.rc, once-<case>.stderr, and a summary. Cases:
#   sm90       the sm90 fixture cache, tkmctl build -> OCI layout: compatible (exit 0)
#   inductor   the torch.compile (Inductor) fixture cache: PTX ISA 9.0, needs CUDA 13 (exit 0 on a 13.x driver)
#   sm90-nonvml  the sm90 layout with --no-nvml: the GPU is seen on the PCI bus only, fail closed (exit 1)
set -euo pipefail
bundle=${1:?usage: agent-once.sh BUNDLE.tar.gz}
src=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-$PWD/agent-once-out}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -xzf "$bundle" -C "$work"
b=$work/$(basename "$bundle" .tar.gz)
cp "$b/COMMIT" "$out/COMMIT" 2>/dev/null || true
nvidia-smi -q -x >"$out/nvidia-smi.xml" 2>"$out/nvidia-smi.err" || true
nvidia-smi >"$out/nvidia-smi.txt" 2>>"$out/nvidia-smi.err" || true
nvidia-smi --query-gpu=index,name,uuid,driver_version,compute_cap,memory.total,pci.bus_id,pci.device_id,mig.mode.current \
  --format=csv >"$out/nvidia-smi-query.csv" 2>>"$out/nvidia-smi.err" || true
for c in sm90 inductor; do
  f=$src/tests/fixtures/triton-cache/triton-3.6.0-cuda-$c.tar.gz
  [[ $c == inductor ]] && f=$src/tests/fixtures/triton-cache/triton-3.6.0-cuda-sm90-inductor-block.tar.gz
  mkdir -p "$work/cache-$c"
  tar -xzf "$f" -C "$work/cache-$c"
  d=$work/cache-$c
  # the archive holds the cache dir itself or its parent
  [[ $(find "$d" -mindepth 1 -maxdepth 1 | wc -l) -eq 1 && -d $(find "$d" -mindepth 1 -maxdepth 1) ]] && d=$(find "$d" -mindepth 1 -maxdepth 1)
  "$b/cli/tkmctl" build "$d" --output "$work/layout-$c" --tag "$c" >"$out/build-$c.txt" 2>&1
done
once() { # CASE LAYOUT [FLAGS...]
  local c=$1 l=$2 rc=0
  shift 2
  "$b/agent/tkm-agent" --once -o json --image "$l" --node-name "$(hostname)" "$@" \
    >"$out/once-$c.json" 2>"$out/once-$c.stderr" || rc=$?
  echo "$rc" >"$out/once-$c.rc"
  echo "$c: exit $rc"
}
{
  once sm90 "$work/layout-sm90"
  once inductor "$work/layout-inductor"
  once sm90-nonvml "$work/layout-sm90" --no-nvml
  head -c 3000 "$out/once-sm90.json"
} | tee "$out/summary.txt"
