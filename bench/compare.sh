#!/usr/bin/env bash
# bench/compare.sh - tkm before and after a change, side by side in one run: the
# daemon benchmarks of bench/ on a baseline revision's build and on this tree's
# build, sides alternated, one table with the after/before ratios.
#
# Usage: bench/compare.sh [-r ROUNDS] [-b "controller agent csi extract"] BASE_REV [BUILD_DIR]
#   BASE_REV   the "before" side: a git revision of this repository. It is
#              checked out in a temporary detached worktree (git worktree add
#              --detach), built there (the targets the benchmarks run, the build
#              type of BUILD_DIR) and the worktree removed at the end.
#   BUILD_DIR  the "after" side: this tree's build (default build/), already built
#              (ninja -C BUILD_DIR).
#   -r ROUNDS  runs of each benchmark per side (default 1); round r runs the sides
#              in the order before, after when r plus the benchmark's number is
#              even, else after, before. The table shows the median per side.
#   -b LIST    the benchmarks, in order (default all four):
#     controller  bench/controller.sh SIDES=tkm, NODES x CACHES: last node status ->
#                 all caches Ready (s), controller RSS (MiB)
#     agent       bench/agent.sh SIDES=tkm: RSS idle / with CACHES caches / + PODS Pods
#                 (MiB), pin -> node status median (ms)
#     csi         bench/csi.sh: one publish (median ms), N publishes at once (ms wall),
#                 bytes written per pod
#     extract     bench/pull_extract.sh: pull + verify + extract (median s, MiB/s, CPU
#                 s, max RSS MiB) and its throughput over curl|tar's of the same run
#   env (defaults are the issue's sizes):
#     CTRL_NODES=1000 CTRL_CACHES=100 CTRL_SETTLE=5 CTRL_CHANGE_WAIT=10
#     AGENT_CACHES=100 AGENT_PODS=10000 AGENT_SETTLE=10 AGENT_PIN_ROUNDS=10
#     CSI_N=100 EXTRACT_MB=200 EXTRACT_ROUNDS=3
#     COMPARE_DIR   where the logs and the table go (default a new
#                   /tmp/tkm-compare-*, kept: its path is printed)
# Which harness each side runs: the controller and agent benchmarks are this
# tree's scripts for both sides, with the tools of BUILD_DIR (tkmctl,
# bench_simagents, the fake NVML) and only the daemon swapped (TKM_CONTROLLER,
# TKM_AGENT): so both daemons must take the flags those scripts pass. csi and
# extract run each side's own bench/csi.sh and bench/pull_extract.sh with that
# side's build (their drivers, test agent and bench_pull_extract are built code
# of that revision). controller and agent start private control planes
# (hack/cluster.sh: the Go-built test binaries); csi needs root (mounts).
# A benchmark's own exit status (1 when a goal of its own is missed) does not
# fail this script; a number it did not print shows as "-" and makes the exit 1.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
usage() { sed -n '2,40p' "$0" >&2; exit 2; }
die() { echo "compare: $*" >&2; exit 1; }
log() { echo "[$(date -u +%H:%M:%S)] compare: $*" >&2; }

ROUNDS=1 benches="controller agent csi extract"
while getopts "r:b:h" o; do
  case $o in
    r) ROUNDS=$OPTARG ;;
    b) benches=$OPTARG ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
(($# >= 1 && $# <= 2)) || usage
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "-r wants a positive number, not '$ROUNDS'"
for b in $benches; do
  [[ $b =~ ^(controller|agent|csi|extract)$ ]] || die "unknown benchmark '$b' (controller agent csi extract)"
done
base_rev=$1
cur_build=$(cd "${2:-$repo/build}" 2>/dev/null && pwd) || die "no build directory ${2:-$repo/build}"
[[ -f $cur_build/CMakeCache.txt ]] || die "$cur_build is not a CMake build directory"
base_sha=$(git -C "$repo" rev-parse --verify -q "$base_rev^{commit}") || die "'$base_rev' is not a commit of $repo"
cur_sha=$(git -C "$repo" rev-parse HEAD)
cur_dirty=''
[[ -z $(git -C "$repo" status --porcelain --untracked-files=no) ]] || cur_dirty=" + uncommitted changes"

CTRL_NODES=${CTRL_NODES:-1000} CTRL_CACHES=${CTRL_CACHES:-100} CTRL_SETTLE=${CTRL_SETTLE:-5}
CTRL_CHANGE_WAIT=${CTRL_CHANGE_WAIT:-10}
AGENT_CACHES=${AGENT_CACHES:-100} AGENT_PODS=${AGENT_PODS:-10000} AGENT_SETTLE=${AGENT_SETTLE:-10}
AGENT_PIN_ROUNDS=${AGENT_PIN_ROUNDS:-10}
CSI_N=${CSI_N:-100} EXTRACT_MB=${EXTRACT_MB:-200} EXTRACT_ROUNDS=${EXTRACT_ROUNDS:-3}
out=${COMPARE_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/tkm-compare-XXXXXX")}
mkdir -p "$out"
out=$(cd "$out" && pwd)

# ---- the baseline's build, in a temporary worktree ---------------------------------
base_src=$out/base-src
cleanup() {
  if [[ -d $base_src ]]; then
    git -C "$repo" worktree remove --force "$base_src" 2>/dev/null || rm -rf "$base_src"
    git -C "$repo" worktree prune 2>/dev/null || true
  fi
}
trap cleanup EXIT
[[ ! -e $base_src ]] || die "$base_src exists (a COMPARE_DIR of an earlier run?): remove it first"
log "checking out ${base_sha:0:12} ($base_rev) in $base_src"
git -C "$repo" worktree add --detach "$base_src" "$base_sha" >"$out/worktree.log" 2>&1 ||
  { cat "$out/worktree.log" >&2; die "git worktree add failed"; }
base_build=$base_src/build
targets=(cli/tkmctl)
for b in $benches; do
  case $b in
    controller) targets+=(controller/tkm-controller) ;;
    agent) targets+=(agent/tkm-agent) ;;
    csi) targets+=(csi/tkm-csi tests/e2e_csi_testagent tests/e2e_csi_client) ;;
    extract) targets+=(bench/bench_pull_extract) ;;
  esac
done
btype=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$cur_build/CMakeCache.txt")
log "building the baseline (${targets[*]}; build type ${btype:-the project default}); log: $out/base-build.log"
{ cmake -S "$base_src" -B "$base_build" -G Ninja ${btype:+"-DCMAKE_BUILD_TYPE=$btype"} &&
  ninja -C "$base_build" -j "${JOBS:-$(nproc)}" "${targets[@]}"; } >"$out/base-build.log" 2>&1 ||
  { tail -30 "$out/base-build.log" >&2; die "the baseline ${base_sha:0:12} did not build (log: $out/base-build.log)"; }
for t in "${targets[@]}"; do
  [[ -e $cur_build/$t ]] || die "$cur_build/$t missing: build the current tree first (ninja -C $cur_build)"
done

# ---- one run of one benchmark for one side -----------------------------------------
# run_one BENCH SIDE ROUND: runs it, its output in $out/BENCH-SIDE-ROUND.log, and
# appends "BENCH SIDE ROUND KEY VALUE" lines to $out/values.
side_build() { if [[ $1 == before ]]; then echo "$base_build"; else echo "$cur_build"; fi; }
side_src() { if [[ $1 == before ]]; then echo "$base_src"; else echo "$repo"; fi; }
# field LOG LABEL COLUMN: the first word at COLUMN (1-based) of the line starting with LABEL.
field() {
  awk -v l="$2" -v c="$3" 'index($0, l) == 1 { split(substr($0, c), w, " "); print w[1]; exit }' "$1"
}
run_one() {
  local b=$1 s=$2 r=$3 build src lg rc=0 kv=$out/.values-one
  build=$(side_build "$s") src=$(side_src "$s")
  lg=$out/$b-$s-$r.log
  log "$b, $s (round $r): log $lg"
  case $b in
    controller)
      SIDES=tkm NODES=$CTRL_NODES CACHES=$CTRL_CACHES SETTLE=$CTRL_SETTLE CHANGE_WAIT=$CTRL_CHANGE_WAIT \
        TKM_BUILD_DIR=$cur_build TKM_CONTROLLER=$build/controller/tkm-controller \
        bash "$repo/bench/controller.sh" small >"$lg" 2>&1 || rc=$?
      {
        echo "ready_s $(field "$lg" "last node status -> all caches Ready (s)" 56)"
        echo "rss_mib $(field "$lg" "controller RSS at the end, VmRSS as ps shows (MiB)" 56)"
      } >"$kv" ;;
    agent)
      SIDES=tkm CACHES=$AGENT_CACHES PODS=$AGENT_PODS SETTLE=$AGENT_SETTLE \
        TKM_BUILD_DIR=$cur_build TKM_AGENT=$build/agent/tkm-agent \
        bash "$repo/bench/agent.sh" -r "$AGENT_PIN_ROUNDS" >"$lg" 2>&1 || rc=$?
      {
        echo "rss_idle_mib $(field "$lg" "RSS idle (MiB)" 42)"
        echo "rss_caches_mib $(field "$lg" "RSS with $AGENT_CACHES caches (MiB)" 42)"
        echo "rss_pods_mib $(field "$lg" "RSS + $AGENT_PODS Pods (MiB)" 42)"
        echo "pin_ms $(field "$lg" "pin -> node status, median (ms)" 42)"
      } >"$kv" ;;
    csi)
      bash "$src/bench/csi.sh" "$build" "$CSI_N" >"$lg" 2>&1 || rc=$?
      {
        echo "one_ms $(sed -n 's/^one publish, overlay (tkm-csi): *median \([0-9.]*\) ms.*/\1/p' "$lg")"
        echo "many_ms $(sed -n "s/^$CSI_N publishes at once, overlay: .* in \([0-9.]*\) ms wall.*/\1/p" "$lg")"
        echo "pod_bytes $(sed -n 's/^bytes written per pod, overlay: [0-9]* files, \([0-9]*\) bytes.*/\1/p' "$lg")"
      } >"$kv" ;;
    extract)
      bash "$src/bench/pull_extract.sh" "$build" "$EXTRACT_MB" "$EXTRACT_ROUNDS" >"$lg" 2>&1 || rc=$?
      local t
      t=$(grep -m1 '^tkm (pull + verify' "$lg" || true)
      {
        echo "wall_s $(sed -n 's/.* median \([0-9.]*\) s .*/\1/p' <<<"$t")"
        echo "mib_s $(sed -n 's/.* s *\([0-9.]*\) MiB\/s.*/\1/p' <<<"$t")"
        echo "cpu_s $(sed -n 's/.* CPU \([0-9.]*\) s.*/\1/p' <<<"$t")"
        echo "rss_mib $(sed -n 's/.* max RSS \([0-9.]*\) MiB.*/\1/p' <<<"$t")"
        echo "vs_curl_tar $(sed -n 's/^ratio tkm\/baseline throughput: \([0-9.]*\).*/\1/p' "$lg")"
      } >"$kv" ;;
  esac
  while read -r k v; do echo "$b $s $r $k ${v:--}"; done <"$kv" >>"$out/values"
  ((rc == 0)) || log "$b, $s (round $r): exit $rc (a goal of its own missed, or a failure: see the log)"
}

: >"$out/values"
load0=$(cut -d' ' -f1-3 /proc/loadavg)
i=0
for b in $benches; do
  for ((r = 1; r <= ROUNDS; r++)); do
    if (((i + r) % 2 == 0)); then order=(before after); else order=(after before); fi
    for s in "${order[@]}"; do run_one "$b" "$s" "$r"; done
  done
  i=$((i + 1))
done

# ---- the table ---------------------------------------------------------------------
# median BENCH SIDE KEY: the median over the rounds ("-" when a round has no number).
median() {
  awk -v b="$1" -v s="$2" -v k="$3" '$1 == b && $2 == s && $4 == k { n++; v[n] = $5; if ($5 !~ /^[0-9.]+$/) bad = 1 }
    END {
      if (n == 0 || bad) { print "-"; exit }
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] + 0 < v[i] + 0) { t = v[i]; v[i] = v[j]; v[j] = t }
      print (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
    }' "$out/values"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a !~ /^[0-9.]+$/ || b !~ /^[0-9.]+$/ || b == 0) print "-"; else printf "%.2f", a / b }'; }
missing=0
row() { # BENCH KEY LABEL: one line of the table
  local a b
  a=$(median "$1" before "$2") b=$(median "$1" after "$2")
  [[ $a != - && $b != - ]] || missing=1
  printf '| %s | %s | %s | %s |\n' "$3" "$a" "$b" "$(ratio "$b" "$a")"
}
table() {
  echo "tkm before/after: before ${base_sha:0:12} ($base_rev), after ${cur_sha:0:12}$cur_dirty ($cur_build)"
  echo "$(date -u +%Y-%m-%d), $(nproc) CPUs, load average (1/5/15 min) $load0 at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end;"
  echo "median of $ROUNDS run(s) per side, sides alternated; after/before below 1 is better for times, RSS and bytes, above 1 for MiB/s and the ratio to curl+tar"
  echo
  echo "| metric | before | after | after/before |"
  echo "|---|---|---|---|"
  for b in $benches; do
    case $b in
      controller)
        row controller ready_s "controller $CTRL_NODES x $CTRL_CACHES: last node status -> all Ready (s)"
        row controller rss_mib "controller $CTRL_NODES x $CTRL_CACHES: RSS at the end (MiB)" ;;
      agent)
        row agent rss_idle_mib "agent: RSS idle (MiB)"
        row agent rss_caches_mib "agent: RSS with $AGENT_CACHES caches (MiB)"
        row agent rss_pods_mib "agent: RSS + $AGENT_PODS Pods (MiB)"
        row agent pin_ms "agent: pin -> node status, median of $AGENT_PIN_ROUNDS (ms)" ;;
      csi)
        row csi one_ms "csi: one publish, median of 10 (ms)"
        row csi many_ms "csi: $CSI_N publishes at once, wall (ms)"
        row csi pod_bytes "csi: bytes written per pod" ;;
      extract)
        row extract wall_s "extraction ${EXTRACT_MB} MB: pull+verify+extract, median (s)"
        row extract mib_s "extraction ${EXTRACT_MB} MB: throughput (MiB/s)"
        row extract cpu_s "extraction ${EXTRACT_MB} MB: CPU (s)"
        row extract rss_mib "extraction ${EXTRACT_MB} MB: max RSS (MiB)"
        row extract vs_curl_tar "extraction ${EXTRACT_MB} MB: throughput over curl+tar's, same run" ;;
    esac
  done
}
table >"$out/table.md" # (not in a pipe: row sets missing)
cat "$out/table.md"
echo
echo "logs and table: $out"
((missing == 0)) || die "a number is missing (\"-\"): see the logs in $out"
