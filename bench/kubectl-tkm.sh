#!/usr/bin/env bash
# kubectl-tkm.sh [BUILD_DIR] [NODES] [ROUNDS]
# `kubectl-tkm status` on a large cluster: NODES (default 1000) node status objects with
# 2 caches each, written by bench_simagents (998 of 1000 H200, the rest MI300X), on the
# control plane of hack/cluster.sh (started if needed). Prints, per command, the median
# wall time and peak RSS of ROUNDS (default 5) runs, alternated (A B, B A, ...), beside the
# baseline and the ratio. Baseline: `kubectl get tkcns -n NS` (kubectl 1.34 listing the same
# objects, nothing judged: what an admin runs without the plugin). Needs the build's
# kubectl-tkm and bench_simagents; prints the load averages before and after.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build}
nodes=${2:-1000}
rounds=${3:-5}
sim=$build/bench/bench_simagents
kt=$build/kubectl-tkm/kubectl-tkm
for b in "$sim" "$kt"; do
  [[ -x $b ]] || { echo "kubectl-tkm bench: $b missing (ninja -C $build kubectl-tkm bench_simagents)" >&2; exit 1; }
done
export TKM_CLUSTER_DIR=${TKM_CLUSTER_DIR:-$build/e2e-cluster}
"$src/hack/cluster.sh" up >/dev/null
eval "$("$src/hack/cluster.sh" env)"
kubectl apply --server-side --force-conflicts -f "$src/crds/" >/dev/null
ns=bench-kt-$RANDOM
kubectl create namespace "$ns" >/dev/null
cleanup() {
  kubectl -n "$ns" delete tkc,tkcns --all --wait=false >/dev/null 2>&1 || true
  kubectl delete namespace "$ns" --wait=false >/dev/null 2>&1 || true
  kubectl delete nodes -l tkm.io/bench-sim=true --wait=false >/dev/null 2>&1 || true
}
trap cleanup EXIT
d=sha256:$(printf 'bench kubectl-tkm' | sha256sum | cut -d' ' -f1)
"$sim" setup --nodes "$nodes" --ns "$ns" --kind tkm >/dev/null
"$sim" write --nodes "$nodes" --caches 2 --ns "$ns" --kind tkm --digest "$d" --incompatible 0.002 \
  --cache-prefix kt- >/dev/null
for c in kt-00000 kt-00001; do
  echo "{\"apiVersion\":\"tkm.io/v1alpha1\",\"kind\":\"TritonKernelCache\",\"metadata\":{\"name\":\"$c\"},\"spec\":{\"cacheImage\":\"$TKM_REGISTRY/bench/cache:v1\"}}" |
    kubectl -n "$ns" create -f - >/dev/null
  kubectl -n "$ns" patch tkc "$c" --subresource=status --type=merge -p "{\"status\":{\"resolvedDigest\":\"$d\"}}" >/dev/null
done
bytes=$(kubectl -n "$ns" get tkcns -o json | wc -c)
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg); $nodes node status objects, $bytes bytes as JSON"

# run NAME CMD...: appends "wall_s rss_kb" to $work/NAME
work=$(mktemp -d "${TMPDIR:-/tmp}/tkm-bench-kt-XXXXXX")
trap 'cleanup; rm -rf "$work"' EXIT
run() {
  local name=$1
  shift
  /usr/bin/time -f "%e %M" -o "$work/t" "$@" >/dev/null
  cat "$work/t" >>"$work/$name"
}
for ((i = 0; i < rounds; i++)); do
  if ((i % 2 == 0)); then
    run base kubectl get tkcns -n "$ns"
    run table "$kt" status -n "$ns" --kind tkc
    run json "$kt" status -n "$ns" --kind tkc -o json
  else
    run json "$kt" status -n "$ns" --kind tkc -o json
    run table "$kt" status -n "$ns" --kind tkc
    run base kubectl get tkcns -n "$ns"
  fi
done
median() { sort -n | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
bw=$(cut -d' ' -f1 "$work/base" | median)
br=$(cut -d' ' -f2 "$work/base" | median)
printf '%-44s %10s %10s %12s %12s\n' "command (median of $rounds)" "wall s" "RSS MiB" "wall/base" "RSS/base"
for n in base table json; do
  w=$(cut -d' ' -f1 "$work/$n" | median)
  r=$(cut -d' ' -f2 "$work/$n" | median)
  label=$([[ $n == base ]] && echo "kubectl get tkcns (baseline)" || echo "kubectl-tkm status$([[ $n == json ]] && echo ' -o json')")
  awk -v l="$label" -v w="$w" -v r="$r" -v bw="$bw" -v br="$br" \
    'BEGIN {printf "%-44s %10.2f %10.1f %12.2f %12.2f\n", l, w, r / 1024, w / bw, r / br}'
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
