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
# What it measures (each run alternates tkm / client-go; the median of RUNS
# is reported):
#   informer  time to sync an informer of OBJECTS TritonKernelCaches (full
#             objects, ~1.5 KiB each) and the process RSS afterwards
#             (client-go: dynamic informer, the way a CRD controller holds them)
#   watch     events/s of a watch from resourceVersion=0: the apiserver sends
#             OBJECTS synthetic ADDED events from its watch cache
#   decode    events/s of framing + decoding a captured watch stream of those
#             objects into an informer store, no network (client-go: the
#             dynamic client's watch decoder into a cache.Store)
# Goal: throughput >= client-go, RSS <= 1/3 of client-go's.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
N=10000 RUNS=3
while getopts "n:r:" o; do
  case $o in
    n) N=$OPTARG ;;
    r) RUNS=$OPTARG ;;
    *) sed -n '2,25p' "$0" >&2; exit 2 ;;
  esac
done
TKM_CLUSTER_DIR=${TKM_CLUSTER_DIR:-$repo/.tkm/cluster}
TKM_BUILD_DIR=${TKM_BUILD_DIR:-$repo/build}
cache=${TKM_CACHE:-$HOME/.cache/tkm}
die() { echo "run-watch: $*" >&2; exit 1; }

[[ -s $TKM_CLUSTER_DIR/env ]] || die "no control plane in $TKM_CLUSTER_DIR (run: hack/cluster.sh up)"
# shellcheck disable=SC1091
source "$TKM_CLUSTER_DIR/env"
ctool=$TKM_BUILD_DIR/bench/bench_watch_informer
[[ -x $ctool ]] || die "missing $ctool (build first: ninja -C $TKM_BUILD_DIR)"
command -v jq >/dev/null || die "jq is needed"

# The client-go program, built once per source version.
key=$(cat "$here/clientgo/go.mod" "$here/clientgo/go.sum" "$here/clientgo/main.go" | sha256sum | cut -c1-12)
gotool=$cache/bin/bench-clientgo-$key/bench-clientgo
if [[ ! -x $gotool ]]; then
  command -v go >/dev/null || die "Go is needed to build the client-go side"
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
for i in $(seq 1 "$RUNS"); do
  echo "run $i/$RUNS..." >&2
  run "$ctool" informer --ns "$ns" --expect "$N"
  run "$gotool" informer -ns "$ns" -expect "$N"
  run "$ctool" watch --ns "$ns" --expect "$N"
  run "$gotool" watch -ns "$ns" -expect "$N"
  run "$ctool" decode --file "$stream" --repeat 3
  run "$gotool" decode -file "$stream" -repeat 3
done
get() { # CLIENT MODE FIELD
  jq -r --arg c "$1" --arg m "$2" "select(.client == \$c and .mode == \$m) | .$3" "$tmp/out" | median
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }

c_sync=$(get tkm informer sync_ms) g_sync=$(get client-go informer sync_ms)
c_rss=$(get tkm informer rss_kb) g_rss=$(get client-go informer rss_kb)
c_store=$(get tkm informer store_bytes) g_heap=$(get client-go informer heap_inuse_kb)
c_w=$(get tkm watch events_per_s) g_w=$(get client-go watch events_per_s)
c_d=$(get tkm decode events_per_s) g_d=$(get client-go decode events_per_s)
c_sync_rate=$(awk -v n="$N" -v ms="$c_sync" 'BEGIN { printf "%.0f", n * 1000 / ms }')
g_sync_rate=$(awk -v n="$N" -v ms="$g_sync" 'BEGIN { printf "%.0f", n * 1000 / ms }')

echo
echo "watch/informer benchmark: $N TritonKernelCaches, median of $RUNS runs, $(nproc) CPUs"
echo "kube-apiserver $(kubectl version -o json 2>/dev/null | jq -r .serverVersion.gitVersion), client-go $(awk '/k8s.io\/client-go/ { print $2 }' "$here/clientgo/go.mod")"
printf '%-34s %14s %14s %10s\n' metric tkm client-go tkm/go
printf '%-34s %14s %14s %10s\n' "informer sync (objects/s)" "$c_sync_rate" "$g_sync_rate" "$(ratio "$c_sync_rate" "$g_sync_rate")"
printf '%-34s %14.0f %14.0f %10s\n' "watch from RV 0 (events/s)" "$c_w" "$g_w" "$(ratio "$c_w" "$g_w")"
printf '%-34s %14.0f %14.0f %10s\n' "decode captured stream (events/s)" "$c_d" "$g_d" "$(ratio "$c_d" "$g_d")"
printf '%-34s %14s %14s %10s\n' "RSS with informer synced (KiB)" "$c_rss" "$g_rss" "$(ratio "$c_rss" "$g_rss")"
printf '%-34s %14s %14s\n' "store bytes / Go heap in use (KiB)" "$((c_store / 1024))" "$g_heap"
ok=1
awk -v a="$c_w" -v b="$g_w" 'BEGIN { exit !(a >= b) }' || ok=0
awk -v a="$c_d" -v b="$g_d" 'BEGIN { exit !(a >= b) }' || ok=0
awk -v a="$c_rss" -v b="$g_rss" 'BEGIN { exit !(a * 3 <= b) }' || ok=0
if ((ok)); then
  echo "goal met: throughput >= client-go and RSS <= 1/3 of client-go's"
else
  echo "goal NOT met: throughput >= client-go and RSS <= 1/3 of client-go's"
  exit 1
fi
