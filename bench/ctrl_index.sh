#!/usr/bin/env bash
# ctrl_index.sh [BUILD_DIR] [NODES] [ROUNDS] [BASE_REV]
# tkm-controller's node status index, now vs a baseline commit (default
# 8cdd8dd: 32-byte entries linked into per-cache pointer arrays): compiles
# bench/ctrl_index/driver.c against each side's controller/ctrl_nodes.c,
# ctrl_agg.c and ctrl-int.h (and the baseline's ctrl_map.c, from git; now the
# map is libtkm's tkm_strmap), then runs
# NODES (default 1000) x 1000 caches, rounds alternating which side goes first.
# Per side: heap bytes per entry, CPU ms per upsert while filling, per event
# (one entry changes; JSON decoding included) and per ctrl_agg_build of a
# cache. Compare only the ratios of one run.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build}
nodes=${2:-1000}
rounds=${3:-2}
base=${4:-8cdd8dd}
work=$(mktemp -d "${TMPDIR:-/tmp}/tkm-bench-idx-XXXXXX")
trap 'rm -rf "$work"' EXIT

mkdir -p "$work/base"
for f in ctrl_nodes.c ctrl_agg.c ctrl_map.c ctrl-int.h; do
  git -C "$src" show "$base:controller/$f" >"$work/base/$f"
done
libs=("$build/api/libtkmapi.a" "$build/k8sclient/libk8sclient.a" "$build/lib/libtkm.a")
for l in "${libs[@]}"; do [ -f "$l" ] || { echo "no $l: build first" >&2; exit 1; }; done
cflags=(-O2 -std=c17 -D_GNU_SOURCE -I"$src/lib/include" -I"$src/k8sclient/include" -I"$src/k8sclient"
  -I"$src/api/include")
pkgs=(libcurl jansson yaml-0.1 libuv libcrypto libssl libarchive zlib libzstd libnghttp2 libmicrohttpd sqlite3)
read -ra syslibs <<<"$(pkg-config --libs "${pkgs[@]}")"
ldlibs=("${libs[@]}" "${libs[@]}" "${syslibs[@]}" -lm -lpthread -ldl)
cc "${cflags[@]}" -I"$src/controller" -o "$work/now" "$src/bench/ctrl_index/driver.c" \
  "$src/controller/ctrl_nodes.c" "$src/controller/ctrl_agg.c" "${ldlibs[@]}"
cc "${cflags[@]}" -I"$work/base" -o "$work/base/drv" "$src/bench/ctrl_index/driver.c" \
  "$work/base/ctrl_nodes.c" "$work/base/ctrl_agg.c" "$work/base/ctrl_map.c" "${ldlibs[@]}"

echo "load average (1/5/15 min) before: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs"
echo "index at $nodes nodes x 1000 caches: tkm (now) vs base ($base)"
for r in $(seq 1 "$rounds"); do
  if (( r % 2 )); then
    a=$("$work/now" "$nodes"); b=$("$work/base/drv" "$nodes")
  else
    b=$("$work/base/drv" "$nodes"); a=$("$work/now" "$nodes")
  fi
  echo "round $r"
  printf '%s\n%s\n' "$a" "$b" | awk '
    { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[NR, kv[1]] = kv[2]; k[i] = kv[1] } n = NF }
    END { printf "  %-18s %12s %12s %8s\n", "", "tkm", "base", "ratio"
          for (i = 1; i <= n; i++) { x = v[1, k[i]]; y = v[2, k[i]]
            printf "  %-18s %12s %12s %8.2f\n", k[i], x, y, (y > 0 ? x / y : 0) } }'
done
echo "load average (1/5/15 min) after: $(cut -d' ' -f1-3 /proc/loadavg)"
