#!/usr/bin/env bash
# Cross-compiles tkm for linux/arm64 into build-arm64/ (or $1) with Debian's cross toolchain
# (cmake/aarch64-linux-gnu.cmake; packages: hack/deps.sh --arm64), -Wall -Wextra -Werror as
# every build: the daemons, tkmctl, kubectl-tkm and the unit test binaries. ctest in that
# directory runs the unit tests under qemu-aarch64 (label arm64, the subset named in
# docs/development.md) and images.multiarch (labels arm64 and images: the amd64+arm64 image
# indexes, with the linux/amd64 binaries of build/, which must be built first; as root).
#
# Usage: hack/cross-arm64.sh [build-dir] [--test]
#   --test   also run `ctest -L arm64` there (the CI phase)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build-arm64
run_tests=0
for a in "$@"; do
  case $a in
  --test) run_tests=1 ;;
  *) dir=$a ;;
  esac
done
read -ra flags <<<"${CMAKE_FLAGS:-}"
cmake -S . -B "$dir" -G Ninja -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/aarch64-linux-gnu.cmake" \
  -DTKM_E2E=OFF "${flags[@]}"
ninja -C "$dir" -j "${JOBS:-2}"
if [[ $run_tests -eq 1 ]]; then
  (cd "$dir" && ctest -L arm64 -j "${JOBS:-2}" --output-on-failure)
fi
