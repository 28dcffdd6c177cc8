#!/usr/bin/env bash
# csi.sh [BUILD_DIR] [N] [FIXTURE]
# tkm-csi's publish path with the cache already in the store: latency of one
# publish, N (default 100) publishes at once, and the bytes each pod costs on the
# node, printed beside the goals (one publish < 20 ms, 100 at once < 1 s, bytes
# written per pod = the rewritten group files only). Then the count of what a pod
# compiled (issue 25): unpublish with 1,000 new files in the scratch layer (125 new
# real Triton 3.6 kernel dirs of 8 files; with 3 and with 125 kernel names),
# tkm-csi --count-scratch=true vs false side by side (alternated, a restart of
# tkm-csi per block of 3), goal: the count adds <= 5 ms. Printed: both latencies,
# their median difference and ratio, and the count's own time and thread CPU time
# from tkm-csi's log line (the verdict: on a loaded machine the side-by-side medians
# move by more than the count). TKM_BENCH_CSI_ROUNDS: blocks per mode (default 6). Baseline, in the same run:
# readOnly "false", a private copy of the cache per pod (what a driver without the
# overlay must do to give Triton a writable cache dir), alternated with the overlay
# (A B, B A, ...).
#
# The agent is e2e_csi_testagent (tests/e2e/progs/csi_testagent.c), a stand-in
# answering Materialize at once from the extracted fixture: this measures the
# driver's own work (the agent's store lookup comes on top with the real agent).
# The state dir is a tmpfs, as /var/run is on a node. Needs root (mounts), runs in
# a private mount namespace; prints the load averages before and after.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
export TKM_BUILD_DIR=${1:-$src/build}
n=${2:-100}
fixture=${3:-triton-3.6.0-cuda-sm90}
export TKM_FIXTURES=${TKM_FIXTURES:-$src/tests/fixtures}
# shellcheck source=tests/e2e/csi/env.sh
source "$src/tests/e2e/csi/env.sh"
csi_unshare "$0" "$@"
for b in csi/tkm-csi tests/e2e_csi_testagent tests/e2e_csi_client; do
  [[ -x $TKM_BUILD_DIR/$b ]] || { echo "csi bench: $TKM_BUILD_DIR/$b missing (ninja -C $TKM_BUILD_DIR tkm-csi e2e_csi_testagent e2e_csi_client)" >&2; exit 1; }
done
work=$(mktemp -d "${TMPDIR:-/tmp}/tkm-bench-csi-XXXXXX")
cleanup() { csi_teardown >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT
csi_setup "$work" "$fixture"
csi_agent_start
csi_driver_start -v warn

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
kernels=$(find "$CSI_STORE" -name '*.json' ! -name '__grp__*' | wc -l)
groups=$(find "$CSI_STORE" -name '__grp__*.json' | wc -l)
store_bytes=$(find "$CSI_STORE" -type f -printf '%s\n' | awk '{s+=$1} END {print s+0}')
echo "fixture $fixture: $kernels kernel entries, $groups group files, $store_bytes bytes; state on tmpfs"

# One publish at a time, alternating overlay (A) and copy (B); each call's latency
# as the client measured it (connect included), then unpublish.
one() { # MODE I -> latency ms
  local mode=$1 i=$2 attrs=(cacheName=vadd) out
  [[ $mode == copy ]] && attrs+=(readOnly=false)
  mkdir -p "$work/pods/one-$mode-$i"
  out=$("$TKM_BUILD_DIR/tests/e2e_csi_client" "$CSI_SOCK" bench 1 "$work/pods/one-$mode-$i" "${attrs[@]}")
  sed -n 's/^publish: .* p50 \([0-9.]*\) ms.*/\1/p' <<<"$out"
}
declare -a lat_a lat_b
for i in $(seq 10); do
  if ((i % 2)); then lat_a+=("$(one overlay "$i")"); lat_b+=("$(one copy "$i")")
  else lat_b+=("$(one copy "$i")"); lat_a+=("$(one overlay "$i")"); fi
done
stats() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {printf "median %.1f ms, max %.1f ms", a[int((NR+1)/2)], a[NR]}'; }
med() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
verdict() { awk -v x="$1" -v g="$2" 'BEGIN {print (x < g) ? "MET" : "MISSED"}'; }
ma=$(med "${lat_a[@]}"); mb=$(med "${lat_b[@]}")
printf '%-34s %-40s goal < 20 ms: %s\n' "one publish, overlay (tkm-csi):" "$(stats "${lat_a[@]}")" "$(verdict "$ma" 20)"
printf '%-34s %-40s ratio copy/overlay %.1fx\n' "one publish, private copy (base):" "$(stats "${lat_b[@]}")" \
  "$(awk -v a="$ma" -v b="$mb" 'BEGIN {print (a > 0) ? b / a : 0}')"

# N at once, each mode once.
for mode in overlay copy; do
  attrs=(cacheName=vadd)
  [[ $mode == copy ]] && attrs+=(readOnly=false)
  mkdir -p "$work/pods/many-$mode"
  out=$("$TKM_BUILD_DIR/tests/e2e_csi_client" "$CSI_SOCK" bench "$n" "$work/pods/many-$mode" "${attrs[@]}")
  pub=$(grep '^publish:' <<<"$out"); unpub=$(grep '^unpublish:' <<<"$out")
  wall=$(sed -n 's/^publish: [0-9]* calls in \([0-9.]*\) ms wall.*/\1/p' <<<"$pub")
  if [[ $mode == overlay ]]; then
    printf '%s publishes at once, overlay: %s; goal 100 < 1000 ms: %s\n' "$n" "${pub#publish: }" "$(verdict "$wall" 1000)"
  else
    printf '%s publishes at once, copy (base): %s\n' "$n" "${pub#publish: }"
  fi
  printf '  then %s unpublishes at once: %s\n' "$n" "${unpub#unpublish: }"
done

# Bytes one pod costs on the node (its state dir), overlay vs copy.
for mode in overlay copy; do
  attrs=(cacheName=vadd "csi.storage.k8s.io/pod.name=bytes-$mode")
  [[ $mode == copy ]] && attrs+=(readOnly=false)
  csi publish "bytes-$mode" "$work/pods/bytes-$mode/mount" "${attrs[@]}" >/dev/null
  d=$CSI_STATE/default/bytes-$mode
  files=$(find "$d" -type f | wc -l)
  bytes=$(find "$d" -type f -printf '%s\n' | awk '{s+=$1} END {print s+0}')
  gbytes=$(find "$d" -type f -name '__grp__*.json' -printf '%s\n' | awk '{s+=$1} END {print s+0}')
  if [[ $mode == overlay ]]; then
    ok=$([[ $files -eq $groups && $bytes -eq $gbytes ]] && echo MET || echo MISSED)
    printf 'bytes written per pod, overlay: %s files, %s bytes (all group files: %s bytes); cache %s bytes; goal only the group files: %s\n' \
      "$files" "$bytes" "$gbytes" "$store_bytes" "$ok"
  else
    printf 'bytes written per pod, copy (base): %s files, %s bytes (%.0fx the overlay)\n' "$files" "$bytes" \
      "$(awk -v a="$bytes" -v b="$obytes" 'BEGIN {print (b > 0) ? a / b : 0}')"
  fi
  obytes=${obytes:-$bytes}
  csi unpublish "bytes-$mode" "$work/pods/bytes-$mode/mount" >/dev/null
done
# Unpublish with 1,000 new files in the scratch layer: the count on vs off. Two
# scratch layers: 125 copies of the fixture's 4 kernel dirs (3 kernel names: the same
# kernels at other specializations), and the same with 125 distinct names (every
# kernel JSON parsed: the worst case, as Inductor's generated kernels).
src_k=$TKM_FIXTURES/triton-3.6-sm80-cross/cache
mapfile -t kdirs < <(find "$src_k" -mindepth 1 -maxdepth 1 -type d | sort)
mkdir -p "$work/same" "$work/distinct"
for i in $(seq 0 124); do
  d=$(printf 'NEWKERNEL%03d' "$i")
  cp -r "${kdirs[$((i % ${#kdirs[@]}))]}" "$work/same/$d"
  cp -r "${kdirs[$((i % ${#kdirs[@]}))]}" "$work/distinct/$d"
  for f in "$work/distinct/$d"/*.json; do
    [[ $f == */__grp__* ]] && continue
    stem=$(basename "$f" .json)
    sed "s/\"name\": \"$stem\"/\"name\": \"${stem}_$i\"/" "$f" >"$work/distinct/$d/${stem}_$i.json"
    rm "$f"
  done
done
tmpl_files=$(find "$work/same" -type f | wc -l)
rounds=${TKM_BENCH_CSI_ROUNDS:-6}
unpub_block() { # on|off BLOCK TEMPLATE: restart tkm-csi with the count on or off, 3 timed unpublishes
  local mode=$1 b=$2 tmpl=$3 v t out
  csi_driver_stop
  csi_driver_start -v info --count-scratch="$([[ $mode == on ]] && echo true || echo false)"
  csi publish "warm-$mode-$b" "$work/pods/warm-$mode-$b/mount" cacheName=vadd >/dev/null
  csi unpublish "warm-$mode-$b" "$work/pods/warm-$mode-$b/mount" >/dev/null
  for k in 1 2 3; do
    v=cnt-$mode-$b-$k
    t=$work/pods/$v/mount
    csi publish "$v" "$t" cacheName=vadd >/dev/null
    cp -r "$tmpl/." "$t/"
    out=$("$TKM_BUILD_DIR/tests/e2e_csi_client" "$CSI_SOCK" unpublish "$v" "$t" --time)
    [[ $out == OK* ]] || { echo "unpublish $v: $out" >&2; exit 1; }
    out=${out#OK }
    if [[ $mode == on ]]; then lat_on+=("${out% ms}"); else lat_off+=("${out% ms}"); fi
  done
}
stats2() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {printf "median %.2f ms, max %.2f ms", a[int((NR+1)/2)], a[NR]}'; }
for kind in same distinct; do
  lat_on=(); lat_off=()
  for b in $(seq "$rounds"); do
    if ((b % 2)); then unpub_block on "$kind$b" "$work/$kind"; unpub_block off "$kind$b" "$work/$kind"
    else unpub_block off "$kind$b" "$work/$kind"; unpub_block on "$kind$b" "$work/$kind"; fi
  done
  counted=$(grep -o 'the pod compiled: triton [0-9]* kernels' "$CSI_TMP/csi.log" | tail -1)
  mapfile -t own < <(grep "unpublished cnt-on-$kind" "$CSI_TMP/csi.log" | sed -n 's/.*counted in \([0-9.]*\) ms.*/\1/p')
  mapfile -t own_cpu < <(grep "unpublished cnt-on-$kind" "$CSI_TMP/csi.log" | sed -n 's/.*counted in [0-9.]* ms, \([0-9.]*\) ms CPU.*/\1/p')
  mon=$(med "${lat_on[@]}"); moff=$(med "${lat_off[@]}")
  echo "unpublish, $tmpl_files new files in the scratch ($kind kernel names; $counted), $((3 * rounds)) each:"
  printf '  count off (--count-scratch=false): %s\n' "$(stats2 "${lat_off[@]}")"
  printf '  count on (default):                %s\n' "$(stats2 "${lat_on[@]}")"
  printf '  the count itself (tkm-csi log):    %s; its thread CPU time %s\n' "$(stats2 "${own[@]}")" "$(stats2 "${own_cpu[@]}")"
  printf '  side by side: on - off %s ms (medians), ratio on/off %s\n' \
    "$(awk -v a="$mon" -v b="$moff" 'BEGIN {printf "%.2f", a - b}')" \
    "$(awk -v a="$mon" -v b="$moff" 'BEGIN {printf "%.2f", (b > 0) ? a / b : 0}')"
  # The count runs inside the unpublish, serially, on its thread: its own time is
  # what it adds; the side-by-side medians carry the machine's noise (load above).
  printf '  goal: the count adds <= 5 ms (its own median time in the unpublish): %s\n' \
    "$(awk -v a="$(med "${own[@]}")" 'BEGIN {print (a <= 5) ? "MET" : "MISSED"}')"
done

left=$(csi_mounts | wc -l)
echo "mounts left: $left"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
