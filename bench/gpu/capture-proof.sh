#!/usr/bin/env bash
# capture-proof.sh [--fake] [--n N] [--out DIR] [--pack]
# Issue 25's real-GPU proof (capture, and what each pod compiled), one run:
#   1. tkmctl capture --output LAYOUT -- inductor_workload.py (torch.compile, FX graph and
#      AOTAutograd caches on): what it captured per part (capture.txt, inspect.txt/json);
#   2. tkmctl extract LAYOUT --mount-path MP into the store; the stand-in agent
#      (tests/e2e/progs/csi_testagent.c) serves it, tkm-csi publishes it (an overlay),
#      bind-mounted at MP; N fresh processes of the same workload with
#      TRITON_CACHE_DIR=MP/triton, TORCHINDUCTOR_CACHE_DIR=MP/inductor: Triton's compile
#      listener must report 0 compiles, torch's counters 0 fxgraph_cache_miss, and the
#      agent's Release line (ReleaseRequest.scratch, tkm-csi's count at unpublish) triton=0;
#   3. one process with --miss (a sequence length the capture did not see): it compiles;
#      the cubins in its scratch (upper) layer are counted before unpublish and must equal
#      the triton= count tkm-csi sends at unpublish.
# Results: runs.tsv (one row per process: Triton compiles, FX misses/hits, cubins in the
# scratch, the count tkm-csi sent), summary.txt (verdicts), preflight.txt, logs/.
# Binaries: TKM_BUILD_DIR (default build/; cli/tkmctl csi/tkm-csi tests/e2e_csi_testagent
#   tests/e2e_csi_client), or the bundle .device/capture-proof.tar.gz (bench/gpu/bundle.sh).
# --fake: the rehearsal without a GPU: bench/gpu/fake_workload.py full with the committed
#   Triton and Inductor fixtures as its kernels and FX graph entries.
# --pack: everything in OUT/results.tar.gz beside summary.txt, runs.tsv, preflight.txt.
# Needs root (mounts, unshare -m).
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
here=$src/bench/gpu
proof=capture-proof work_name=tkm-capture out=$here/results-capture/local
bins=(cli/tkmctl csi/tkm-csi tests/e2e_csi_testagent tests/e2e_csi_client)
# shellcheck source=bench/gpu/proof-setup.sh
source "$here/proof-setup.sh" "$@"
if [[ $fake == 1 ]]; then
  FAKE_SEED=$work/seed-triton FAKE_INDUCTOR_SEED=$work/seed-inductor
  mkdir -p "$FAKE_SEED" "$FAKE_INDUCTOR_SEED"
  tar -xzf "$TKM_FIXTURES/triton-cache/triton-3.6.0-cuda-sm90-inductor-block.tar.gz" -C "$FAKE_SEED" --strip-components=1
  tar -xzf "$TKM_FIXTURES/inductor-cache/torch-2.11.0-cu130-sm90-block.tar.gz" -C "$FAKE_INDUCTOR_SEED" \
    --strip-components=1 --exclude='inductor-cache/triton'
  export FAKE_SEED FAKE_INDUCTOR_SEED
  wl=("$py" "$here/fake_workload.py" full)
else
  wl=("$py" "$here/inductor_workload.py")
fi
{
  echo "date: $(date -u +%FT%TZ)"
  echo "host: $(uname -a)"
  echo "tkm: $(cat "$TKM_BUILD_DIR/COMMIT" 2>/dev/null || git -C "$src" rev-parse --short HEAD 2>/dev/null || echo '?') $("$tkmctl" --version)"
  echo "python: $py $("$py" --version 2>&1)"
  if [[ $fake == 0 ]]; then
    "$py" -c 'import torch, triton; print("torch:", torch.__version__, "cuda", torch.version.cuda); print("triton:", triton.__version__); print("gpu:", torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))' || true
    nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader 2>&1 | sed 's/^/nvidia-smi: /' || true
  else
    echo "workload: FAKE (bench/gpu/fake_workload.py full, no GPU)"
  fi
  echo "work fs (${TMPDIR:-/tmp}): $(stat -f -c %T "${TMPDIR:-/tmp}")"
} >"$out/preflight.txt" 2>&1
cat "$out/preflight.txt"
# The FX graph and AOTAutograd caches on, for every process (capture's too).
export TORCHINDUCTOR_FX_GRAPH_CACHE=1 TORCHINDUCTOR_AUTOGRAD_CACHE=1

printf 'step\trep\trc\twall_s\ttriton_compiles\tfx_miss\tfx_hit\tscratch_cubins\tcsi_count_triton\tcsi_count_fxgraph\n' >"$out/runs.tsv"
jget() { "$py" -c 'import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception:
    r = {}
ic = r.get("inductor_counters") or {}
g = lambda k: r.get(k, ic.get(k, 0 if ic else "-"))
print(r.get("compile_misses", "-"), g("fxgraph_cache_miss"), g("fxgraph_cache_hit"))' "$1"; }

# ---- 1. capture ----------------------------------------------------------------------------
echo "== 1. tkmctl capture --output LAYOUT -- ${wl[*]##*/}"
t0=$(date +%s%N)
rc=0
"$tkmctl" capture --output "$work/img" --tag captured -- "${wl[@]}" --json "$out/logs/capture.json" \
  >"$out/capture.txt" 2>"$out/logs/capture.stderr" || rc=$?
wall=$(awk -v n=$(($(date +%s%N) - t0)) 'BEGIN { printf "%.3f", n / 1e9 }')
read -r c f h < <(jget "$out/logs/capture.json")
row capture 1 "$rc" "$wall" "$c" "$f" "$h" - - -
cat "$out/capture.txt"
[[ $rc == 0 ]] || { echo "capture-proof: capture failed (rc $rc):" >&2; tail -30 "$out/logs/capture.stderr" >&2; exit 1; }
"$tkmctl" inspect --image-layout "$work/img" >"$out/inspect.txt"
"$tkmctl" inspect --image-layout "$work/img" -o json >"$out/inspect.json"

# ---- 2. extract for the mount path; pods through tkm-csi -----------------------------------
echo "== 2. tkmctl extract --mount-path MP into the store; pods through tkm-csi"
MP=$work/container/home/ml/.cache/tkm
store=$work/store/captured
mkdir -p "$work/store"
"$tkmctl" extract "$work/img" --output "$store" --mount-path "$MP" -o json >"$out/extract.json"
(cd "$store" && find . -type f -print0 | sort -z | xargs -0 sha256sum) >"$out/store-before.sha256"
CSI_TMP=$work/csi
mkdir -p "$CSI_TMP/run" "$CSI_TMP/pods"
mount -t tmpfs -o mode=0755,size=1g tkm-capture-run "$CSI_TMP/run"
export CSI_TMP CSI_STORE=$store CSI_STATE=$CSI_TMP/run/tkm/caches CSI_SOCK=$CSI_TMP/plugins/csi.sock \
  CSI_AGENT_SOCK=$CSI_TMP/agent/agent.sock CSI_REG_DIR=$CSI_TMP/plugins_registry
csi_agent_start --cache captured
csi_driver_start -v info
: >"$out/logs/csi-client.log"
pod() { # NAME [--miss]: publish, bind at MP, one process, count the scratch, unpublish; a row
  local name=$1 extra=${2:-} target=$CSI_TMP/pods/$1/volumes/cache/mount upper t0 rc=0 wall c f h cub line
  csi publish "vol-$name" "$target" cacheName=captured mountPath="$MP" "csi.storage.k8s.io/pod.name=$name" \
    >>"$out/logs/csi-client.log"
  mkdir -p "$MP"
  mount --bind "$target" "$MP"
  upper=$CSI_STATE/default/$name/vol-$name/upper
  t0=$(date +%s%N)
  env TRITON_CACHE_DIR="$MP/triton" TORCHINDUCTOR_CACHE_DIR="$MP/inductor" "${wl[@]}" ${extra:+"$extra"} \
    --json "$out/logs/$name.json" >"$out/logs/$name.log" 2>&1 || rc=$?
  wall=$(awk -v n=$(($(date +%s%N) - t0)) 'BEGIN { printf "%.3f", n / 1e9 }')
  read -r c f h < <(jget "$out/logs/$name.json")
  (cd "$upper" && find . -type f | sort) >"$out/logs/upper-$name.txt"
  cub=$(count "$upper" '*.cubin')
  umount "$MP"
  csi unpublish "vol-$name" "$target" >>"$out/logs/csi-client.log"
  # tkm-csi has sent the Release (with its count) before answering the unpublish
  line=$(grep -m1 "^Release vol-$name " "$CSI_TMP/agent.log" || true)
  echo "$line" >>"$out/releases.txt"
  local ct cf
  ct=$(sed -n 's/.* scratch triton=\([0-9]*\) .*/\1/p' <<<"$line")
  cf=$(sed -n 's/.* fxgraph=\([0-9]*\) .*/\1/p' <<<"$line")
  row "$3" "$4" "$rc" "$wall" "$c" "$f" "$h" "$cub" "${ct:--}" "${cf:--}"
  [[ $rc == 0 ]] || { echo "capture-proof: $name failed (rc $rc):" >&2; tail -20 "$out/logs/$name.log" >&2; exit 1; }
}
: >"$out/releases.txt"
for i in $(seq "$n"); do pod "pod-$i" "" tkm-mounted "$i"; done

# ---- 3. a new sequence length ---------------------------------------------------------------
echo "== 3. --miss (a sequence length the capture did not see) through tkm-csi"
pod pod-miss --miss tkm-miss 1
(cd "$store" && find . -type f -print0 | sort -z | xargs -0 sha256sum) >"$out/store-after.sha256"
csi_driver_stop
csi_agent_stop

"$py" "$here/capture_summary.py" "$out" >"$out/summary.txt" || true
cat "$out/summary.txt"
"$py" "$here/capture_summary.py" "$out" --check >/dev/null
