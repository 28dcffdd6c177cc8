#!/usr/bin/env bash
# inductor-explore.sh [--out DIR]: the Inductor issue's exploration on a GPU
# (docs/inductor.md says what it found). Python only, no tkm binary. Each run is a
# fresh process of bench/gpu/inductor_workload.py with its compile events
# (Triton's listener: name, hash, hit, what the key is made of) and torch's
# counters (fxgraph_cache_hit/miss, autograd_cache_hit/miss):
#   full-cold      TRITON_CACHE_DIR=A/triton TORCHINDUCTOR_CACHE_DIR=A/inductor, both empty
#   full-warm-1,2  the same dirs again (Inductor's FX graph + AOTAutograd caches warm)
#   paths          every file under A naming A's absolute path (grep -rlF)
#   full-moved     A renamed to B (A no longer exists): do the caches still hit?
#   tonly-1,2      B/triton only, a fresh Inductor dir, FX/AOT caches off (Triton's cache alone)
#   small-*        the fixture: a one-block model, only TORCHINDUCTOR_CACHE_DIR set (so
#                  Inductor's own triton/ subdir), cold then warm; packed as
#                  inductor-cache-small.tar.gz
# Output: runs.tsv, paths.txt, events/<run>.json, logs/, the fixture, results.tar.gz.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/inductor-explore}
[[ ${1:-} == --out ]] && out=$2
mkdir -p "$out/events" "$out/logs"
py=${TKM_PYTHON:-}
if [[ -z $py ]]; then
  for p in python3 /opt/torch/.venv/bin/python; do
    if "$p" -c 'import torch, triton' 2>/dev/null; then py=$p; break; fi
  done
fi
{
  echo "date: $(date -u +%FT%TZ)"
  "$py" -c 'import torch, triton; print("torch:", torch.__version__, "cuda", torch.version.cuda); print("triton:", triton.__version__); print("gpu:", torch.cuda.get_device_name(0))'
  nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader 2>&1 | sed 's/^/nvidia-smi: /'
  "$py" -c 'import vllm; print("vllm:", vllm.__version__)' 2>&1 | tail -1 | sed 's/^/vllm import: /'
} >"$out/preflight.txt" 2>&1
cat "$out/preflight.txt"
w=$(mktemp -d /tmp/tkm-ind-XXXXXX)
A=$w/producer/cache
B=$w/elsewhere/moved
printf 'run\trc\twall_s\tstartup_s\tcompile_hits\tcompile_misses\tfx_hit\tfx_miss\taot_hit\taot_miss\n' >"$out/runs.tsv"
run() { # NAME TRITON_DIR INDUCTOR_DIR FXCACHE [ARGS...]
  local name=$1 t=$2 i=$3 fx=$4 t0 t1 rc=0
  shift 4
  mkdir -p "$i"
  t0=$(date +%s.%N)
  env ${t:+"TRITON_CACHE_DIR=$t"} TORCHINDUCTOR_CACHE_DIR="$i" TORCHINDUCTOR_FX_GRAPH_CACHE="$fx" \
    TORCHINDUCTOR_AUTOGRAD_CACHE="$fx" PYTHONUNBUFFERED=1 \
    "$py" "$here/inductor_workload.py" --json "$out/logs/$name.json" --events "$out/events/$name.json" "$@" \
    >"$out/logs/$name.log" 2>&1 || rc=$?
  t1=$(date +%s.%N)
  "$py" - "$out/logs/$name.json" "$name" "$rc" "$t0" "$t1" >>"$out/runs.tsv" <<'PY'
import json, sys
js, name, rc, t0, t1 = sys.argv[1:]
try:
    r = json.load(open(js))
except Exception:
    r = {}
g = lambda k: r.get(k, "-")
print("\t".join(map(str, [name, rc, f"{float(t1) - float(t0):.3f}", g("startup_s"), g("compile_hits"),
      g("compile_misses"), g("fxgraph_cache_hit"), g("fxgraph_cache_miss"), g("autograd_cache_hit"),
      g("autograd_cache_miss")])))
PY
  tail -1 "$out/runs.tsv"
}
mkdir -p "$A/triton" "$A/inductor"
run full-cold "$A/triton" "$A/inductor" 1
run full-warm-1 "$A/triton" "$A/inductor" 1
run full-warm-2 "$A/triton" "$A/inductor" 1
(cd "$A" && find . -type f | sort) >"$out/files-A.txt"
(cd "$A" && grep -rlF "$A" . | sort) >"$out/paths.txt"
{ echo "producer path: $A"; echo "files naming it: $(wc -l <"$out/paths.txt") of $(wc -l <"$out/files-A.txt")";
  sed 's/^/  /' "$out/paths.txt" | awk -F/ '{print $NF}' | sed 's/[0-9a-f]\{8,\}/H/g; s/[A-Z2-7]\{52\}/K/g' | sort | uniq -c; } >"$out/paths-summary.txt"
# one example of each kind of file naming the path, with the lines
(cd "$A" && for f in $(head -400 "$out/paths.txt"); do echo "== $f"; grep -aoF -m3 "$A" "$f" | head -3; done) | head -300 >"$out/paths-examples.txt"
# Inductor's cache, its layout (without the triton/ kernels)
(cd "$A/inductor" && find . -maxdepth 3 | sort | head -200) >"$out/inductor-layout.txt"
du -sh "$A/triton" "$A/inductor" >>"$out/paths-summary.txt"
tar -C "$w/producer" -czf "$out/producer-cache.tar.gz" cache
mkdir -p "$(dirname "$B")"
mv "$A" "$B"
run full-moved "$B/triton" "$B/inductor" 1
run full-moved-2 "$B/triton" "$B/inductor" 1
run tonly-1 "$B/triton" "$w/ind-fresh-1" 0
run tonly-2 "$B/triton" "$w/ind-fresh-2" 0
# the fixture: one block, Inductor's dir only (its own triton/ subdir)
S=$w/fixture/inductor-cache
run small-cold "" "$S" 1 --small
run small-warm "" "$S" 1 --small
(cd "$S" && grep -rlF "$S" . | sort) >"$out/small-paths.txt"
tar -C "$w/fixture" --exclude='tmp.pid_*' -czf "$out/inductor-cache-small.tar.gz" inductor-cache
echo "small fixture: $(du -h "$out/inductor-cache-small.tar.gz" | cut -f1), path $S" >>"$out/paths-summary.txt"
mv "$S" "$w/fixture/moved"
run small-moved "" "$w/fixture/moved" 1 --small
cat "$out/runs.tsv" "$out/paths-summary.txt"
tar -C "$out" -czf "$w/results.tar.gz" --exclude producer-cache.tar.gz --exclude inductor-cache-small.tar.gz .
mv "$w/results.tar.gz" "$out/"
rm -rf "$out/events" "$out/logs"
rm -rf "$w"
