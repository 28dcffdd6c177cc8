#!/usr/bin/env bash
# bundle.sh [BUILD_DIR] [DEST]: the binaries bench/gpu/csi-proof.sh needs on a
# machine that has none of our build dependencies (the device), with the shared
# libraries they link (ldd), as DEST.tar.gz (default .device/csi-proof.tar.gz, an
# ignored path, passed to the device with `carry`; csi-proof.sh unpacks it).
# Layout inside: bin/<the four binaries>, lib/*.so*, and at the paths a build dir
# has them (cli/tkmctl, csi/tkm-csi, tests/e2e_csi_testagent, tests/e2e_csi_client)
# wrappers that exec bin/ with LD_LIBRARY_PATH=lib, so csi-proof.sh and
# tests/e2e/csi/env.sh use the bundle as TKM_BUILD_DIR while Python, torch and
# Triton never see our libraries (no global LD_LIBRARY_PATH). glibc itself (libc, libm,
# libresolv, ld.so, ...) is left out: it must match the target's dynamic loader,
# and the target's glibc (Ubuntu 24.04 on the device) is newer than ours.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$src/build}
dest=${2:-$src/.device/csi-proof}
# TKM_BUNDLE_BINS (space-separated build-dir paths) overrides the list (bench/gpu/agent-once.sh).
read -r -a bins <<<"${TKM_BUNDLE_BINS:-cli/tkmctl csi/tkm-csi tests/e2e_csi_testagent tests/e2e_csi_client}"
for b in "${bins[@]}"; do
  [[ -x $build/$b ]] || { echo "bundle: $build/$b missing (ninja -C $build tkmctl tkm-csi e2e_csi_testagent e2e_csi_client)" >&2; exit 1; }
done
rm -rf "$dest" "$dest.tar.gz"
mkdir -p "$dest/lib" "$dest/bin" "$dest/cli" "$dest/csi" "$dest/tests"
for b in "${bins[@]}"; do
  mkdir -p "$(dirname "$dest/$b")"
  cp "$build/$b" "$dest/bin/"
  # shellcheck disable=SC2016 # the wrapper's own $0, $d and $@, expanded when it runs
  printf '#!/bin/sh\nd=$(cd "$(dirname "$0")/.." && pwd)\nLD_LIBRARY_PATH=$d/lib exec "$d/bin/%s" "$@"\n' \
    "$(basename "$b")" >"$dest/$b"
  chmod +x "$dest/$b"
done
skip='^(libc|libm|libresolv|libpthread|libdl|librt|ld-linux-x86-64)\.so'
for b in "${bins[@]}"; do ldd "$build/$b"; done | awk '$3 ~ /^\// {print $3}' | sort -u |
  while read -r so; do
    base=$(basename "$so")
    [[ $base =~ $skip ]] && continue
    cp -L "$so" "$dest/lib/$base"
  done
{ git -C "$src" rev-parse --short HEAD && git -C "$src" status --porcelain | grep -q . && echo "(+ uncommitted changes)"; } | paste -sd' ' >"$dest/COMMIT" || true
(cd "$dest" && find . -type f | sort | xargs sha256sum >MANIFEST.sha256)
tar -C "$(dirname "$dest")" -czf "$dest.tar.gz" "$(basename "$dest")"
echo "bundle: $dest.tar.gz $(du -h "$dest.tar.gz" | cut -f1) ($(find "$dest/lib" -type f | wc -l) libraries; unpacked $(du -sh "$dest" | cut -f1))"
