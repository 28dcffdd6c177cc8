#!/usr/bin/env bash
# images.multiarch (ctest in the linux/arm64 cross build, labels arm64 and images; no cluster,
# loopback only): `make images ARM64_BUILD=...`, i.e. hack/images/all.sh AMD64_BUILD REGISTRY TAG
# ARM64_BUILD, pushes to a throwaway registry (crane registry serve on 127.0.0.1) one OCI image
# index per image (tkm-csi, tkm-agent, tkm-controller, tkmctl). Checked with crane, readelf and
# qemu-aarch64-static:
#   - each index is an OCI image index of exactly linux/amd64 and linux/arm64, its digest is
#     the one printed; each platform's config says its platform, entrypoint and user, and its
#     first layer is that platform's shared base (the base/base-arm64 lines);
#   - each platform's root filesystem (crane export): the binary and every ELF in it (loader,
#     libraries) are of that platform's ELF machine;
#   - the binary runs from its image's root filesystem alone (chroot, as 65532): amd64 natively,
#     arm64 under the static qemu-aarch64 copied into that root; --help prints the usage;
#   - a second build gives the same digests; an arm64 path that is an amd64 binary, an arm64
#     binary without its amd64 one, an unknown platform and an incomplete arm64 build are refused.
# Usage: multiarch.sh AMD64_BUILD_DIR ARM64_BUILD_DIR (tests/CMakeLists.txt passes both).
set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
amd64=${1:-} arm64=${2:-}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tkm-images-multiarch-XXXXXX")
regpid=''
cleanup() {
  [[ -z $regpid ]] || kill "$regpid" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
checks=0
fail() { echo "FAIL [images.multiarch]: $*" >&2; exit 1; }
pass() { checks=$((checks + 1)); echo "ok: $*"; }

[[ -d $amd64 && -d $arm64 ]] || fail "usage: multiarch.sh AMD64_BUILD_DIR ARM64_BUILD_DIR (got '$amd64' '$arm64')"
[[ -x $amd64/csi/tkm-csi ]] || fail "no linux/amd64 build in $amd64 (cmake -S . -B build -G Ninja && ninja -C build)"
qemu=$(command -v qemu-aarch64-static) || fail "no qemu-aarch64-static (hack/deps.sh --arm64)"
crane=$("$src/hack/testbin/build.sh" --path crane) || fail "cannot build crane"
[[ $(id -u) == 0 ]] || fail "needs root (chroot into the images' root filesystems)"

# A throwaway registry on a loopback port the kernel picks; its log names the port.
"$crane" registry serve --address 127.0.0.1:0 >"$tmp/registry.log" 2>&1 &
regpid=$!
port=''
for _ in $(seq 300); do
  port=$(sed -n 's/.*serving on port \([0-9]*\).*/\1/p' "$tmp/registry.log")
  [[ -z $port ]] || break
  kill -0 "$regpid" 2>/dev/null || fail "crane registry serve exited: $(cat "$tmp/registry.log")"
  sleep 0.1
done
[[ -n $port ]] || fail "crane registry serve did not say its port in 30 s: $(cat "$tmp/registry.log")"
reg=127.0.0.1:$port tag=multiarch-$RANDOM

build() { "$src/hack/images/all.sh" "$amd64" "$reg" "$tag" "$arm64" 2>"$tmp/build.err"; }
out=$(build) || fail "hack/images/all.sh failed: $(cat "$tmp/build.err")"
echo "$out"
declare -A base=([amd64]=$(awk '$1 == "base" {print $2}' <<<"$out") [arm64]=$(awk '$1 == "base-arm64" {print $2}' <<<"$out"))
[[ ${base[amd64]} == sha256:* && ${base[arm64]} == sha256:* ]] || fail "no base and base-arm64 lines in: $out"
[[ ${base[amd64]} != "${base[arm64]}" ]] || fail "the arm64 base is the amd64 one"
pass "two shared bases, one per platform"
declare -A machine=([amd64]='Advanced Micro Devices X86-64' [arm64]='AArch64')
cp "$qemu" "$tmp/qemu-aarch64-static"

for n in tkm-csi tkm-agent tkm-controller tkmctl; do
  line=$(awk -v n="$n" '$1 == n' <<<"$out")
  [[ -n $line ]] || fail "no line for $n in: $out"
  read -r _ ref digref _ <<<"$line"
  [[ $ref == "$reg/tkm/$n:$tag" ]] || fail "$n: pushed as '$ref'"
  idx=$("$crane" manifest "$ref") || fail "$n: crane manifest $ref"
  [[ $(jq -r .mediaType <<<"$idx") == application/vnd.oci.image.index.v1+json ]] ||
    fail "$n: $ref is not an OCI image index: $(jq -c '{mediaType}' <<<"$idx")"
  [[ $("$crane" digest "$ref") == "${digref#*@}" ]] || fail "$n: the printed digest $digref is not $ref's"
  plats=$(jq -r '[.manifests[] | .platform.os + "/" + .platform.architecture] | sort | join(" ")' <<<"$idx")
  [[ $plats == "linux/amd64 linux/arm64" ]] || fail "$n: the index's platforms are '$plats'"
  pass "$n: one OCI index of linux/amd64 and linux/arm64"
  for arch in amd64 arm64; do
    d=$(jq -r --arg a "$arch" '.manifests[] | select(.platform.architecture == $a) | .digest' <<<"$idx")
    m=$reg/tkm/$n@$d
    cfg=$("$crane" config "$m")
    [[ $(jq -r '.os + "/" + .architecture' <<<"$cfg") == "linux/$arch" ]] || fail "$n/$arch: config says $(jq -r '.os + "/" + .architecture' <<<"$cfg")"
    [[ $(jq -c .config.Entrypoint <<<"$cfg") == "[\"/usr/bin/$n\"]" ]] || fail "$n/$arch: entrypoint $(jq -c .config.Entrypoint <<<"$cfg")"
    [[ $(jq -r .config.User <<<"$cfg") == 65532:65532 ]] || fail "$n/$arch: user $(jq -r .config.User <<<"$cfg")"
    [[ $("$crane" manifest "$m" | jq -r '.layers[0].digest') == "${base[$arch]}" ]] || fail "$n/$arch: the first layer is not the $arch base"
    root=$tmp/root-$n-$arch
    mkdir -p "$root"
    "$crane" export "$m" - | tar -x -C "$root"
    got=$(LC_ALL=C readelf -h "$root/usr/bin/$n" | sed -n 's/^ *Machine: *//p')
    [[ $got == "${machine[$arch]}" ]] || fail "$n/$arch: /usr/bin/$n is ELF machine '$got'"
    elves=0
    while IFS= read -r -d '' f; do
      [[ $(head -c4 "$f" | od -An -tx1 | tr -d ' ') == 7f454c46 ]] || continue
      got=$(LC_ALL=C readelf -h "$f" | sed -n 's/^ *Machine: *//p')
      [[ $got == "${machine[$arch]}" ]] || fail "$n/$arch: ${f#"$root"} is ELF machine '$got'"
      elves=$((elves + 1))
    done < <(find "$root" -type f -print0)
    ((elves >= 3)) || fail "$n/$arch: only $elves ELF files (binary, loader, libc at least)"
    pass "$n/$arch: config linux/$arch, its base first, $elves ELF files all ${machine[$arch]}"
    [[ ! -e $root/bin/sh && ! -e $root/usr/bin/sh ]] || fail "$n/$arch: the image has a shell"
    run=("/usr/bin/$n" --help)
    if [[ $arch == arm64 ]]; then
      cp "$tmp/qemu-aarch64-static" "$root/qemu-aarch64-static"
      run=(/qemu-aarch64-static "${run[@]}")
    fi
    usage=$(chroot --userspec=65532:65532 "$root" "${run[@]}" 2>&1) || fail "$n/$arch: ${run[*]} in its root filesystem failed: $usage"
    [[ $usage == *sage* ]] || fail "$n/$arch: --help printed no usage: $usage"
    pass "$n/$arch: runs from its own root filesystem as 65532 (${run[0]})"
  done
done

again=$(build) || fail "second build failed: $(cat "$tmp/build.err")"
[[ $again == "$out" ]] || fail "a second build gives other digests: $again"
pass "reproducible: the same binaries give the same indexes"

bad() { # WHAT WANT ARGS...: hack/images/tkm.sh ARGS fails saying WANT
  local what=$1 want=$2
  shift 2
  if "$src/hack/images/tkm.sh" "$reg" "$tag-bad" "$@" >"$tmp/bad.out" 2>&1; then fail "$what: accepted"; fi
  grep -q -- "$want" "$tmp/bad.out" || fail "$what: the error does not say '$want': $(cat "$tmp/bad.out")"
  pass "$what: refused ($want)"
}
bad "an amd64 binary as @arm64" "is not a linux/arm64 binary" tkmctl="$amd64/cli/tkmctl" tkmctl@arm64="$amd64/cli/tkmctl"
bad "an arm64 binary as amd64" "is not a linux/amd64 binary" tkmctl="$arm64/cli/tkmctl"
bad "@arm64 without the amd64 binary" "without its amd64 binary" tkm-csi="$amd64/csi/tkm-csi" tkmctl@arm64="$arm64/cli/tkmctl"
bad "an unknown platform" "is not amd64 or arm64" tkmctl="$amd64/cli/tkmctl" tkmctl@riscv64="$arm64/cli/tkmctl"
mkdir -p "$tmp/partial/csi"
cp "$arm64/csi/tkm-csi" "$tmp/partial/csi/"
if "$src/hack/images/all.sh" "$amd64" "$reg" "$tag-bad" "$tmp/partial" >"$tmp/bad.out" 2>&1; then fail "an incomplete arm64 build: accepted"; fi
grep -q "agent/tkm-agent is missing" "$tmp/bad.out" || fail "an incomplete arm64 build: $(cat "$tmp/bad.out")"
pass "an incomplete arm64 build is refused, naming the missing binary"
echo "images.multiarch: $checks checks passed"
