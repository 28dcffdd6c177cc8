#!/usr/bin/env bash
# Builds tkm's own images without Docker and pushes them to a registry:
#
#   <registry>/tkm/<name>:<tag>   one image per binary (tkm-controller, tkm-agent,
#                                 tkm-csi, tkmctl), /usr/bin/<name> as entrypoint
#
# A distroless-like base, shared by all of them as one layer (pushed once,
# pulled once per node): the Debian shared libraries the binaries need (what
# ldd resolves, at the same paths, symlinks kept), the dynamic loader, the CA
# certificates (/etc/ssl/certs/ca-certificates.crt), /etc/passwd and
# /etc/group with root and the non-root user nonroot (65532), /tmp (1777).
# Nothing else: no shell, no package manager. Then one small layer per binary.
# The image runs as 65532:65532 by default (the DaemonSet runs the agent and
# the CSI driver as root, where they need it).
#
# Layers are reproducible tars (sorted names, mtime 0, uid/gid 0, gzip -n) made
# into OCI images by crane (hack/testbin/build.sh), as hack/images/build.sh does
# for the test node's images; the same binaries give the same digests.
#
# Multi-platform: NAME@arm64=PATH gives NAME an aarch64 binary too (hack/cross-arm64.sh).
# Its base holds the arm64 libraries of Debian's :arm64 multiarch packages (what
# the arm64 loader resolves under qemu-aarch64 -L / with LD_TRACE_LOADED_OBJECTS,
# at the same paths: /lib/ld-linux-aarch64.so.1, /lib/aarch64-linux-gnu/...).
# Every PATH must be an ELF of its platform's machine (readelf -h), else an error.
# Then each platform's image is pushed as <tag>-amd64 / <tag>-arm64 and <tag> is one
# OCI image index of both (crane index append); without @arm64, <tag> is the
# linux/amd64 image as before.
#
# Usage: hack/images/tkm.sh REGISTRY TAG NAME[@arm64]=PATH [NAME[@arm64]=PATH...]
#   REGISTRY  127.0.0.1:PORT (loopback registries only: plain http)
#   e.g. hack/images/tkm.sh 127.0.0.1:5000 0.1.0 tkmctl=build/cli/tkmctl \
#          tkmctl@arm64=build-arm64/cli/tkmctl tkm-agent=build/agent/tkm-agent
# Prints one line per image: NAME REF:TAG REF@DIGEST COMPRESSED_BYTES (of linux/amd64)
# and a last line: base <layer digest> COMPRESSED_BYTES UNCOMPRESSED_BYTES (amd64's;
# with arm64 also a line base-arm64 ... before it)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=hack/lib.sh
source "$here/../lib.sh"

reg=${1:-}
tag=${2:-}
[[ $reg =~ ^127\.0\.0\.1:[0-9]+$ ]] || die "tkm images: usage: $0 127.0.0.1:PORT TAG NAME=PATH... (loopback registries only)"
[[ $tag =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]] || die "tkm images: '$tag' is not a valid tag"
shift 2
(($# > 0)) || die "tkm images: no NAME=PATH given"
crane=$("$here/../testbin/build.sh" --path crane)
work=$(mktemp -d "${TMPDIR:-/tmp}/tkm-images-XXXXXX")
trap 'rm -rf "$work"' EXIT

mklayer() { # ROOTDIR OUT.tar.gz
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --format=gnu \
    -C "$1" -cf - . | gzip -n -9 >"$2"
}

# copy_path ROOT FILE: FILE at the same path under ROOT; a symlink is copied as
# a symlink and its target followed (so libfoo.so.1 -> libfoo.so.1.2.3 both exist).
copy_path() {
  local root=$1 f=$2 t
  while :; do
    mkdir -p "$root$(dirname "$f")"
    if [[ -L $f ]]; then
      t=$(readlink "$f")
      [[ -e $root$f || -L $root$f ]] || ln -s "$t" "$root$f"
      [[ $t == /* ]] || t=$(dirname "$f")/$t
      f=$t
    else
      [[ -e $root$f ]] || cp "$f" "$root$f"
      return
    fi
  done
}

names=() paths=() arm64_names=() arm64_paths=()
declare -A elf_machine=([amd64]='Advanced Micro Devices X86-64' [arm64]='AArch64')
for a in "$@"; do
  [[ $a == *=* ]] || die "tkm images: '$a' is not NAME=PATH"
  n=${a%%=*} p=${a#*=} arch=amd64
  if [[ $n == *@* ]]; then arch=${n#*@} n=${n%%@*}; fi
  [[ $arch == amd64 || $arch == arm64 ]] || die "tkm images: '$a': platform '$arch' is not amd64 or arm64"
  [[ $n =~ ^[a-z0-9][a-z0-9-]*$ ]] || die "tkm images: bad image name '$n'"
  [[ -x $p && -f $p ]] || die "tkm images: $p is not an executable file (build it first)"
  machine=$(LC_ALL=C readelf -h "$p" 2>/dev/null | sed -n 's/^ *Machine: *//p')
  [[ $machine == "${elf_machine[$arch]}" ]] ||
    die "tkm images: $p is not a linux/$arch binary (ELF machine '${machine:-none}', want '${elf_machine[$arch]}')"
  p=$(cd "$(dirname "$p")" && pwd)/$(basename "$p")
  if [[ $arch == arm64 ]]; then arm64_names+=("$n") arm64_paths+=("$p"); else names+=("$n") paths+=("$p"); fi
done
((${#names[@]} > 0)) || die "tkm images: no linux/amd64 binary given (NAME=PATH)"
for n in "${arm64_names[@]}"; do
  [[ " ${names[*]} " == *" $n "* ]] || die "tkm images: $n@arm64 given without its amd64 binary $n=PATH"
done
qemu=''
if ((${#arm64_names[@]} > 0)); then
  qemu=$(command -v qemu-aarch64-static || command -v qemu-aarch64) ||
    die "tkm images: arm64 images need qemu-aarch64 (hack/deps.sh --arm64)"
fi
version=$(sed -n 's/^project(tkm VERSION \([0-9.]*\).*/\1/p' "$here/../../CMakeLists.txt")

# platform ARCH SUFFIX NAME=PATH...: the base for ARCH and one image per binary, pushed
# to <name>:<tag>SUFFIX; sets out_lines (amd64: the printed lines) and prints nothing.
platform() {
  local arch=$1 sfx=$2 a n p base root ref sum bytes strip=strip
  shift 2
  local -a ns=() ps=()
  for a in "$@"; do ns+=("${a%%=*}") ps+=("${a#*=}"); done
  [[ $arch == arm64 ]] && strip=aarch64-linux-gnu-strip
  # --- the base: shared libraries, loader, CA certificates, users ---------------
  base=$work/base-$arch
  mkdir -p "$base"/{etc/ssl/certs,tmp,usr/bin}
  for p in "${ps[@]}"; do
    if [[ $arch == arm64 ]]; then
      LD_TRACE_LOADED_OBJECTS=1 "$qemu" -L / "$p" >"$work/ldd.txt" 2>&1 ||
        die "tkm images: listing the arm64 libraries of $p failed: $(cat "$work/ldd.txt")"
    else
      ldd "$p" >"$work/ldd.txt" 2>&1 || die "tkm images: ldd $p failed: $(cat "$work/ldd.txt")"
    fi
    ! grep -q 'not found' "$work/ldd.txt" || die "tkm images: $p needs libraries that are missing: $(grep 'not found' "$work/ldd.txt")"
    # "libx.so => /lib/.../libx.so (0x...)" and "/lib64/ld-linux-x86-64.so.2 (0x...)"
    while read -r lib; do
      copy_path "$base" "$lib"
    done < <(sed -n 's/.*=> \(\/[^ ]*\) (0x.*/\1/p; s/^[[:space:]]*\(\/[^ ]*\) (0x.*/\1/p' "$work/ldd.txt")
  done
  ca=/etc/ssl/certs/ca-certificates.crt
  [[ -s $ca ]] || die "tkm images: $ca is missing (apt-get install ca-certificates)"
  cp "$ca" "$base$ca"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin\n' >"$base/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' >"$base/etc/group"
  find "$base" -type d -exec chmod 0755 {} +
  chmod 1777 "$base/tmp"
  mklayer "$base" "$work/base-$arch.tar.gz"
  base_sum=sha256:$(sha256sum "$work/base-$arch.tar.gz" | cut -d' ' -f1)
  base_bytes=$(stat -c %s "$work/base-$arch.tar.gz")
  base_raw=$(du -sb "$base" | cut -f1)
  # --- one image per binary -----------------------------------------------------
  out_lines=()
  for i in "${!ns[@]}"; do
    n=${ns[$i]} p=${ps[$i]}
    root=$work/bin-$arch-$n
    mkdir -p "$root/usr/bin"
    cp "$p" "$root/usr/bin/$n"
    "$strip" --strip-debug "$root/usr/bin/$n" 2>/dev/null || true
    chmod 0755 "$root" "$root/usr" "$root/usr/bin" "$root/usr/bin/$n"
    mklayer "$root" "$work/$arch-$n.tar.gz"
    ref=$reg/tkm/$n:$tag$sfx
    sum=sha256:$(sha256sum "$work/$arch-$n.tar.gz" | cut -d' ' -f1)
    if [[ $("$crane" config "$ref" 2>/dev/null | jq -r '.config.Labels["io.tkm.image.layer"] // ""' 2>/dev/null) != "$base_sum,$sum" ]]; then
      "$crane" append --oci-empty-base -f "$work/base-$arch.tar.gz" -f "$work/$arch-$n.tar.gz" -t "$ref" \
        >/dev/null 2>"$work/crane.log" || { cat "$work/crane.log" >&2; die "tkm images: crane append $ref failed"; }
      "$crane" mutate "$ref" --set-platform "linux/$arch" --entrypoint "/usr/bin/$n" \
        --user 65532:65532 --workdir / \
        -l "io.tkm.image.layer=$base_sum,$sum" \
        -l "org.opencontainers.image.title=$n" \
        -l "org.opencontainers.image.version=${version:-unknown}" \
        -t "$ref" >/dev/null 2>"$work/crane.log" || { cat "$work/crane.log" >&2; die "tkm images: crane mutate $ref failed"; }
    fi
    bytes=$("$crane" manifest "$ref" | jq '[.layers[].size] | add')
    out_lines+=("$n $ref $reg/tkm/$n@$("$crane" digest "$ref") $bytes")
  done
}

amd64_args=() arm64_args=()
for i in "${!names[@]}"; do amd64_args+=("${names[$i]}=${paths[$i]}"); done
for i in "${!arm64_names[@]}"; do arm64_args+=("${arm64_names[$i]}=${arm64_paths[$i]}"); done
if ((${#arm64_args[@]} == 0)); then
  platform amd64 '' "${amd64_args[@]}"
  printf '%s\n' "${out_lines[@]}"
  echo "base $base_sum $base_bytes $base_raw"
  exit 0
fi
platform arm64 -arm64 "${arm64_args[@]}"
echo "base-arm64 $base_sum $base_bytes $base_raw"
platform amd64 -amd64 "${amd64_args[@]}"
# <tag>: one OCI image index per image over its platforms' manifests (by digest).
for line in "${out_lines[@]}"; do
  read -r n _ _ bytes <<<"$line"
  ref=$reg/tkm/$n:$tag
  ms=(-m "$reg/tkm/$n@$("$crane" digest "$ref-amd64")")
  if [[ " ${arm64_names[*]} " == *" $n "* ]]; then ms+=(-m "$reg/tkm/$n@$("$crane" digest "$ref-arm64")"); fi
  "$crane" index append "${ms[@]}" -t "$ref" >/dev/null 2>"$work/crane.log" ||
    { cat "$work/crane.log" >&2; die "tkm images: crane index append $ref failed"; }
  echo "$n $ref $reg/tkm/$n@$("$crane" digest "$ref") $bytes"
done
echo "base $base_sum $base_bytes $base_raw"
