#!/usr/bin/env bash
# consumers-proof.sh [--parts "tce ltj"] [--n N] [--deps DIR] [--out DIR] [--pack]
# Issue 28: the two other consumers of a Triton cache, on a real GPU, through tkm's path
# (tkmctl build -> tkmctl extract into a store -> tkm-csi NodePublishVolume with mountPath MP,
# the overlay bind-mounted at MP, as csi-proof.sh does; each tkm run is a fresh pod).
#
# ltj: libtriton_jit (github flagos-ai/libtriton_jit, C++: embeds Python, compiles through its
#   scripts/standalone_compile.py = triton.compile(), takes the kernel from TRITON_CACHE_DIR).
#   Built here from DEPS/libtriton_jit (fmt, nlohmann_json, googletest from DEPS as its
#   FetchContent sources: no network). Programs: the library's tensor-add example test
#   (examples/pointwise/test_add, gtest) and consumers/ltj_add.cpp (the same operator on seeded
#   inputs; prints a checksum of the result). N cold runs (empty cache, the first one's cache is
#   the original), N warm-local, N tkm-mounted (MP differs from where it was compiled). Counted
#   per process: new files and cubins, compile_a_kernel calls and Triton's compile events
#   (hit/miss) through consumers/ltj_site/sitecustomize.py.
# tce: TCE's signed cache manager (kot-begemot-uk/TKDK tce/, DEPS/tce) with the Triton workload
#   of csi-proof.sh (triton_workload.py, 4 kernels). The cold cache is signed by `tkmctl
#   sign-entries`, built and extracted by tkm, mounted at MP by tkm-csi (group files rewritten
#   for MP), and configured as TCE's only signed cache (type "sig", rsa_key = the public key,
#   fallback on, the fallback = an empty TRITON_CACHE_DIR). Runs, each in a fresh pod:
#     tce-epath-unported  enhanced_pathlib as published (expected to fail on Python >= 3.12)
#     tce-as-is           TCE's HierarchicalCacheManager, enhanced_pathlib ported (epath_py312.py)
#     tce-per-key (xN)    the same with its manager list built per key (consumers/tce/tkm_tce_shim.py)
#     tce-flipped         one byte of one signed file flipped in the pod's view: must be refused
#   Counted: Triton's compile events, new cubins (fallback dir + the pod's upper dir), and
#   every group TCE verified (TKM_TCE_EVENTS).
# DEPS (default .gpucarry/deps, never committed; bench/gpu/consumers-carry.sh makes it, and a
# copy of these scripts beside it, run from there as `cd .gpucarry && bash bench/gpu/...`): see
# bench/gpu/README.md. Binaries: TKM_BUILD_DIR, else the bundle csi-proof.tar.gz there
# (bench/gpu/bundle.sh). Needs root, unshare -m and overlay (the device has them). Everything
# goes to --out (default $OUT): runs.tsv, summary.txt, preflight.txt, and per part its files;
# --pack: all of it also in results.tar.gz (the device tool brings back at most 8 files).
set -euo pipefail
orig_args=("$@")
src=$(cd "$(dirname "$0")/../.." && pwd)
here=$src/bench/gpu
parts="tce ltj"
n=3
deps=${TKM_CONSUMERS_DEPS:-$src/.gpucarry/deps}
[[ -d $deps || ! -d $src/deps ]] || deps=$src/deps # run from inside the carried folder itself
out=${OUT:-$here/results-consumers/local}
pack=0
while [[ $# -gt 0 ]]; do
  case $1 in
  --parts) parts=$2; shift ;;
  --n) n=$2; shift ;;
  --deps) deps=$2; shift ;;
  --out) out=$2; shift ;;
  --pack) pack=1 ;;
  *) echo "usage: consumers-proof.sh [--parts \"tce ltj\"] [--n N] [--deps DIR] [--out DIR] [--pack]" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
deps=$(cd "$deps" && pwd)
export TKM_FIXTURES=${TKM_FIXTURES:-$src/tests/fixtures}
# shellcheck source=tests/e2e/csi/env.sh
source "$src/tests/e2e/csi/env.sh"

if [[ -z ${TKM_CSI_UNSHARED:-} ]]; then
  if [[ -z ${TKM_BUILD_DIR:-} ]]; then
    b=$(mktemp -d "${TMPDIR:-/tmp}/tkm-bundle-XXXXXX")
    bundle=${TKM_BUNDLE:-$src/.gpucarry/csi-proof.tar.gz}
    [[ -f $bundle || ! -f $src/csi-proof.tar.gz ]] || bundle=$src/csi-proof.tar.gz
    tar -C "$b" -xzf "$bundle"
    export TKM_BUILD_DIR=$b/csi-proof TKM_PROOF_BUNDLE_TMP=$b
  fi
  if [[ -z ${TKM_PYTHON:-} ]]; then
    for p in python3 /opt/torch/.venv/bin/python; do
      if "$p" -c 'import torch, triton' 2>/dev/null; then export TKM_PYTHON=$p; break; fi
    done
  fi
  [[ -n ${TKM_PYTHON:-} ]] || { echo "consumers-proof: no python with torch and triton (TKM_PYTHON)" >&2; exit 1; }
  {
    echo "date: $(date -u +%FT%TZ)"
    echo "host: $(uname -a)"
    echo "os: $(. /etc/os-release && echo "$PRETTY_NAME")"
    echo "cpus: $(nproc)"
    echo "tkm: $(cat "$TKM_BUILD_DIR/COMMIT" 2>/dev/null || echo '?') $("$TKM_BUILD_DIR/cli/tkmctl" --version)"
    echo "python: $TKM_PYTHON $("$TKM_PYTHON" --version 2>&1) (real: $("$TKM_PYTHON" -c 'import sys; print(sys.executable, sys.base_prefix)'))"
    "$TKM_PYTHON" -c 'import torch, triton; print("torch:", torch.__version__, "cuda", torch.version.cuda); print("triton:", triton.__version__); print("gpu:", torch.cuda.get_device_name(0))' || true
    "$TKM_PYTHON" -c 'import sysconfig as s, os; v=s.get_config_vars(); print("libpython:", os.path.join(v["LIBDIR"], v["LDLIBRARY"]), os.path.exists(os.path.join(v["LIBDIR"], v["LDLIBRARY"]))); print("Python.h:", s.get_paths()["include"], os.path.exists(os.path.join(s.get_paths()["include"], "Python.h")))' || true
    nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader 2>&1 | sed 's/^/nvidia-smi: /' || true
    echo "cmake: $(cmake --version 2>&1 | head -1); ninja: $(ninja --version 2>&1); g++: $(g++ --version 2>&1 | head -1)"
    echo "nvcc: $(nvcc --version 2>&1 | tail -2 | head -1)"
    echo "openssl: $(openssl version 2>&1)"
    for d in libtriton_jit fmt json googletest epath-src; do echo "deps/$d: $(cat "$deps/$d/COMMIT" 2>/dev/null || echo missing)"; done
    echo "deps/tce: $(cat "$deps/tce/SOURCE" 2>/dev/null || echo missing)"
    echo "deps/py: $(cat "$deps/py/Cryptodome.SOURCE" 2>/dev/null || echo missing)"
    echo "uid: $(id -u); overlay in /proc/filesystems: $(grep -c overlay /proc/filesystems || true)"
  } >"$out/preflight.txt" 2>&1
  cat "$out/preflight.txt"
  exec env TKM_CSI_UNSHARED=1 unshare -m --propagation private bash "$0" "${orig_args[@]}"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/tkm-consumers-XXXXXX")
chmod 755 "$work"
CSI_TMP=$work/csi
cleanup() {
  if [[ -n ${CSI_TMP:-} && -d $CSI_TMP ]]; then csi_teardown >/dev/null 2>&1 || true; fi
  local m
  while IFS= read -r m; do
    umount -l "$m" 2>/dev/null || true
  done < <(awk -v w="$work" 'index($2, w) == 1 {print $2}' /proc/self/mounts | sort -r)
  if [[ $pack == 1 ]]; then
    tar -C "$out" --exclude results.tar.gz -czf "$work/results.tar.gz" . 2>/dev/null || true
    find "$out" -mindepth 1 -maxdepth 1 ! -name summary.txt ! -name runs.tsv ! -name preflight.txt \
      ! -name failed.txt -exec rm -rf {} + 2>/dev/null || true
    mv "$work/results.tar.gz" "$out/" 2>/dev/null || true
  fi
  rm -rf "$work" "${TKM_PROOF_BUNDLE_TMP:-}"
}
trap cleanup EXIT
printf 'part\tmode\trep\tprog\trc\twall_s\tnew_files\tnew_cubins\tcompile_calls\thits\tmisses\tverified\trefused\tpublish_ms\tresult\n' >"$out/runs.tsv"
row() { (IFS=$'\t' && echo "$*") >>"$out/runs.tsv"; }
count() { find "$1" -type f ${2:+-name "$2"} 2>/dev/null | wc -l; }
listing() { (cd "$1" && find . -type f | sort); }
store_sum() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 sha256sum); }
new_since() { comm -13 "$1" <(listing "$2"); } # BEFORE_LIST DIR: files added since
# events FILE: "compile_calls hits misses verified refused" from a JSON-lines event log
events() {
  "$TKM_PYTHON" - "$1" <<'EOF'
import json, sys
c = h = m = v = r = 0
try:
    for line in open(sys.argv[1]):
        e = json.loads(line)
        k = e.get("event")
        c += k == "compile_a_kernel"
        h += k == "triton.compile" and e.get("cache_hit") is True
        m += k == "triton.compile" and e.get("cache_hit") is False
        v += k == "verify" and e.get("ok") is True
        r += k == "verify" and e.get("ok") is False
except FileNotFoundError:
    pass
print(c, h, m, v, r)
EOF
}
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", b - a}'; }

# A pod: NodePublishVolume (mountPath MP), the target bind-mounted at MP. Sets POD_UPPER, POD_UP_MS.
MP=$work/container/opt/app/triton-cache
csi_start() { # STORE NAME
  mkdir -p "$CSI_TMP/run" "$CSI_TMP/pods"
  mountpoint -q "$CSI_TMP/run" || mount -t tmpfs -o mode=0755,size=512m tkm-consumers-run "$CSI_TMP/run"
  export CSI_TMP CSI_STORE=$1 CSI_STATE=$CSI_TMP/run/tkm/caches CSI_SOCK=$CSI_TMP/plugins/csi.sock \
    CSI_AGENT_SOCK=$CSI_TMP/agent/agent.sock CSI_REG_DIR=$CSI_TMP/plugins_registry
  csi_agent_start --cache "$2"
  csi_driver_start --log-level warn
}
csi_stop() { # DIR: logs kept there
  cp "$CSI_TMP/csi.log" "$1/tkm-csi.log" 2>/dev/null || true
  cp "$CSI_TMP/agent.log" "$1/agent.log" 2>/dev/null || true
  csi_driver_stop
  csi_agent_stop
  rm -f "$CSI_TMP/csi.log" "$CSI_TMP/agent.log"
}
pod_up() { # VOL POD CACHE [ATTR...]
  local vol=$1 pod=$2 cache=$3 t0
  shift 3
  t0=$(date +%s%N)
  local target=$CSI_TMP/pods/$pod/volumes/cache/mount
  csi publish "$vol" "$target" cacheName="$cache" mountPath="$MP" "csi.storage.k8s.io/pod.name=$pod" "$@" \
    >>"$out/csi-client.log"
  mkdir -p "$MP"
  mount --bind "$target" "$MP"
  POD_UPPER=$CSI_STATE/default/$pod/$vol/upper
  POD_UP_MS=$((($(date +%s%N) - t0) / 1000000))
}
pod_down() { # VOL POD
  umount "$MP"
  csi unpublish "$1" "$CSI_TMP/pods/$2/volumes/cache/mount" >>"$out/csi-client.log"
}
publish_view() { # DIR STORE: the group files the pod saw at MP, beside the store's
  (cd "$MP" && find . -name '__grp__*.json' | while read -r g; do
    mkdir -p "$1/published-groups/$(dirname "$g")" "$1/store-groups/$(dirname "$g")"
    cp "$g" "$1/published-groups/$g"
    cp "$2/$g" "$1/store-groups/$g"
  done)
  echo "mount_path $MP" >"$1/meta.txt"
  echo "overlay $(findmnt -n -o SOURCE,FSTYPE,OPTIONS "$MP")" >>"$1/meta.txt"
}
image_and_store() { # PART ORIG DIR: tkmctl build + extract; sets STORE
  "$TKM_BUILD_DIR/cli/tkmctl" build "$2" --output "$work/oci-$1" --tag "$1" -o json >"$3/build.json"
  STORE=$work/store/$1
  mkdir -p "$work/store"
  "$TKM_BUILD_DIR/cli/tkmctl" extract "$work/oci-$1" --output "$STORE" -o json >"$3/extract.json"
  store_sum "$STORE" >"$3/store-before.sha256"
}

# ---- libtriton_jit ------------------------------------------------------------------------
ltj_part() {
  local d=$out/ltj s=$work/ltj-src b=$work/ltj-build i
  mkdir -p "$d/logs"
  echo "== ltj: build libtriton_jit $(cat "$deps/libtriton_jit/COMMIT") (Triton $("$TKM_PYTHON" -c 'import triton; print(triton.__version__)'))"
  cp -a "$deps/libtriton_jit" "$s"
  # The small program: built beside the example it uses (add_op), nothing of the library changed.
  cp "$here/consumers/ltj_add.cpp" "$s/examples/pointwise/tkm_ltj_add.cpp"
  printf '%s\n' 'add_executable(tkm_ltj_add tkm_ltj_add.cpp)' \
    'target_link_libraries(tkm_ltj_add PRIVATE add_op TritonJIT::triton_jit Torch::Torch)' \
    >>"$s/examples/pointwise/CMakeLists.txt"
  local site home t0
  site=$("$TKM_PYTHON" -c 'import site; print(site.getsitepackages()[0])')
  # The embedded interpreter finds its standard library from PYTHONHOME (the environment's base
  # prefix) and torch/Triton from $site (sitecustomize adds it).
  home=$("$TKM_PYTHON" -c 'import sys; print(sys.base_prefix)')
  t0=$(now)
  if ! VIRTUAL_ENV=$("$TKM_PYTHON" -c 'import sys; print(sys.prefix)') cmake -S "$s" -B "$b" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v "$TKM_PYTHON")" \
    -DCMAKE_POLICY_VERSION_MINIMUM=3.5 -DFETCHCONTENT_FULLY_DISCONNECTED=ON \
    -DFETCHCONTENT_SOURCE_DIR_JSON="$deps/json" -DFETCHCONTENT_SOURCE_DIR_FMT="$deps/fmt" \
    -DFETCHCONTENT_SOURCE_DIR_GOOGLETEST="$deps/googletest" >"$d/logs/cmake-configure.log" 2>&1; then
    tail -40 "$d/logs/cmake-configure.log" | tee "$d/build-failed.txt" >&2
    return 1
  fi
  # First as published. On CUDA >= 13 it does not compile: cuda.h's cuCtxCreate became
  # cuCtxCreate_v4(CUcontext *, CUctxCreateParams *, flags, dev), and cuda_backend.h calls the
  # 3-argument form (build-as-published.txt keeps the compiler's words). Then ported: the same
  # call with no create parameters on CUDA >= 13 (cuda13-port.diff), nothing else changed.
  local f=include/triton_jit/backends/cuda_backend.h
  if cmake --build "$b" --target test_add tkm_ltj_add -j "$(nproc)" >"$d/logs/cmake-build-as-published.log" 2>&1; then
    echo "as published: built" >"$d/build-as-published.txt"
  else
    grep -m3 -B2 -A8 'error' "$d/logs/cmake-build-as-published.log" >"$d/build-as-published.txt" || true
    cp "$s/$f" "$work/cuda_backend.h.orig"
    perl -0pi -e 's/( +)checkCudaErrors\(cuCtxCreate\(&ctx, 0, device\)\);\n/#if CUDA_VERSION >= 13000\n$1checkCudaErrors(cuCtxCreate(&ctx, nullptr, 0, device));\n#else\n$1checkCudaErrors(cuCtxCreate(&ctx, 0, device));\n#endif\n/' "$s/$f"
    diff -u --label "a/$f" --label "b/$f" "$work/cuda_backend.h.orig" "$s/$f" >"$d/cuda13-port.diff" || true
    grep -q 'CUDA_VERSION >= 13000' "$s/$f" || { echo "ltj: the CUDA 13 port did not apply" >&2; return 1; }
    if ! cmake --build "$b" --target test_add tkm_ltj_add -j "$(nproc)" >"$d/logs/cmake-build.log" 2>&1; then
      grep -m20 -B2 -A8 'error' "$d/logs/cmake-build.log" | tee "$d/build-failed.txt" >&2
      return 1
    fi
  fi
  echo "build_s $(secs "$t0" "$(now)")" >"$d/build.txt"
  local bin=$b/examples/pointwise
  # run_ltj MODE REP PROG CACHE_DIR COUNT_DIR: one process; a row (new files counted in COUNT_DIR)
  run_ltj() {
    local mode=$1 rep=$2 prog=$3 cache=$4 cdir=$5 log=$d/logs/$1-$2-$3 rc=0 t0 t1 before=$work/before.list
    listing "$cdir" >"$before"
    t0=$(now)
    (cd "$bin" && env TRITON_CACHE_DIR="$cache" PYTHONHOME="$home" PYTHONPATH="$here/consumers/ltj_site:$site" \
      TKM_LTJ_SITE="$site" TKM_LTJ_EVENTS="$log.events" "./$prog" >"$log.log" 2>&1) || rc=$?
    t1=$(now)
    new_since "$before" "$cdir" >"$log.new"
    local result=- c h m v r
    [[ $prog == tkm_ltj_add ]] && result=$(grep -o '"fnv1a": "[0-9a-f]*"' "$log.log" | cut -d'"' -f4 || true)
    [[ $prog == test_add ]] && result=$(grep -o '\[  PASSED  \] [0-9]* tests\?' "$log.log" | tr -d '[]' | xargs || true)
    read -r c h m v r < <(events "$log.events")
    row ltj "$mode" "$rep" "$prog" "$rc" "$(secs "$t0" "$t1")" "$(wc -l <"$log.new")" \
      "$(grep -c '\.cubin$' "$log.new" || true)" "$c" "$h" "$m" - - "${POD_UP_MS:--}" "${result:--}"
    [[ $rc == 0 ]] || { echo "ltj: $mode $rep $prog failed (rc $rc):" >&2; tail -30 "$log.log" >&2; return 1; }
  }
  echo "== ltj: $n cold runs (empty TRITON_CACHE_DIR, each program its own)"
  for i in $(seq "$n"); do
    mkdir -p "$work/ltj-cold-$i" "$work/ltj-cold-$i-add"
    POD_UP_MS=- run_ltj cold "$i" test_add "$work/ltj-cold-$i" "$work/ltj-cold-$i"
    POD_UP_MS=- run_ltj cold "$i" tkm_ltj_add "$work/ltj-cold-$i-add" "$work/ltj-cold-$i-add"
  done
  local orig=$work/ltj-cold-1
  (cd "$orig" && find . -type f | sort) >"$d/original-files.txt"
  echo "== ltj: tkmctl build + extract"
  image_and_store ltj "$orig" "$d"
  csi_start "$STORE" ltj
  echo "== ltj: $n rounds of warm-local and tkm-mounted (a fresh pod each)"
  for i in $(seq "$n"); do
    POD_UP_MS=- run_ltj warm-local "$i" test_add "$orig" "$orig"
    POD_UP_MS=- run_ltj warm-local "$i" tkm_ltj_add "$orig" "$orig"
    pod_up "vol-ltj-$i" "pod-ltj-$i" ltj
    [[ $i == 1 ]] && publish_view "$d" "$STORE"
    run_ltj tkm-mounted "$i" test_add "$MP" "$POD_UPPER"
    run_ltj tkm-mounted "$i" tkm_ltj_add "$MP" "$POD_UPPER"
    (cd "$POD_UPPER" && find . -type f | sort) >"$d/logs/upper-tkm-$i.txt"
    pod_down "vol-ltj-$i" "pod-ltj-$i"
  done
  store_sum "$STORE" >"$d/store-after.sha256"
  echo "mounts left: $(csi_mounts | wc -l)" >>"$d/meta.txt"
  csi_stop "$d/logs"
}

# ---- TCE ----------------------------------------------------------------------------------
tce_part() {
  local d=$out/tce i
  mkdir -p "$d/logs"
  # Python paths: pycryptodome (Debian's, Cryptodome namespace), TCE, the shim + the
  # requests_openapi stand-in, and enhanced_pathlib as published or ported.
  local ep_pub=$deps/epath-src ep_port=$work/epath-py312 tcepath
  "$TKM_PYTHON" "$here/consumers/tce/epath_py312.py" "$deps/epath-src/enhanced_pathlib/__init__.py" \
    "$ep_port/enhanced_pathlib/__init__.py" >"$d/epath-py312.diff"
  tcepath="$deps/py:$deps/tce:$here/consumers/tce"
  "$TKM_PYTHON" -c 'import sys; sys.path[:0] = sys.argv[1].split(":"); from Cryptodome.PublicKey import RSA; from Cryptodome.Signature import pkcs1_15; from Cryptodome.Hash import SHA384; import Cryptodome; print("Cryptodome", Cryptodome.__version__, "imports; its native SHA-384 module runs:", SHA384.new(b"tkm").hexdigest()[:16])' \
    "$tcepath" >"$d/pycryptodome.txt" 2>&1 || true
  echo "== tce: cold run (plain Triton, empty TRITON_CACHE_DIR)"
  local orig=$work/tce-cold rc=0 t0 t1
  mkdir -p "$orig"
  t0=$(now)
  TRITON_CACHE_DIR=$orig "$TKM_PYTHON" "$here/triton_workload.py" --json "$d/logs/cold.json" >"$d/logs/cold.log" 2>&1 || rc=$?
  t1=$(now)
  local h m
  read -r h m < <("$TKM_PYTHON" -c 'import json, sys; r = json.load(open(sys.argv[1])); print(r["compile_hits"], r["compile_misses"])' "$d/logs/cold.json" || echo "- -")
  row tce cold 1 triton_workload "$rc" "$(secs "$t0" "$t1")" "$(count "$orig")" "$(count "$orig" '*.cubin')" - "$h" "$m" - - - -
  [[ $rc == 0 ]] || { tail -30 "$d/logs/cold.log" >&2; return 1; }
  echo "== tce: tkmctl sign-entries, build, extract"
  openssl genrsa -out "$work/tce.key" 3072 2>/dev/null
  openssl rsa -in "$work/tce.key" -pubout -out "$work/tce.pub" 2>/dev/null
  cp "$work/tce.pub" "$d/tce.pub"
  "$TKM_BUILD_DIR/cli/tkmctl" sign-entries --key "$work/tce.key" "$orig" >"$d/sign-entries.log" 2>&1
  "$TKM_BUILD_DIR/cli/tkmctl" verify-entries --key "$work/tce.pub" "$orig" >"$d/verify-entries.log" 2>&1
  image_and_store tce "$orig" "$d"
  csi_start "$STORE" tce
  cat >"$work/tce.json" <<EOF
{"cache_managers": [{"id": "tkm", "type": "sig", "cache_dir": "$MP", "rsa_key": "$work/tce.pub"}],
 "fallback": true, "debug": true}
EOF
  cp "$work/tce.json" "$d/tce-config.json"
  # run_tce MODE REP CLASS EPATH [EXPECT]: a fresh pod, TCE on, fallback = an empty dir
  run_tce() {
    local mode=$1 rep=$2 cls=$3 ep=$4 expect=${5:-ok} log=$d/logs/$1-$2 fb=$work/fallback-$1-$2 rc=0 t0 t1
    mkdir -p "$fb"
    pod_up "vol-$mode-$rep" "pod-$mode-$rep" tce
    [[ $mode == tce-as-is ]] && publish_view "$d" "$STORE"
    if [[ $mode == tce-flipped ]]; then # one byte of add_kernel.cubin, in the pod's view only
      FLIPPED=$(cd "$MP" && find . -name add_kernel.cubin | head -1)
      "$TKM_PYTHON" -c 'import sys; f = open(sys.argv[1], "r+b"); f.seek(1000); b = f.read(1); f.seek(1000); f.write(bytes([b[0] ^ 0xFF]))' "$MP/$FLIPPED"
      echo "flipped: byte 1000 of $FLIPPED (in the pod's view; the store keeps its copy)" >"$d/flipped.txt"
      "$TKM_BUILD_DIR/cli/tkmctl" verify-entries --key "$work/tce.pub" "$MP" >>"$d/flipped.txt" 2>&1 || true
    fi
    local before=$work/before.list
    listing "$POD_UPPER" >"$before"
    t0=$(now)
    env TRITON_CACHE_DIR="$fb" TRITON_CACHE_MANAGER="tkm_tce_shim:$cls" TCE_CONFIG="$work/tce.json" \
      TKM_TCE_EVENTS="$log.events" PYTHONPATH="$ep:$tcepath" \
      "$TKM_PYTHON" "$here/triton_workload.py" --json "$log.json" >"$log.log" 2>&1 || rc=$?
    t1=$(now)
    local h=- m=- c v r nf nc
    [[ -f $log.json ]] && read -r h m < <("$TKM_PYTHON" -c 'import json, sys; r = json.load(open(sys.argv[1])); print(r["compile_hits"], r["compile_misses"])' "$log.json")
    read -r c _ _ v r < <(events "$log.events")
    { listing "$fb" | sed 's|^\.|fallback|'; new_since "$before" "$POD_UPPER" | sed 's|^\.|upper|'; } >"$log.new"
    nf=$(wc -l <"$log.new")
    nc=$(grep -c '\.cubin$' "$log.new" || true)
    local result
    result=$(grep -oE '^[A-Za-z]+Error: .*' "$log.log" | tail -1 || true) # the exception it ended with
    row tce "$mode" "$rep" triton_workload "$rc" "$(secs "$t0" "$t1")" "$nf" "$nc" - "$h" "$m" "$v" "$r" "$POD_UP_MS" "${result:-ok}"
    pod_down "vol-$mode-$rep" "pod-$mode-$rep"
    if [[ $expect == ok && $rc != 0 ]]; then echo "tce: $mode $rep failed (rc $rc):" >&2; tail -30 "$log.log" >&2; fi
    return 0
  }
  echo "== tce: TCE with tkm's signed, tkm-mounted cache"
  run_tce tce-epath-unported 1 HierarchicalCacheManager "$ep_pub" fail
  run_tce tce-as-is 1 HierarchicalCacheManager "$ep_port"
  for i in $(seq "$n"); do run_tce tce-per-key "$i" PerKeyHierarchicalCacheManager "$ep_port"; done
  run_tce tce-flipped 1 PerKeyHierarchicalCacheManager "$ep_port" fail
  store_sum "$STORE" >"$d/store-after.sha256"
  echo "mounts left: $(csi_mounts | wc -l)" >>"$d/meta.txt"
  csi_stop "$d/logs"
}

failed=()
for p in $parts; do
  set +e
  (
    set -e
    trap 'csi_driver_stop; csi_agent_stop' EXIT
    "${p}_part"
  )
  rc=$?
  set -e
  if [[ $rc != 0 ]]; then
    failed+=("$p")
    echo "consumers-proof: part $p FAILED (rc $rc)" | tee -a "$out/failed.txt" >&2
  fi
  "$TKM_PYTHON" "$here/consumers/summary.py" "$out" >"$out/summary.txt" || true
done
cat "$out/summary.txt"
[[ ${#failed[@]} == 0 ]]
