#!/usr/bin/env bash
# Installs the Debian packages tkm needs to build and test, idempotently.
#
# Only packages that are missing are installed, and `apt-get update` runs only
# when something is missing and the package lists are older than a day (or
# absent). Run as root, or with sudo available. Safe to run again and again.
#
# Then it makes sure a Go new enough for the Go-built test components is there
# (go_ensure in hack/lib.sh): the one on PATH if it is, else one bootstrapped
# once into ${TKM_CACHE:-~/.cache/tkm}/go/ with Debian's golang-go.
#
# Usage: hack/deps.sh [--check] [--arm64]
#   --check   list what is missing and exit 1 if anything is, install nothing.
#   --arm64   also the linux/arm64 cross build (hack/cross-arm64.sh): Debian's cross
#             toolchain, qemu-user-static and the :arm64 multiarch -dev packages of the
#             libraries below (adds the arm64 dpkg architecture). Opt-in: about 150
#             packages. TKM_ARM64=1 does the same.
set -euo pipefail
check='' arm64=${TKM_ARM64:-0}
for a in "$@"; do
  case $a in
  --check) check=--check ;;
  --arm64) arm64=1 ;;
  *) echo "deps: unknown argument '$a' (usage: hack/deps.sh [--check] [--arm64])" >&2; exit 2 ;;
  esac
done
# shellcheck source=hack/lib.sh
source "$(dirname "$0")/lib.sh"

# ensure_go: Go >= go_required on PATH or in the cache, bootstrapped if neither.
ensure_go() {
  local want
  want=$(go_required)
  if [[ ${1:-} == --check ]]; then
    local have cached=${TKM_CACHE:-$HOME/.cache/tkm}/go/go$want/bin/go
    have=''
    if command -v go >/dev/null; then have=$(go_version_of "$(command -v go)" || true); fi
    if [[ -n $have ]] && go_version_ge "$have" "$want"; then return 0; fi
    [[ $(go_version_of "$cached") == "$want" ]] && return 0
    echo "deps: missing: Go >= $want (found ${have:-none}; hack/deps.sh bootstraps it)" >&2
    return 1
  fi
  go_ensure || { echo "deps: could not provide Go >= $want (see above)" >&2; return 1; }
  echo "deps: Go $(go_version_of "$(command -v go)") at $(command -v go)"
}

PKGS=(
  # toolchain
  build-essential cmake ninja-build pkg-config clang clang-format llvm libclang-rt-14-dev
  shellcheck # hack/lint.sh shell (ctest lint.shell)
  # libraries named in docs/ and ARCHITECTURE.md
  libcurl4-openssl-dev libjansson-dev libyaml-dev libssl-dev libuv1-dev
  libsqlite3-dev libarchive-dev libzstd-dev zlib1g-dev
  libprotobuf-c-dev protobuf-c-compiler libnghttp2-dev libmicrohttpd-dev
  # test tools: valgrind, a real OCI registry, htpasswd, openssl, curl, jq
  valgrind docker-registry apache2-utils openssl curl jq ca-certificates
  git procps psmisc iproute2 python3 xxd time zstd gzip tar coreutils util-linux
  # the real test node (hack/node.sh): libseccomp for runc (built from Go modules
  # with containerd 2.x by hack/testbin/build.sh), the busybox image's
  # content, a libc for the static pause binary, iptables for kubelet's chains
  libseccomp-dev pkg-config busybox-static musl-tools iptables
  python3-grpcio python3-protobuf # gRPC interop tests (tests/unit/test_grpc.c)
)
# The arm64 pieces: the same libraries as above, as :arm64 multiarch packages.
ARM64_PKGS=(
  crossbuild-essential-arm64 qemu-user-static
  libcurl4-openssl-dev:arm64 libjansson-dev:arm64 libyaml-dev:arm64 libssl-dev:arm64
  libuv1-dev:arm64 libsqlite3-dev:arm64 libarchive-dev:arm64 libzstd-dev:arm64
  zlib1g-dev:arm64 libprotobuf-c-dev:arm64 libnghttp2-dev:arm64 libmicrohttpd-dev:arm64
)
add_arch=0
if [[ $arm64 == 1 ]]; then
  PKGS+=("${ARM64_PKGS[@]}")
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    add_arch=1
  fi
fi

missing=()
for p in "${PKGS[@]}"; do
  if [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) != *'ok installed'* ]]; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "deps: all ${#PKGS[@]} Debian packages present"
  ensure_go "$check"
  exit
fi
if [[ $check == --check ]]; then
  echo "deps: missing: ${missing[*]}" >&2
  ensure_go --check || true
  exit 1
fi

SUDO=
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "deps: not root and no sudo; install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi

echo "deps: installing ${missing[*]}"
lists=/var/lib/apt/lists
stamp=/var/lib/apt/periodic/update-success-stamp
if [[ $add_arch -eq 1 ]]; then
  $SUDO dpkg --add-architecture arm64
fi
if [[ $add_arch -eq 1 ]] || [[ ! -e $stamp ]] || [[ -z $(find "$lists" -maxdepth 1 -name '*Packages*' -print -quit 2>/dev/null) ]] ||
  [[ $(find "$stamp" -mmin +1440 2>/dev/null) ]]; then
  $SUDO apt-get update -q
  $SUDO mkdir -p "$(dirname $stamp)" && $SUDO touch "$stamp"
fi
# docker-registry's postinst starts a service listening on every interface, and
# containerd's starts the system containerd; we never use those services
# (hack/cluster.sh and hack/node.sh run their own instances with configs of
# ours), so keep maintainer scripts from starting daemons.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [[ ! -e $policy ]]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee $policy >/dev/null
  $SUDO chmod +x $policy
  created_policy=1
fi
trap '[[ $created_policy -eq 1 ]] && $SUDO rm -f '"$policy" EXIT
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "deps: Debian packages done"
ensure_go
