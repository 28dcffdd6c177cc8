#!/usr/bin/env bash
# bench/fleet.sh - N real tkm-agent processes as N nodes, all prefetching one cache (issue 26):
# what the registry sees, and how long until every node has extracted it.
#
# Usage: bench/fleet.sh [-n N] [-s SIZE] [-m "MODE..."]
#   -n N     agents (nodes), default 50. Each is a real tkm-agent with its own Node object,
#            store, socket and fake H200 (tests/fixtures/gpu/roots/h200 through the tests' fake
#            NVML), on one private control plane (hack/cluster.sh) with the real tkm-controller.
#   -s SIZE  the cache's size on disk (bench/gen_cache.py from the real sm90 fixture), default 200M
#   -m MODES the runs, in order, default "direct mirror mirror+slots"; each with a cache of its own
#            (a new salt: nothing cached anywhere) and fresh agents with empty stores:
#              direct       the cache image names the upstream registry: every agent pulls there
#              mirror       the image names the upstream; the agents read a hosts.toml directory
#                           (--mirrors-hosts-dir, containerd's format, docs/mirrors.md) naming a
#                           pull-through mirror of it (Debian's docker-registry with
#                           proxy.remoteurl, hack/registry.sh --proxy): layers come through it
#              mirror+slots mirror with staged prefetch: tkm-config prefetchSlots=10 for this run
#                           (tkm-controller grants one node first, then 10 at a time;
#                           docs/prefetch.md)
#              mirror-host  the image names a pull-through mirror of it (Debian's docker-registry
#                           with proxy.remoteurl, hack/registry.sh --proxy): the agents pull from
#                           the mirror as if it were the registry; the mirror from the upstream
#              mirror-host+slots  mirror-host with staged prefetch: tkm-config prefetchSlots=10 for
#                           this run (tkm-controller grants one node first, then 10 at a time;
#                           docs/prefetch.md)
#   env: TKM_BUILD_DIR (default <repo>/build), TKM_AGENT (default $TKM_BUILD_DIR/agent/tkm-agent:
#        another build, e.g. a baseline's, for the direct mode), BENCH_DIR, KEEP=1
#        (bench/lib-daemons.sh)
# Measured per mode, from the upstream registry's own log (hack/registry.sh --access-log), never
# from tkm's: GETs of the cache's layer blob (and, column mirror, the GETs the mirror's own log
# shows), and the peak number of them in flight at once at the upstream (each
# request's interval is its "response completed" time minus its duration); and the time from the
# declaration (kubectl apply of the TritonKernelCache; tkm-controller pins the digest) to the first
# and to the last of the N node statuses reporting the cache extracted. Exits 1 when a run does not
# finish within 20 minutes or an agent dies.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
BENCH_NAME=fleet
N=50 SIZE=200M MODES="direct mirror mirror+slots"
while getopts "n:s:m:" o; do
  case $o in
    n) N=$OPTARG ;;
    s) SIZE=$OPTARG ;;
    m) MODES=$OPTARG ;;
    *) sed -n '2,29p' "$0" >&2; exit 2 ;;
  esac
done
TKM_BUILD_DIR=${TKM_BUILD_DIR:-$repo/build}
# shellcheck source=bench/lib-daemons.sh
source "$here/lib-daemons.sh"
AGENT=${TKM_AGENT:-$TKM_BUILD_DIR/agent/tkm-agent} CTRL=$TKM_BUILD_DIR/controller/tkm-controller
TKMCTL=$TKM_BUILD_DIR/cli/tkmctl FAKE_NVML=$TKM_BUILD_DIR/fakenvml/libnvidia-ml.so.1
ROOT=$repo/tests/fixtures/gpu/roots/h200
for f in "$AGENT" "$CTRL" "$TKMCTL"; do [[ -x $f ]] || bench_die "missing $f (build first: ninja -C $TKM_BUILD_DIR)"; done
[[ -f $FAKE_NVML && -d $ROOT/sys ]] || bench_die "missing $FAKE_NVML or $ROOT"
for t in jq curl python3 docker-registry; do command -v "$t" >/dev/null || bench_die "$t is needed"; done

bench_workdir fleet
bench_cluster_up "$work/cluster"
bench_crds "$repo/crds/"
kubectl create ns tkm-system >/dev/null
kubectl create ns fleet >/dev/null
# prefetch: every agent extracts a usable cache at once, with no pod; the cache switches signature
# checks off for itself (what is measured is the layer's pulls) and the admin allows it
bench_reach_config --from-literal=signatureFloor=Disabled --from-literal=prefetch=true
UP=$("$repo/hack/registry.sh" start "$work/upstream" --access-log)
MIRROR=$("$repo/hack/registry.sh" start "$work/mirror" --proxy "http://$UP" --access-log)
trap '"$repo/hack/registry.sh" stop "$work/upstream"; "$repo/hack/registry.sh" stop "$work/mirror"; bench_workdir_cleanup' EXIT
bench_log "upstream registry $UP, its pull-through mirror $MIRROR"
# the mirror as containerd has it: <dir>/<registry>/hosts.toml (modes mirror, mirror+slots)
mkdir -p "$work/certs.d/$UP"
printf 'server = "http://%s"\n\n[host."http://%s"]\n  capabilities = ["pull"]\n' "$UP" "$MIRROR" >"$work/certs.d/$UP/hosts.toml"
"$CTRL" --kubeconfig "$KUBECONFIG" --namespace tkm-system --state-dir "$work/ctrl-state" \
  --metrics-bind-address 0 --health-probe-bind-address 0 >"$work/controller.log" 2>&1 &
pids+=($!)
{
  echo '{"apiVersion":"v1","kind":"List","items":['
  for ((i = 0; i < N; i++)); do
    printf '%s{"apiVersion":"v1","kind":"Node","metadata":{"name":"fleet-%03d"}}\n' "$( ((i)) && echo ,)" "$i"
  done
  echo ']}'
} | kubectl create -f - >/dev/null

# agents_start: N agents with empty stores; waits until each has read its Node
agent_pids=()
agents_start() {
  local i d
  for ((i = 0; i < N; i++)); do
    d=$work/agents/$i
    rm -rf "$d" && mkdir -p "$d/run" && chmod 0700 "$d/run"
    TKM_FAKE_NVML=$ROOT/nvml.conf "$AGENT" --kubeconfig "$KUBECONFIG" --node-name "$(printf fleet-%03d "$i")" \
      --namespace tkm-system --store-dir "$d/store" --socket "$d/run/agent.sock" --metrics-bind-address 0 \
      --health-probe-bind-address 0 --sysfs-root "$ROOT/sys" --procfs-root "$ROOT/proc" --nvml-lib "$FAKE_NVML" \
      "${mirror_flags[@]}" >"$d/log" 2>&1 &
    agent_pids+=($!)
    pids+=($!)
  done
  local t0=$SECONDS
  until (($(grep -l ' uid ' "$work"/agents/*/log 2>/dev/null | wc -l) == N)); do
    ((SECONDS - t0 < 300)) || bench_die "not every agent read its Node within 300 s"
    sleep 0.5
  done
}
agents_stop() {
  local p
  for p in "${agent_pids[@]}"; do bench_stop "$p"; done
  agent_pids=()
}
# extracted CACHE: how many node statuses report CACHE extracted
extracted() {
  bench_api GET /apis/tkm.io/v1alpha1/namespaces/fleet/tritonkernelcachenodestatuses |
    jq --arg c "$1" '[.items[] | select(.status.caches[$c].extracted == true)] | length'
}
# upstream_gets LAYER: "GETS PEAK GAP" of the layer blob from the upstream's own log
upstream_gets() { python3 "$here/registry_gets.py" "$work/upstream/registry.log" "$1"; }

results=()
for mode in $MODES; do
  slots='' hosts_dir=''
  case $mode in
    direct) host=$UP ;;
    mirror) host=$UP hosts_dir=$work/certs.d ;;
    mirror+slots) host=$UP hosts_dir=$work/certs.d slots=10 ;;
    mirror-host) host=$MIRROR ;;
    mirror-host+slots) host=$MIRROR slots=10 ;;
    *) bench_die "unknown mode $mode" ;;
  esac
  name=${mode//+/-} # the cache's and the image's name
  mirror_flags=()
  [[ -z $hosts_dir ]] || mirror_flags=(--registries-conf "" --mirrors-hosts-dir "$hosts_dir")
  if [[ -n $slots ]]; then
    kubectl -n tkm-system patch configmap tkm-config --type=merge -p "{\"data\":{\"prefetchSlots\":\"$slots\"}}" >/dev/null
  else
    kubectl -n tkm-system patch configmap tkm-config --type=json -p '[{"op":"remove","path":"/data/prefetchSlots"}]' >/dev/null 2>&1 || true
  fi
  bench_log "$mode: a $SIZE cache (bench/gen_cache.py), pushed to the upstream"
  src=$work/src-$mode
  rm -rf "$work/fx" && mkdir -p "$work/fx"
  tar -xzf "$repo/tests/fixtures/triton-cache/triton-3.6.0-cuda-sm90.tar.gz" -C "$work/fx"
  python3 "$here/gen_cache.py" "$work/fx/$(ls "$work/fx")" "$src" "$SIZE" "fleet-$mode-$$-$RANDOM" >/dev/null
  out=$("$TKMCTL" build "$src" --push "$UP/fleet/$name:v1" -o json 2>"$work/build-$mode.err") ||
    bench_die "tkmctl build --push: $(cat "$work/build-$mode.err")"
  layer=$(jq -r .layer <<<"$out") lsize=$(jq -r .layer_size <<<"$out")
  rm -rf "$src"
  agents_start
  bench_log "$mode: $N agents up; declaring the cache (image at $host)"
  t0=$(bench_now_ms)
  kubectl apply -f - >/dev/null <<EOT
apiVersion: tkm.io/v1alpha1
kind: TritonKernelCache
metadata: {name: $name, namespace: fleet}
spec:
  cacheImage: $host/fleet/$name:v1
  signaturePolicy: {mode: Disabled}
EOT
  first='' n=0
  while ((n < N)); do
    (($(bench_now_ms) - t0 < 1200000)) || bench_die "$mode: only $n of $N nodes extracted after 20 minutes"
    for p in "${agent_pids[@]}"; do kill -0 "$p" 2>/dev/null || bench_die "$mode: an agent died (logs in $work/agents)"; done
    sleep 0.2
    n=$(extracted "$name")
    [[ -n $first || $n == 0 ]] || first=$(($(bench_now_ms) - t0))
  done
  all=$(($(bench_now_ms) - t0))
  sleep 1 # the registry writes its log line after the response
  read -r gets peak _ < <(upstream_gets "$layer")
  read -r mgets _ < <(python3 "$here/registry_gets.py" "$work/mirror/registry.log" "$layer")
  # each agent's peak RSS (VmHWM: the pull and the extraction included), median and max in MiB
  read -r rss_med rss_max < <(for p in "${agent_pids[@]}"; do awk '/^VmHWM/ {print $2}' "/proc/$p/status"; done |
    sort -n | awk '{v[NR] = $1} END {printf "%.1f %.1f\n", v[int((NR + 1) / 2)] / 1024, v[NR] / 1024}')
  results+=("$(printf '%-18s %4d %9s %6d %6d %7d %9.1f %9.1f %8s %8s' "$mode" "$N" "$((lsize / 1048576))MiB" "$gets" "$peak" "$mgets" \
    "$(awk -v v="$first" 'BEGIN{print v/1000}')" "$(awk -v v="$all" 'BEGIN{print v/1000}')" "$rss_med" "$rss_max")")
  bench_log "$mode: all $N extracted in $((all / 1000)) s; upstream layer GETs $gets (peak $peak at once)"
  agents_stop
  rm -rf "$work/agents"
  # the next mode's fresh agents must not prefetch this cache too (they would: it stays declared)
  kubectl -n fleet delete tkc "$name" --wait=false >/dev/null
done
echo "fleet: $N tkm-agents, a $SIZE cache each run, load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-18s %4s %9s %6s %6s %7s %9s %9s %8s %8s\n' mode N layer GETs peak mirror first_s all_s hwm_MiB max_MiB
printf '%s\n' "${results[@]}"
