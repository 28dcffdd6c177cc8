#!/usr/bin/env bash
# variants-proof.sh [--fake] [--n N] [--out DIR] [--pack]
# Issue 24's real-GPU proof (mixed fleets: cache variants, the Empty fallback), one run:
#   1. native: bench/gpu/triton_workload.py with an empty TRITON_CACHE_DIR (a cold run: its
#      4 kernels compiled for this GPU's own target); sm80: the same kernels cross-compiled
#      for sm80 (cross_compile.py --target cuda:80:32 --method compile, i.e.
#      triton.compile(..., target=GPUTarget("cuda", 80, 32))); cuobjdump of every cubin;
#   2. tkmctl build --add-variant of both into one variant index (an OCI layout, tag
#      multi) and of sm80 alone into another (tag only80); tkmctl inspect of both (text
#      and -o json), the index blobs themselves (index-*.json);
#   3. the pick with this machine's real NVML: tkm-agent --once --image LAYOUT -o json
#      (once-*.json/.rc/.stderr) and tkmctl check (check-*.json/.txt) for both images;
#   4. tkmctl extract LAYOUT (the variant for this machine's GPU, auto-picked) into the
#      store; e2e_csi_testagent serves it (cacheName multi), tkm-csi publishes it
#      (NodePublishVolume, mountPath MP, an overlay), bind-mounted at MP, the workload run
#      with TRITON_CACHE_DIR=MP, N fresh pods: Triton's compile listener must report 0
#      misses, the pod's scratch (upper) layer 0 new cubins; one warm-local run beside
#      (TRITON_CACHE_DIR = the native cache itself) for the times;
#   5. the sm80-only image: tkmctl extract has no variant for this GPU (NoVariant, recorded);
#      the stand-in agent answers cacheName only80 with empty = true (--empty
#      only80=NoVariant, the policy Empty's answer), tkm-csi publishes an empty writable
#      volume, the workload runs from it: it must succeed and compile its kernels (> 0
#      misses, cubins in the volume).
# The agent that serves tkm-csi is the stand-in (tests/e2e/progs/csi_testagent.c): the
# real tkm-agent's Materialize needs an apiserver (the declared caches); its choice is
# shown by step 3 on the same machine. Results: runs.tsv (one row per process),
# summary.txt / summary.json (variants_summary.py: verdicts), preflight.txt, and the
# files named above; logs/ holds every process's output, tkm-csi's and the agent's logs.
#
# Binaries: TKM_BUILD_DIR (default: the bundle .device/variants-proof.tar.gz made by
#   TKM_BUNDLE_BINS="cli/tkmctl csi/tkm-csi agent/tkm-agent tests/e2e_csi_testagent
#   tests/e2e_csi_client" bench/gpu/bundle.sh build .device/variants-proof
# if present, else build/). Python: TKM_PYTHON (default python3, else
# /opt/torch/.venv/bin/python) with torch and Triton.
# --fake: the rehearsal without a GPU: bench/gpu/fake_workload.py with the committed
#   caches of the same kernels (tests/fixtures/triton-3.6-sm90-native, -sm80-cross) as
#   its native and cross-compiled kernels, the fake NVML (build/fakenvml) on the H200
#   GPU root (tests/fixtures/gpu/roots/h200) for the agent and check, and tkmctl extract
#   --target cuda/90 (extract probes the real /sys only).
# --pack: everything in OUT/results.tar.gz beside summary.txt, runs.tsv, preflight.txt
#   (the device tool brings back at most 8 files). Needs root (mounts, unshare -m).
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
here=$src/bench/gpu
proof=variants-proof work_name=tkm-variants out=$here/results-variants/local
bins=(cli/tkmctl csi/tkm-csi agent/tkm-agent tests/e2e_csi_testagent tests/e2e_csi_client)
# shellcheck source=bench/gpu/proof-setup.sh
source "$here/proof-setup.sh" "$@"

# ---- the GPU -------------------------------------------------------------------------------
gpu_flags=() extract_flags=()
if [[ $fake == 1 ]]; then
  root=$TKM_FIXTURES/gpu/roots/h200
  export TKM_FAKE_NVML=$root/nvml.conf
  gpu_flags=(--sysfs-root "$root/sys" --procfs-root "$root/proc"
    --nvml-lib "${TKM_FAKE_NVML_LIB:-$src/build/fakenvml/libnvidia-ml.so.1}")
  extract_flags=(--target cuda/90)
  cc=90
fi
{
  echo "date: $(date -u +%FT%TZ)"
  echo "host: $(uname -a)"
  echo "os: $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "cpus: $(nproc)"
  echo "tkm: $(cat "$TKM_BUILD_DIR/../variants-proof/COMMIT" 2>/dev/null || git -C "$src" rev-parse --short HEAD 2>/dev/null || echo '?') $("$tkmctl" --version)"
  echo "python: $py $("$py" --version 2>&1)"
  if [[ $fake == 0 ]]; then
    "$py" -c 'import torch, triton; print("torch:", torch.__version__, "cuda", torch.version.cuda); print("triton:", triton.__version__); print("gpu:", torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))' || true
    nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader 2>&1 | sed 's/^/nvidia-smi: /' || true
    echo "cuobjdump: $(command -v cuobjdump || echo none)"
  else
    echo "workload: FAKE (bench/gpu/fake_workload.py, no GPU; fake NVML on $root)"
  fi
  echo "uid: $(id -u); CapEff: $(awk '/^CapEff/ {print $2}' /proc/self/status)"
  echo "work fs (${TMPDIR:-/tmp}): $(stat -f -c %T "${TMPDIR:-/tmp}")"
} >"$out/preflight.txt" 2>&1
if [[ $fake == 0 ]]; then
  nvidia-smi -q -x >"$work/nvidia-smi.xml" 2>&1 || true
  gzip -c "$work/nvidia-smi.xml" >"$out/nvidia-smi.xml.gz"
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' .')
fi
echo "gpu target: cuda $cc warp 32" >>"$out/preflight.txt"
cat "$out/preflight.txt"

printf 'step\trep\trc\twall_s\thits\tmisses\tnew_files\tnew_cubins\tpublish_ms\n' >"$out/runs.tsv"
listing() { (cd "$1" && find . -type f | sort); }
sums() { (cd "$1" && find . -type f ! -name '__grp__*' -print0 | sort -z | xargs -0 sha256sum); }

# workload NAME CACHE_DIR: one fresh process of the workload with TRITON_CACHE_DIR=CACHE_DIR;
# logs/NAME.log and .json; sets RC WALL HITS MISSES.
workload() {
  local name=$1 cache=$2 t0 cmd=("$py" "$here/triton_workload.py")
  [[ $fake == 1 ]] && cmd=("$py" "$here/fake_workload.py" triton)
  t0=$(date +%s%N)
  RC=0
  env TRITON_CACHE_DIR="$cache" FAKE_SEED="${FAKE_SEED:-}" "${cmd[@]}" --json "$out/logs/$name.json" \
    >"$out/logs/$name.log" 2>&1 || RC=$?
  WALL=$(awk -v n=$(($(date +%s%N) - t0)) 'BEGIN { printf "%.3f", n / 1e9 }')
  read -r HITS MISSES < <("$py" -c 'import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception:
    r = {}
print(r.get("compile_hits", "-"), r.get("compile_misses", "-"))' "$out/logs/$name.json")
}
must() { # WHAT: the last workload exited 0, else stop with its log
  [[ $RC == 0 ]] || { echo "variants-proof: $1 failed (rc $RC):" >&2; tail -20 "$out/logs/$1.log" >&2; exit 1; }
}

# ---- 1. native (cold) and sm80 (cross-compiled) ------------------------------------------------
echo "== 1. the workload for this GPU (cold) and its kernels cross-compiled for sm80"
if [[ $fake == 1 ]]; then
  export FAKE_SEED=$TKM_FIXTURES/triton-3.6-sm90-native/cache
fi
workload native-cold "$work/native"
row native-cold 1 "$RC" "$WALL" "$HITS" "$MISSES" "$(count "$work/native")" "$(count "$work/native" '*.cubin')" -
must native-cold
t0=$(date +%s%N)
rc=0
if [[ $fake == 1 ]]; then
  cp -r "$TKM_FIXTURES/triton-3.6-sm80-cross/cache" "$work/sm80"
  echo '{"fake": "tests/fixtures/triton-3.6-sm80-cross/cache copied"}' >"$out/logs/sm80-cross.json"
else
  TRITON_CACHE_DIR=$work/sm80 "$py" "$here/cross_compile.py" --target cuda:80:32 --method compile \
    --json "$out/logs/sm80-cross.json" >"$out/logs/sm80-cross.log" 2>&1 || rc=$?
fi
row sm80-cross 1 "$rc" "$(awk -v n=$(($(date +%s%N) - t0)) 'BEGIN { printf "%.3f", n / 1e9 }')" - - \
  "$(count "$work/sm80")" "$(count "$work/sm80" '*.cubin')" -
[[ $rc == 0 ]] || { echo "variants-proof: cross-compile failed:" >&2; tail -20 "$out/logs/sm80-cross.log" >&2; exit 1; }
for c in native sm80; do
  for f in "$work/$c"/*/*.cubin; do
    echo "== $c/$(basename "$(dirname "$f")")/$(basename "$f")"
    if command -v cuobjdump >/dev/null; then
      cuobjdump -lelf "$f" 2>&1
      cuobjdump -sass "$f" 2>&1 | grep -m1 -E 'code for sm_' || true
    else
      echo "(no cuobjdump here)"
    fi
  done
done >"$out/elf.txt"
sums "$work/native" >"$out/native.sha256"
sums "$work/sm80" >"$out/sm80.sha256"

# ---- 2. the variant index ---------------------------------------------------------------------
echo "== 2. tkmctl build --add-variant: multi (cuda $cc + sm80) and only80"
"$tkmctl" build "$work/native" --output "$work/img-multi" --tag multi --add-variant -o json >"$out/build-native.json"
"$tkmctl" build "$work/sm80" --output "$work/img-multi" --tag multi --add-variant -o json >"$out/build-sm80.json"
"$tkmctl" build "$work/sm80" --output "$work/img-only80" --tag only80 --add-variant -o json >"$out/build-only80.json"
for t in multi only80; do
  "$tkmctl" inspect --image-layout "$work/img-$t" >"$out/inspect-$t.txt"
  "$tkmctl" inspect --image-layout "$work/img-$t" -o json >"$out/inspect-$t.json"
  d=$("$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))["indexDigest"])' "$out/inspect-$t.json")
  cp "$work/img-$t/blobs/sha256/${d#sha256:}" "$out/index-$t.json"
done
cat "$out/inspect-multi.txt"

# ---- 3. the pick with this machine's GPU --------------------------------------------------------
echo "== 3. tkm-agent --once --image and tkmctl check, per image"
for t in multi only80; do
  rc=0
  "$TKM_BUILD_DIR/agent/tkm-agent" --once -o json --image "$work/img-$t" --node-name variants-proof \
    "${gpu_flags[@]}" >"$out/once-$t.json" 2>"$out/once-$t.stderr" || rc=$?
  echo "$rc" >"$out/once-$t.rc"
  echo "tkm-agent --once --image $t: exit $rc: $(head -c 300 "$out/once-$t.stderr")"
  rc=0
  "$tkmctl" check --image-layout "$work/img-$t" "${gpu_flags[@]}" >"$out/check-$t.txt" 2>&1 || rc=$?
  "$tkmctl" check --image-layout "$work/img-$t" "${gpu_flags[@]}" -o json >"$out/check-$t.json" 2>/dev/null || true
  echo "$rc" >"$out/check-$t.rc"
  cat "$out/check-$t.txt"
done

# ---- 4. the picked variant through the store and tkm-csi: nothing compiles ---------------------
echo "== 4. tkmctl extract (the variant for this GPU) into the store; pods through tkm-csi"
store=$work/store/multi
mkdir -p "$work/store"
"$tkmctl" extract "$work/img-multi" --output "$store" "${extract_flags[@]}" -o json >"$out/extract-multi.json"
rc=0
"$tkmctl" extract "$work/img-only80" --output "$work/store/only80" "${extract_flags[@]}" \
  >"$out/extract-only80.txt" 2>&1 || rc=$?
echo "exit $rc" >>"$out/extract-only80.txt"
sums "$store" >"$out/store-files.sha256"
(cd "$store" && find . -type f -print0 | sort -z | xargs -0 sha256sum) >"$out/store-before.sha256"
CSI_TMP=$work/csi
mkdir -p "$CSI_TMP/run" "$CSI_TMP/pods"
mount -t tmpfs -o mode=0755,size=512m tkm-variants-run "$CSI_TMP/run"
export CSI_TMP CSI_STORE=$store CSI_STATE=$CSI_TMP/run/tkm/caches CSI_SOCK=$CSI_TMP/plugins/csi.sock \
  CSI_AGENT_SOCK=$CSI_TMP/agent/agent.sock CSI_REG_DIR=$CSI_TMP/plugins_registry
csi_agent_start --cache multi --cache only80 --empty only80=NoVariant
csi_driver_start -v info
MP=$work/container/home/ml/.triton/cache
: >"$out/logs/csi-client.log"
pod_up() { # CACHE POD: publish (mountPath MP), bind at MP; sets UPPER, PUB_MS
  local t0 target=$CSI_TMP/pods/$2/volumes/triton-cache/mount
  t0=$(date +%s%N)
  csi publish "vol-$2" "$target" cacheName="$1" mountPath="$MP" "csi.storage.k8s.io/pod.name=$2" \
    >>"$out/logs/csi-client.log"
  mkdir -p "$MP"
  mount --bind "$target" "$MP"
  PUB_MS=$((($(date +%s%N) - t0) / 1000000))
  UPPER=$CSI_STATE/default/$2/vol-$2/upper
}
pod_down() { # POD
  umount "$MP"
  csi unpublish "vol-$1" "$CSI_TMP/pods/$1/volumes/triton-cache/mount" >>"$out/logs/csi-client.log"
}
before=$(listing "$work/native")
workload warm-local-1 "$work/native"
row warm-local 1 "$RC" "$WALL" "$HITS" "$MISSES" "$(comm -13 <(echo "$before") <(listing "$work/native") | wc -l)" \
  "$(comm -13 <(echo "$before") <(listing "$work/native") | grep -c '\.cubin$' || true)" -
must warm-local-1
for i in $(seq "$n"); do
  pod_up multi "pod-multi-$i"
  if [[ $i == 1 ]]; then
    {
      echo "mount_path $MP"
      echo "overlay $(findmnt -n -o SOURCE,FSTYPE,OPTIONS "$MP")"
    } >"$out/meta.txt"
    (cd "$MP" && find . -name '__grp__*.json' | sort | while read -r g; do
      mkdir -p "$out/published-groups/$(dirname "$g")" "$out/store-groups/$(dirname "$g")"
      cp "$g" "$out/published-groups/$g"
      cp "$store/$g" "$out/store-groups/$g"
    done)
  fi
  workload "tkm-multi-$i" "$MP"
  (cd "$UPPER" && find . -type f | sort) >"$out/logs/upper-multi-$i.txt"
  row tkm-mounted "$i" "$RC" "$WALL" "$HITS" "$MISSES" "$(count "$UPPER")" "$(count "$UPPER" '*.cubin')" "$PUB_MS"
  pod_down "pod-multi-$i"
  must "tkm-multi-$i"
done

# ---- 5. no variant fits: the Empty fallback, the workload compiles instead of failing ----------
echo "== 5. the sm80-only image on this GPU: an empty writable volume"
pod_up only80 pod-only80
files_at_start=$(count "$UPPER")
workload tkm-empty "$MP"
(cd "$UPPER" && find . -type f | sort) >"$out/empty-upper.txt"
row tkm-empty 1 "$RC" "$WALL" "$HITS" "$MISSES" "$(count "$UPPER")" "$(count "$UPPER" '*.cubin')" "$PUB_MS"
echo "files in the empty volume at publish: $files_at_start" >>"$out/meta.txt"
pod_down pod-only80
(cd "$store" && find . -type f -print0 | sort -z | xargs -0 sha256sum) >"$out/store-after.sha256"
echo "mounts left: $(csi_mounts | wc -l)" >>"$out/meta.txt"
grep -E 'empty writable|published' "$CSI_TMP/csi.log" >"$out/csi-published.txt" || true
csi_driver_stop
csi_agent_stop

"$py" "$here/variants_summary.py" "$out" >"$out/summary.txt" || true
cat "$out/summary.txt"
"$py" "$here/variants_summary.py" "$out" --check >/dev/null
