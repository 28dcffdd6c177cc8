# bench/lib-daemons.sh - helpers shared by bench/agent.sh and bench/controller.sh
# (sourced, not run): a private control plane, raw API calls, RSS, the GKM
# baseline and the cache image.
# shellcheck shell=bash
repo=${repo:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
# shellcheck source=hack/lib.sh
source "$repo/hack/lib.sh" # crds_established

bench_die() {
  echo "${BENCH_NAME:-bench}: $*" >&2
  exit 1
}
bench_log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }

# bench_now_ms: wall-clock ms since the epoch, without a fork.
bench_now_ms() {
  local t=${EPOCHREALTIME/./}
  echo "${t:0:13}"
}

# bench_reach_config [KUBECTL-CREATE-ARGS...]: tkm-config in tkm-system allowing the private control plane's
# loopback registry (docs/registry-reach.md: tkm refuses loopback registries unless the
# admin lists them). A ConfigMap, not flags: compare.sh runs older daemons with these
# scripts, and they ignore keys they do not know.
bench_reach_config() {
  local l="127.0.0.1 localhost [::1]"
  kubectl -n tkm-system create configmap tkm-config --from-literal=registryAllow="* $l" \
    --from-literal=registryPrivate="$l" --from-literal=registryPlainHTTP="$l" "$@" >/dev/null
}

# bench_cluster_up DIR: a control plane and registry of hack/cluster.sh of its
# own in DIR (loopback only); exports KUBECONFIG, TKM_REGISTRY, TKM_APISERVER.
# bench_cluster_down stops it (call it from the EXIT trap).
bench_cluster_up() {
  export TKM_CLUSTER_DIR=$1
  bench_log "starting a control plane and registry in $TKM_CLUSTER_DIR (hack/cluster.sh up)"
  # A free port chosen by `up` can be taken by another process before the
  # component binds it (other engineers' clusters): try three times.
  local try
  for try in 1 2 3; do
    "$repo/hack/cluster.sh" up >"$TKM_CLUSTER_DIR.up.log" 2>&1 && break
    "$repo/hack/cluster.sh" down >/dev/null 2>&1 || true
    rm -f "$TKM_CLUSTER_DIR"/*.port
    ((try < 3)) || { tail -20 "$TKM_CLUSTER_DIR.up.log" >&2; bench_die "hack/cluster.sh up failed 3 times (log: $TKM_CLUSTER_DIR.up.log)"; }
    bench_log "hack/cluster.sh up failed ($(grep -m1 -o 'port [0-9]* is in use' "$TKM_CLUSTER_DIR.up.log" || echo see log)); trying again"
  done
  # shellcheck source=/dev/null # written by hack/cluster.sh up
  source "$TKM_CLUSTER_DIR/env"
}
bench_cluster_down() {
  [[ -n ${TKM_CLUSTER_DIR:-} && -f $TKM_CLUSTER_DIR/env ]] || return 0
  "$repo/hack/cluster.sh" down >/dev/null 2>&1 || true
}

# bench_api METHOD PATH [BODY [CONTENT-TYPE]]: one request as the admin (client
# certificate), through curl: a few ms, where kubectl costs ~100 ms of startup.
bench_api() {
  local pki=$TKM_CLUSTER_DIR/pki
  curl -sSN --fail-with-body --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" \
    -X "$1" ${3:+-H "Content-Type: ${4:-application/merge-patch+json}"} ${3:+--data-binary "$3"} \
    "$TKM_APISERVER$2"
}

# bench_crds DIR...: apply the CRDs in each DIR and wait until established.
bench_crds() {
  local d
  for d in "$@"; do kubectl apply -f "$d" >/dev/null; done
  # shellcheck disable=SC2046 # the CRDs' names, one word each
  crds_established 60 $(kubectl get crd -o jsonpath='{.items[*].metadata.name}')
}

# bench_rss PID: "VmRSS VmHWM" in KiB.
bench_rss() {
  awk '/^VmRSS:/ { r = $2 } /^VmHWM:/ { h = $2 } END { print r + 0, h + 0 }' "/proc/$1/status"
}

# bench_cpu_ms PID: the process' CPU time so far, user + system, in ms (/proc/PID/stat's utime
# and stime, in clock ticks). A load-independent measure of a daemon's work: on a busy machine
# its latencies vary with the load, its CPU time does not.
bench_cpu_ms() {
  local hz
  hz=$(getconf CLK_TCK)
  # The fields after the command (which may hold spaces) in parentheses: utime is the 12th, stime the 13th.
  sed 's/^.*) //' "/proc/$1/stat" | awk -v hz="$hz" '{ printf "%d\n", ($12 + $13) * 1000 / hz }'
}

# bench_rss_split PID: "anonymous file-backed" resident KiB from
# /proc/PID/smaps_rollup (Anonymous, and Rss minus it: mapped pages of the
# binary and its shared libraries). Their sum is VmRSS, what `ps` reports.
bench_rss_split() {
  awk '/^Rss:/ { r = $2 } /^Anonymous:/ { a = $2 } END { print a + 0, r - a }' "/proc/$1/smaps_rollup"
}

bench_workdir() { # SHORT: sets $work (BENCH_DIR, else a new /tmp/tkm-bench-SHORT-*) and pids=(); on
  # EXIT stops every pid in pids, takes the cluster down and removes $work (KEEP=1 keeps both)
  work=${BENCH_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/tkm-bench-$1-XXXXXX")}
  mkdir -p "$work"
  pids=()
  trap bench_workdir_cleanup EXIT
}
bench_workdir_cleanup() {
  local p
  for p in "${pids[@]}"; do bench_stop "$p"; done
  if [[ ${KEEP:-0} != 1 ]]; then
    bench_cluster_down
    rm -rf "$work"
  else
    echo "${BENCH_NAME:-bench}: kept $work (cluster: TKM_CLUSTER_DIR=$work/cluster hack/cluster.sh down)" >&2
  fi
}

# bench_gkm: prints the directory of GKM's binaries: GKM_BIN_DIR (a directory
# with gkm-agent, gkm-operator, crds/), else what bench/gkm-build.sh builds (once
# per commit) from the clone of GKM named by GKM_MIRROR.
bench_gkm() {
  if [[ -n ${GKM_BIN_DIR:-} ]]; then
    [[ -x $GKM_BIN_DIR/gkm-agent && -x $GKM_BIN_DIR/gkm-operator && -d $GKM_BIN_DIR/crds ]] ||
      bench_die "GKM_BIN_DIR=$GKM_BIN_DIR lacks gkm-agent, gkm-operator or crds/"
    echo "$GKM_BIN_DIR"
  elif [[ -n ${GKM_MIRROR:-} ]]; then
    bash "$repo/bench/gkm-build.sh" "$GKM_MIRROR" || bench_die "bench/gkm-build.sh failed"
  else
    bench_die "no GKM baseline: set GKM_MIRROR to a clone of github.com/redhat-et/GKM (bench/gkm-build.sh builds it once), or GKM_BIN_DIR to a directory with gkm-agent, gkm-operator and crds/ (such as ${TKM_CACHE:-~/.cache/tkm}/gkm/f0e65de4)"
  fi
}

# bench_image WORKDIR: builds the cache image from the real fixture
# triton-3.6.0-cuda-sm90 with tkmctl and pushes it to $TKM_REGISTRY; prints
# "REF DIGEST".
bench_image() {
  local work=$1 fx out
  mkdir -p "$work/fx"
  tar -xzf "$repo/tests/fixtures/triton-cache/triton-3.6.0-cuda-sm90.tar.gz" -C "$work/fx"
  fx=$work/fx/$(ls "$work/fx")
  out=$("$TKM_BUILD_DIR/cli/tkmctl" build "$fx" --push "$TKM_REGISTRY/bench/cache:sm90" -o json) ||
    bench_die "tkmctl build --push failed"
  echo "$TKM_REGISTRY/bench/cache:sm90 $(jq -r .manifest <<<"$out")"
}

# bench_stop PID: TERM, then KILL after 5 s; only the pid we started.
bench_stop() {
  local pid=$1
  [[ -n $pid ]] || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 50); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
}

# bench_mib KIB: KiB as MiB with one decimal ("-" stays "-").
bench_mib() {
  awk -v k="$1" 'BEGIN { if (k == "-") print "-"; else printf "%.1f", k / 1024 }'
}

# bench_ratio A B: A/B with 2 decimals ("-" when either is missing).
bench_ratio() {
  awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f", a / b }'
}
