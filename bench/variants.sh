#!/usr/bin/env bash
# variants.sh [BUILD_DIR] [SIZE_MB] [ROUNDS]
# Pull + extract of one variant of a two-variant image against the same cache as a
# single-manifest image, side by side (issue 24's goal: <= 1.05x).
#
# Synthesizes a ~SIZE_MB (default 200) sm90 Triton cache from the real 3.6.0 fixture
# (bench/gen_cache.py, as bench/volumes.sh does), derives an sm80 variant of it (tests/e2e/cache_retarget.py:
# new keys, target arch 80), and pushes to a private loopback registry (its access log
# on):
#   single  REG/bench/single:v1   tkmctl build of the sm90 cache
#   multi   REG/bench/multi:v1    an index of two variants, sm90 + sm80 (tkmctl build
#                                 --add-variant, twice)
# Then ROUNDS (default 5) rounds, alternating which goes first, of
#   tkmctl extract REG/bench/single:v1 --output O
#   tkmctl extract REG/bench/multi:v1 --target cuda/90 --output O
# (each into a fresh directory on the same filesystem, removed after). Prints the
# median wall time of each and the ratio, and the blob bytes the registry's own access
# log shows each side fetched: the multi side must fetch only its variant's layer.
# Exits 1 when the ratio is above 1.05 or the multi side fetched the other layer.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build}
size_mb=${2:-200}
rounds=${3:-5}
fixtures=${TKM_FIXTURES:-$src/tests/fixtures}
tkmctl=$build/cli/tkmctl
[[ -x $tkmctl ]] || { echo "variants.sh: no $tkmctl (build first)" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/tkm-bench-variants-XXXXXX")
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() { "$src/hack/registry.sh" stop "$work/reg" >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT

mkdir -p "$work/fx"
tar -xzf "$fixtures/triton-cache/triton-3.6.0-cuda-sm90.tar.gz" -C "$work/fx"
# the sm90 cache: copies of the real fixture's kernel dirs, as bench/volumes.sh makes its caches
python3 "$src/bench/gen_cache.py" "$work/fx/$(ls "$work/fx")" "$work/c90" "${size_mb}M" variants-$$
python3 "$src/tests/e2e/cache_retarget.py" "$work/c90" "$work/c80" 80
echo "synthesized sm90: $(find "$work/c90" -type f | wc -l) files, $(du -sh "$work/c90" | cut -f1); sm80: $(du -sh "$work/c80" | cut -f1)"

reg=$("$src/hack/registry.sh" start "$work/reg" --access-log)
log=$work/reg/registry.log
"$tkmctl" build "$work/c90" --push "$reg/bench/single:v1" >/dev/null
"$tkmctl" build "$work/c90" --push "$reg/bench/multi:v1" --add-variant >/dev/null
"$tkmctl" build "$work/c80" --push "$reg/bench/multi:v1" --add-variant >/dev/null
"$tkmctl" inspect "$reg/bench/multi:v1" | sed 's/^/  /'

# bytes of blob GETs (status 200) of repository REPO in the access log since line FROM
blob_bytes() {
  tail -n +"$2" "$log" | awk -v r="/v2/bench/$1/blobs/" '
    index($0, "\"GET " r) && match($0, /" 200 [0-9]+/) { split(substr($0, RSTART, RLENGTH), f, " "); s += f[3] }
    END { print s + 0 }'
}

declare -a ts tm
bs=0 bm=0
echo "load average (1/5/15 min) before: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs"
for ((r = 0; r < rounds; r++)); do
  for side in $( ((r % 2)) && echo "multi single" || echo "single multi"); do
    out=$work/out-$side-$r
    from=$(($(wc -l <"$log") + 1))
    t0=$(date +%s.%N)
    if [[ $side == single ]]; then
      "$tkmctl" extract "$reg/bench/single:v1" --output "$out" >/dev/null
    else
      "$tkmctl" extract "$reg/bench/multi:v1" --target cuda/90 --output "$out" >/dev/null
    fi
    t=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.3f", b-a}')
    b=$(blob_bytes "$side" "$from")
    if [[ $side == single ]]; then ts+=("$t"); bs=$b; else tm+=("$t"); bm=$b; fi
    rm -rf "$out"
  done
done
echo "load average (1/5/15 min) after: $(cut -d' ' -f1-3 /proc/loadavg)"
median() { printf '%s\n' "$@" | sort -n | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
ms=$(median "${ts[@]}") mm=$(median "${tm[@]}")
ratio=$(awk -v a="$mm" -v b="$ms" 'BEGIN{printf "%.3f", a/b}')
printf '| image | median pull+extract (s) | blob bytes fetched per run |\n|---|---|---|\n'
printf '| single manifest (sm90) | %s | %s |\n' "$ms" "$bs"
printf '| two-variant index, sm90 picked | %s | %s |\n' "$mm" "$bm"
echo "ratio two-variant / single: $ratio (goal <= 1.05), $rounds rounds, ${size_mb} MB"
ok=0
awk -v r="$ratio" 'BEGIN{exit !(r <= 1.05)}' || { echo "goal missed: ratio $ratio > 1.05"; ok=1; }
# the multi side may fetch its index, variant manifest and config blobs, but one layer only
awk -v a="$bm" -v b="$bs" 'BEGIN{exit !(a <= b * 1.01 + 4096)}' ||
  { echo "the two-variant side fetched $bm bytes of blobs, the single one $bs: more than its variant"; ok=1; }
exit $ok
