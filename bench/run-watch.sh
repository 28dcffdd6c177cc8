#!/usr/bin/env bash
# bench/run-watch.sh - libk8sclient's watch and informer against client-go's,
# side by side, against the same kube-apiserver.
#
# Usage: bench/run-watch.sh [-n OBJECTS] [-r RUNS]
#   env: TKM_CLUSTER_DIR (a control plane from hack/cluster.sh up; default
#        <repo>/.tkm/cluster), TKM_BUILD_DIR (default <repo>/build, must hold
#        bench/bench_watch_informer), TKM_CACHE (default ~/.cache/tkm: the
#        client-go program is built once into $TKM_CACHE/bin).
#
# What it measures (each run has both sides, alternating which goes first:
# tkm, client-go, then client-go, tkm, ...; the median of RUNS is reported;
# wall time and CPU seconds (user + sys, getrusage) side by side):
#   informer  time to sync an informer of OBJECTS TritonKernelCaches (full
#             objects, ~1.5 KiB each) and the process RSS afterwards.
#             client-go: a typed SharedIndexInformer over typed Go structs
#             (bench/clientgo/api, DeepCopy by deepcopy-gen), as a Go operator
#             for its own CRD has it; sync detected by its event handler
#             receiving the last object of the initial list (a callback, not a
#             poll). tkm: the informer's on_synced callback, PLUS parsing every
#             object once out of the raw-JSON store with jansson afterwards
#             (what a reconciler pays to read it; reported separately too).
#   watch     events/s of a watch from resourceVersion=0: the apiserver sends
#             OBJECTS synthetic ADDED events from its watch cache
#   decode    events/s of framing + decoding a captured watch stream of those
#             objects into an informer store, no network (client-go: the
#             typed client's watch decoder into a cache.Store)
# Goal: throughput >= client-go, RSS <= 1/3 of client-go's.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
N=10000 RUNS=3
while getopts "n:r:" o; do
  case $o in
    n) N=$OPTARG ;;
    r) RUNS=$OPTARG ;;
    *) sed -n '2,34p' "$0" >&2; exit 2 ;;
  esac
done
TKM_CLUSTER_DIR=${TKM_CLUSTER_DIR:-$repo/.tkm/cluster}
TKM_BUILD_DIR=${TKM_BUILD_DIR:-$repo/build}
cache=${TKM_CACHE:-$HOME/.cache/tkm}
# shellcheck source=hack/lib.sh
source "$repo/hack/lib.sh" # go_ensure
die() { echo "run-watch: $*" >&2; exit 1; } # (after lib.sh, whose die says "error:")

[[ -s $TKM_CLUSTER_DIR/env ]] || die "no control plane in $TKM_CLUSTER_DIR (run: hack/cluster.sh up)"
# shellcheck source=/dev/null # written by hack/cluster.sh up
source "$TKM_CLUSTER_DIR/env"
ctool=$TKM_BUILD_DIR/bench/bench_watch_informer
[[ -x $ctool ]] || die "missing $ctool (build first: ninja -C $TKM_BUILD_DIR)"
command -v jq >/dev/null || die "jq is needed"

# The client-go program, built once per source version.
key=$(cd "$here/clientgo" && find . -name '*.go' -o -name 'go.mod' -o -name 'go.sum' | LC_ALL=C sort |
  xargs cat | sha256sum | cut -c1-12)
gotool=$cache/bin/bench-clientgo-$key/bench-clientgo
if [[ ! -x $gotool ]]; then
  go_ensure || die "no Go to build the client-go side with (hack/deps.sh bootstraps one)"
  echo "building the client-go program ($gotool)..." >&2
  mkdir -p "$(dirname "$gotool")"
  (cd "$here/clientgo" && go build -trimpath -o "$gotool" .) || die "go build failed"
fi

ns=bench-watch
kubectl apply -f "$repo/crds/" >/dev/null
kubectl get ns "$ns" >/dev/null 2>&1 || kubectl create ns "$ns" >/dev/null
have=$(kubectl -n "$ns" get tritonkernelcaches -o name 2>/dev/null | wc -l)
if ((have < N)); then
  echo "creating $((N - have)) TritonKernelCaches in $ns..." >&2
  "$ctool" load --ns "$ns" --count "$N" >/dev/null
fi
have=$(kubectl -n "$ns" get tritonkernelcaches -o name | wc -l)
((have == N)) || die "$ns holds $have TritonKernelCaches, expected $N (delete the namespace and rerun)"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
stream=$tmp/stream.json
kubectl get --raw "/apis/tkm.io/v1alpha1/namespaces/$ns/tritonkernelcaches?watch=1&resourceVersion=0&timeoutSeconds=20" >"$stream"
events=$(grep -c '"type":"ADDED"' "$stream" || true)
((events == N)) || die "captured $events ADDED events, expected $N"

median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
run() { # TOOL-ARGS... -> appends the JSON line to $tmp/out
  "$@" >>"$tmp/out" || die "failed: $*"
}
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for i in $(seq 1 "$RUNS"); do
  echo "run $i/$RUNS..." >&2
  for mode in informer watch decode; do
    if [[ $mode == decode ]]; then
      c=("$ctool" decode --file "$stream" --repeat 3) g=("$gotool" decode -file "$stream" -repeat 3)
    else
      c=("$ctool" "$mode" --ns "$ns" --expect "$N") g=("$gotool" "$mode" -ns "$ns" -expect "$N")
    fi
    if ((i % 2)); then run "${c[@]}"; run "${g[@]}"; else run "${g[@]}"; run "${c[@]}"; fi
  done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
get() { # CLIENT MODE FIELD (a jq expression over the line)
  jq -r --arg c "$1" --arg m "$2" "select(.client == \$c and .mode == \$m) | $3" "$tmp/out" | median
}
div() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }

# tkm's informer time = sync + parsing every object once (per run, then the median).
c_sync=$(get tkm informer '.sync_ms + .parse_ms') g_sync=$(get client-go informer .sync_ms)
c_sync_only=$(get tkm informer .sync_ms) c_parse=$(get tkm informer .parse_ms)
c_scpu=$(get tkm informer '.sync_cpu_s + .parse_cpu_s') g_scpu=$(get client-go informer .sync_cpu_s)
c_pcpu=$(get tkm informer .parse_cpu_s)
c_rss=$(get tkm informer .rss_kb) g_rss=$(get client-go informer .rss_kb)
c_store=$(get tkm informer .store_bytes) g_heap=$(get client-go informer .heap_inuse_kb)
c_w=$(get tkm watch .events_per_s) g_w=$(get client-go watch .events_per_s)
c_wcpu=$(get tkm watch .cpu_s) g_wcpu=$(get client-go watch .cpu_s)
c_d=$(get tkm decode .events_per_s) g_d=$(get client-go decode .events_per_s)
c_dcpu=$(get tkm decode .cpu_s) g_dcpu=$(get client-go decode .cpu_s)
c_sync_rate=$(awk -v n="$N" -v ms="$c_sync" 'BEGIN { printf "%.0f", n * 1000 / ms }')
g_sync_rate=$(awk -v n="$N" -v ms="$g_sync" 'BEGIN { printf "%.0f", n * 1000 / ms }')

echo
echo "watch/informer benchmark: $N TritonKernelCaches, median of $RUNS runs (sides alternated), $(nproc) CPUs"
echo "load average (1/5/15 min) before: $load_before, after: $load_after"
echo "kube-apiserver $(kubectl version -o json 2>/dev/null | jq -r .serverVersion.gitVersion), client-go $(awk '/k8s.io\/client-go/ { print $2 }' "$here/clientgo/go.mod") (typed informer)"
printf '%-46s %12s %12s %8s\n' metric tkm client-go tkm/go
printf '%-46s %12s %12s %8s\n' "informer sync + read all, wall (objects/s)" "$c_sync_rate" "$g_sync_rate" "$(div "$c_sync_rate" "$g_sync_rate")"
printf '%-46s %12.2f %12.2f %8s\n' "  same, CPU user+sys from start (s)" "$c_scpu" "$g_scpu" "$(div "$c_scpu" "$g_scpu")"
printf '%-46s %12s %12s\n' "  tkm: sync / parse all once, wall (ms)" "$c_sync_only / $c_parse" "-"
printf '%-46s %12.2f %12s\n' "  tkm: parse all once, CPU (s)" "$c_pcpu" "-"
printf '%-46s %12.0f %12.0f %8s\n' "watch from RV 0 (events/s)" "$c_w" "$g_w" "$(div "$c_w" "$g_w")"
printf '%-46s %12.2f %12.2f %8s\n' "  CPU user+sys from start (s)" "$c_wcpu" "$g_wcpu" "$(div "$c_wcpu" "$g_wcpu")"
printf '%-46s %12.0f %12.0f %8s\n' "decode captured stream x3 (events/s)" "$c_d" "$g_d" "$(div "$c_d" "$g_d")"
printf '%-46s %12.2f %12.2f %8s\n' "  CPU user+sys (s)" "$c_dcpu" "$g_dcpu" "$(div "$c_dcpu" "$g_dcpu")"
printf '%-46s %12s %12s %8s\n' "RSS with informer synced (KiB)" "$c_rss" "$g_rss" "$(div "$c_rss" "$g_rss")"
printf '%-46s %12s %12s\n' "store bytes / Go heap in use (KiB)" "$((c_store / 1024))" "$g_heap"
# Every run, in order, so that the spread is visible (wall ms; CPU s).
each() { jq -r --arg c "$1" --arg m "$2" "select(.client == \$c and .mode == \$m) | $3" "$tmp/out" | paste -sd' ' -; }
echo "per run, informer wall ms: tkm sync+parse [$(each tkm informer '.sync_ms + .parse_ms')]," \
  "client-go [$(each client-go informer .sync_ms)]"
echo "per run, informer CPU s:   tkm [$(each tkm informer '.sync_cpu_s + .parse_cpu_s')]," \
  "client-go [$(each client-go informer .sync_cpu_s)]"
echo "per run, watch events/s:   tkm [$(each tkm watch '.events_per_s | floor')]," \
  "client-go [$(each client-go watch '.events_per_s | floor')]"
ok=1
awk -v a="$c_sync_rate" -v b="$g_sync_rate" 'BEGIN { exit !(a >= b) }' || ok=0
awk -v a="$c_w" -v b="$g_w" 'BEGIN { exit !(a >= b) }' || ok=0
awk -v a="$c_d" -v b="$g_d" 'BEGIN { exit !(a >= b) }' || ok=0
awk -v a="$c_rss" -v b="$g_rss" 'BEGIN { exit !(a * 3 <= b) }' || ok=0
if ((ok)); then
  echo "goal met: throughput >= client-go and RSS <= 1/3 of client-go's"
else
  echo "goal NOT met: throughput >= client-go and RSS <= 1/3 of client-go's"
  exit 1
fi
