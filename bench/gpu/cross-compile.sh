#!/usr/bin/env bash
# cross-compile.sh [--out DIR]: issue 24's cross-compilation proof on one NVIDIA GPU (Python
# only, no tkm binary). Each step a fresh process, each cache dir fresh:
#   native       TRITON_CACHE_DIR=W/native python3 triton_workload.py: the GPU's own target,
#                compiled and run (kernels, launchers, cuda_utils)
#   native-warm  the same again: every kernel a cache hit
#   sm80         cross_compile.py --target cuda:80:32 --method compile: triton.compile(ASTSource,
#                target=GPUTarget("cuda", 80, 32)) of the same launches, nothing run
#   sm80-jit     cross_compile.py --method warmup: the JIT with the driver's target set to sm80
#   own-compile  cross_compile.py --target <this GPU> --method compile
# compare.txt: sm80 == sm80-jit and own-compile == native (kernel directory names, i.e. cache
# keys); elf.txt: cuobjdump -lelf and the ELF e_flags of every cubin; host.txt: the facts of
# Triton's host-code keys (EXT_SUFFIX, platform_key, triton_key, libtriton.so's sha256);
# inductor-system.json: what Inductor's cache keys take from this machine; sources.tar.gz: the
# installed Triton and torch files docs/compatibility.md cites.
# Output (at most 8 files): log.txt, nvidia-smi.xml, results.tar.gz, caches.tar.gz, sources.tar.gz.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/cross-compile}
[[ ${1:-} == --out ]] && out=$2
mkdir -p "$out"
exec > >(tee "$out/log.txt") 2>&1
py=${TKM_PYTHON:-}
if [[ -z $py ]]; then
  for p in python3 /opt/torch/.venv/bin/python; do
    if "$p" -c 'import torch, triton' 2>/dev/null; then py=$p; break; fi
  done
fi
[[ -n $py ]] || { echo "no python with torch and triton"; exit 1; }
w=$(mktemp -d /tmp/tkm-cross-XXXXXX)
res=$w/res
mkdir -p "$res"
step() { # NAME CMD...: runs, logs rc and seconds
  local name=$1 t0 rc
  shift
  echo "+ [$name] $*"
  t0=$(date +%s%N)
  "$@"
  rc=$?
  echo "= [$name] rc $rc, $((($(date +%s%N) - t0) / 1000000)) ms"
  printf '%s\t%s\n' "$name" "$rc" >>"$res/steps.tsv"
}
{
  echo "date: $(date -u +%FT%TZ)"
  echo "uname: $(uname -srm)"
  echo "python: $py ($("$py" -V 2>&1))"
  "$py" -c 'import torch, triton; print("torch:", torch.__version__, "cuda", torch.version.cuda); print("triton:", triton.__version__); print("gpu:", torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))'
  nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader | sed 's/^/nvidia-smi: /'
  echo "cuobjdump: $(command -v cuobjdump) $(cuobjdump --version 2>&1 | tail -1)"
} | tee "$res/preflight.txt"
nvidia-smi -q -x >"$out/nvidia-smi.xml" 2>&1
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' .')

cd "$w" || exit 1
step native env TRITON_CACHE_DIR="$w/native" "$py" "$here/triton_workload.py" --json "$res/native.json"
step native-warm env TRITON_CACHE_DIR="$w/native" "$py" "$here/triton_workload.py" --json "$res/native-warm.json"
step sm80 env TRITON_CACHE_DIR="$w/sm80" "$py" "$here/cross_compile.py" --target cuda:80:32 \
  --method compile --json "$res/sm80.json"
step sm80-jit env TRITON_CACHE_DIR="$w/sm80-jit" "$py" "$here/cross_compile.py" --target cuda:80:32 \
  --method warmup --json "$res/sm80-jit.json"
step own-compile env TRITON_CACHE_DIR="$w/own-compile" "$py" "$here/cross_compile.py" \
  --target "cuda:$cc:32" --method compile --json "$res/own-compile.json"

# Kernel directories (those holding a .cubin) of each cache: equal names = equal cache keys.
"$py" - "$w" >"$res/compare.txt" <<'EOF'
import os, sys
w = sys.argv[1]
def kdirs(c):
    p = os.path.join(w, c)
    if not os.path.isdir(p):
        return set()
    return {d for d in os.listdir(p) if any(f.endswith(".cubin") for f in os.listdir(os.path.join(p, d)))}
for a, b in (("sm80", "sm80-jit"), ("own-compile", "native")):
    x, y = kdirs(a), kdirs(b)
    print(f"{a} vs {b}: {len(x)} and {len(y)} kernel dirs, equal: {x == y and len(x) > 0}")
    for d in sorted(x ^ y):
        print(f"  only in {a if d in x else b}: {d}")
for c in ("native", "sm80", "sm80-jit", "own-compile", "sm80.record"):
    p = os.path.join(w, c)
    if os.path.isdir(p):
        print(f"{c}: " + " ".join(sorted(f for d in os.listdir(p) for f in os.listdir(os.path.join(p, d)))))
EOF
cat "$res/compare.txt"

# Every cubin: cuobjdump's ELF listing, the SASS header, the ELF header's e_flags.
for f in "$w"/native/*/*.cubin "$w"/sm80/*/*.cubin "$w"/sm80-jit/*/*.cubin; do
  echo "== ${f#"$w"/}"
  cuobjdump -lelf "$f" 2>&1
  cuobjdump -sass "$f" 2>&1 | grep -m2 -E 'code for sm_|Function'
  "$py" -c 'import struct,sys; d=open(sys.argv[1],"rb").read(64); print("ELF class %d abi %d e_machine %d e_flags 0x%08x" % (d[4], d[8], struct.unpack_from("<H",d,18)[0], struct.unpack_from("<I",d,48)[0]))' "$f"
done >"$res/elf.txt" 2>&1
cat "$res/elf.txt"

# Host code: how Triton keys and names the launcher / cuda_utils shared objects here.
"$py" - >"$res/host.txt" 2>&1 <<'EOF'
import hashlib, os, platform, sysconfig
import triton
from triton.runtime import build
print("platform.machine:", platform.machine(), "architecture:", platform.architecture())
print("EXT_SUFFIX:", sysconfig.get_config_var("EXT_SUFFIX"))
print("build.platform_key:", build.platform_key() if hasattr(build, "platform_key") else "(absent)")
print("build functions:", sorted(n for n in dir(build) if not n.startswith("__")))
try:
    from triton.runtime.cache import triton_key
except ImportError:
    from triton.compiler.compiler import triton_key
k = triton_key()
print("triton_key:", k[:120], "... (%d chars)" % len(k))
lib = os.path.join(os.path.dirname(triton.__file__), "_C")
for f in sorted(os.listdir(lib)):
    if f.startswith("libtriton") and os.path.isfile(os.path.join(lib, f)):
        print("sha256", f, hashlib.sha256(open(os.path.join(lib, f), "rb").read()).hexdigest())
EOF
cat "$res/host.txt"

# What Inductor's FX graph / AOTAutograd keys take from the machine (torch's own functions).
"$py" - >"$res/inductor-system.json" 2>&1 <<'EOF'
import json, torch
from torch._inductor.codecache import CacheBase
out = {"CacheBase.get_system": CacheBase.get_system()}
try:
    from torch._inductor.runtime.hints import DeviceProperties
    out["DeviceProperties.create(cuda)"] = repr(DeviceProperties.create(torch.device("cuda")))
except Exception as e:
    out["DeviceProperties"] = repr(e)
print(json.dumps(out, indent=1, sort_keys=True, default=str))
EOF
cat "$res/inductor-system.json"

# The installed sources the docs cite (Triton and torch as they are here).
tsp=$("$py" -c 'import os, triton; print(os.path.dirname(os.path.dirname(triton.__file__)))')
psp=$("$py" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
tar czf "$out/sources.tar.gz" --ignore-failed-read \
  -C "$tsp" triton/runtime/build.py triton/runtime/cache.py triton/runtime/jit.py triton/knobs.py \
  triton/compiler/compiler.py triton/backends/nvidia/compiler.py triton/backends/nvidia/driver.py \
  -C "$psp" torch/_inductor/codecache.py torch/_inductor/runtime/autotune_cache.py \
  torch/_inductor/runtime/triton_heuristics.py torch/_inductor/runtime/hints.py \
  torch/_inductor/runtime/cache_dir_utils.py torch/_functorch/_aot_autograd/autograd_cache.py \
  torch/_inductor/async_compile.py 2>&1 | tail -3
tar czf "$out/caches.tar.gz" -C "$w" native sm80 sm80-jit own-compile
tar czf "$out/results.tar.gz" -C "$w" res
ls -la "$out"
