#!/usr/bin/env bash
# pull_extract.sh [BUILD_DIR] [SIZE_MB] [ROUNDS]
# Synthesizes a ~SIZE_MB (default 200) Triton cache from the real 3.6.0 fixture
# (its kernel dirs replicated under fresh base32 names, each with an
# incompressible cubin-sized file), builds and pushes it to a private local
# registry, then runs bench_pull_extract: tkm vs `curl | tee | openssl dgst -sha256`
# (digest compared), `tar -xzf`, `sync -f`, rounds alternating which side goes
# first. Prints the load averages before and after: compare only ratios of one
# run, and only runs taken at a similar load.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build}
size_mb=${2:-200}
rounds=${3:-3}
fixtures=${TKM_FIXTURES:-$src/tests/fixtures}
work=$(mktemp -d "${TMPDIR:-/tmp}/tkm-bench-pull-XXXXXX")
cleanup() { "$src/hack/registry.sh" stop "$work/reg" >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT

mkdir -p "$work/fx" "$work/cache"
tar -xzf "$fixtures/triton-cache/triton-3.6.0-cuda-sm90.tar.gz" -C "$work/fx"
fx=$work/fx/$(ls "$work/fx")
kdirs=()
for d in "$fx"/*/; do compgen -G "$d*.cubin" >/dev/null && kdirs+=("$d"); done
i=0
while (( $(du -sm "$work/cache" | cut -f1) < size_mb )); do
  for d in "${kdirs[@]}"; do
    name=$(printf 'bench-%d-%s' "$i" "$d" | sha256sum | cut -c1-64 | xxd -r -p | base32 | tr -d '=')
    cp -r "$d" "$work/cache/$name"
    head -c $((256 * 1024 + (i % 7) * 4096)) /dev/urandom >"$work/cache/$name/payload.cubin"
    i=$((i + 1))
  done
done
echo "synthesized $(find "$work/cache" -type f | wc -l) files, $(du -sh "$work/cache" | cut -f1) in $i kernel dirs"
reg=$("$src/hack/registry.sh" start "$work/reg")
"$build/cli/tkmctl" build "$work/cache" --push "$reg/bench/cache:v1"
echo "load average (1/5/15 min) before: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs"
"$build/bench/bench_pull_extract" "$reg/bench/cache:v1" "$work" "$rounds"
echo "load average (1/5/15 min) after: $(cut -d' ' -f1-3 /proc/loadavg)"
