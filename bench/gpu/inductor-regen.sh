#!/usr/bin/env bash
# inductor-regen.sh OUT.tar.gz: which Triton kernels torch.compile regenerates
# when only Triton's cache is warm, and whether Inductor's caches survive a move
# (docs/inductor.md). Python only (bench/gpu/inductor_workload.py --events: every
# Triton compile event with what its cache key is made of). Fresh processes:
#   cold      TRITON_CACHE_DIR=A/triton TORCHINDUCTOR_CACHE_DIR=A/inductor, both empty, FX/AOT caches on
#   tonly-1,2 A/triton only, a fresh Inductor dir each, FX/AOT caches off (Triton's cache alone)
#   moved     A renamed to B (nothing rewritten), both caches on: FX graph hits? Triton?
# OUT.tar.gz: runs.tsv, events/<run>.json, logs/<run>.{log,json}, paths.txt.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dest=${1:?usage: inductor-regen.sh OUT.tar.gz}
py=${TKM_PYTHON:-}
if [[ -z $py ]]; then
  for p in python3 /opt/torch/.venv/bin/python; do
    if "$p" -c 'import torch, triton' 2>/dev/null; then py=$p; break; fi
  done
fi
w=$(mktemp -d /tmp/tkm-regen-XXXXXX)
r=$w/out
A=$w/producer/cache
B=$w/elsewhere/moved
mkdir -p "$r/events" "$r/logs" "$A/triton" "$A/inductor"
printf 'run\trc\twall_s\tcompile_hits\tcompile_misses\tfx_hit\tfx_miss\taot_hit\taot_miss\tmissed\n' >"$r/runs.tsv"
run() { # NAME TRITON_DIR INDUCTOR_DIR FXCACHE
  local name=$1 t=$2 i=$3 fx=$4 t0 t1 rc=0
  mkdir -p "$i"
  t0=$(date +%s.%N)
  env TRITON_CACHE_DIR="$t" TORCHINDUCTOR_CACHE_DIR="$i" TORCHINDUCTOR_FX_GRAPH_CACHE="$fx" \
    TORCHINDUCTOR_AUTOGRAD_CACHE="$fx" PYTHONUNBUFFERED=1 \
    "$py" "$here/inductor_workload.py" --json "$r/logs/$name.json" --events "$r/events/$name.json" \
    >"$r/logs/$name.log" 2>&1 || rc=$?
  t1=$(date +%s.%N)
  "$py" - "$r/logs/$name.json" "$name" "$rc" "$t0" "$t1" >>"$r/runs.tsv" <<'PY'
import json, sys
js, name, rc, t0, t1 = sys.argv[1:]
try:
    d = json.load(open(js))
except Exception:
    d = {}
g = lambda k: d.get(k, "-")
print("\t".join(map(str, [name, rc, f"{float(t1) - float(t0):.3f}", g("compile_hits"), g("compile_misses"),
      g("fxgraph_cache_hit"), g("fxgraph_cache_miss"), g("autograd_cache_hit"), g("autograd_cache_miss"),
      ",".join(d.get("missed_names") or []) or "-"])))
PY
  tail -1 "$r/runs.tsv" | cut -c1-200
}
run cold "$A/triton" "$A/inductor" 1
run tonly-1 "$A/triton" "$w/ind-1" 0
run tonly-2 "$A/triton" "$w/ind-2" 0
(cd "$A" && grep -rlF "$A" . | sort) >"$r/paths.txt"
echo "producer $A" >>"$r/runs.tsv.meta"
mkdir -p "$(dirname "$B")"
mv "$A" "$B"
run moved "$B/triton" "$B/inductor" 1
tar -C "$r" -czf "$dest" .
rm -rf "$w"
