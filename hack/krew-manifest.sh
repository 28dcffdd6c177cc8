#!/usr/bin/env bash
# The krew side of a release of kubectl-tkm (plugins/tkm.yaml; docs/install.md).
#
#   hack/krew-manifest.sh archive VERSION ARCH BINARY OUTDIR
#       writes OUTDIR/kubectl-tkm_VERSION_linux_ARCH.tar.gz holding BINARY as kubectl-tkm
#       (and LICENSE when the repository has one), reproducibly (owner 0, mtime 0, sorted,
#       gzip -n); prints its path.
#   hack/krew-manifest.sh fill VERSION BASE_URL ARCHIVE...
#       prints plugins/tkm.yaml with spec.version VERSION and, for each platform, uri
#       BASE_URL/<its archive's name> and sha256 of that archive (the one named ..._ARCH.tar.gz).
#       Every platform of the manifest needs its archive, and every archive a platform.
# VERSION is a semver with its v (v0.2.0); ARCH is amd64 or arm64.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
manifest=${TKM_KREW_MANIFEST:-$root/plugins/tkm.yaml}
die() { echo "krew-manifest: $*" >&2; exit 1; }
check_version() {
  [[ $1 =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || die "version '$1' is not v<semver> (v0.2.0)"
}

archive() {
  [[ $# -eq 4 ]] || die "usage: archive VERSION ARCH BINARY OUTDIR"
  local version=$1 arch=$2 bin=$3 out=$4
  check_version "$version"
  [[ $arch =~ ^(amd64|arm64)$ ]] || die "arch '$arch' is not amd64 or arm64"
  [[ -x $bin ]] || die "no executable $bin"
  local stage
  stage=$(mktemp -d "${TMPDIR:-/tmp}/tkm-krew-XXXXXX")
  trap 'rm -rf "$stage"' RETURN
  install -m 0755 "$bin" "$stage/kubectl-tkm"
  [[ -f $root/LICENSE ]] && install -m 0644 "$root/LICENSE" "$stage/LICENSE"
  mkdir -p "$out"
  local f=$out/kubectl-tkm_${version}_linux_${arch}.tar.gz
  (cd "$stage" && find . -mindepth 1 -printf '%P\n' | LC_ALL=C sort |
    tar --owner=0 --group=0 --numeric-owner --mtime=@0 --no-recursion -cf - -T -) | gzip -n >"$f"
  echo "$f"
}

fill() {
  [[ $# -ge 3 ]] || die "usage: fill VERSION BASE_URL ARCHIVE..."
  local version=$1 base=${2%/}
  shift 2
  check_version "$version"
  [[ $base == https://* ]] || die "base URL '$base' is not https://"
  local -A sum=() name=()
  local a arch
  for a in "$@"; do
    [[ -f $a ]] || die "no archive $a"
    [[ $(basename "$a") =~ ^kubectl-tkm_${version//./\\.}_linux_([a-z0-9]+)\.tar\.gz$ ]] ||
      die "$a is not named kubectl-tkm_${version}_linux_<arch>.tar.gz"
    arch=${BASH_REMATCH[1]}
    [[ -z ${sum[$arch]:-} ]] || die "two archives for $arch"
    sum[$arch]=$(sha256sum "$a" | cut -d' ' -f1)
    name[$arch]=$(basename "$a")
  done
  local archs=" "
  for arch in "${!sum[@]}"; do archs+="$arch=${sum[$arch]}=${name[$arch]} "; done
  # Platform blocks: "matchLabels: {os: linux, arch: X}" then that platform's uri and sha256.
  awk -v version="$version" -v base="$base" -v archs="$archs" '
    BEGIN { n = split(archs, l, " "); for (i = 1; i <= n; i++) { split(l[i], p, "="); s[p[1]] = p[2]; f[p[1]] = p[3] } }
    /^  version: / { print "  version: " version; next }
    /matchLabels: \{os: linux, arch: / { a = $0; sub(/.*arch: /, "", a); sub(/\}.*/, "", a)
      if (!(a in s)) { print "krew-manifest: no archive for linux/" a > "/dev/stderr"; bad = 1 }
      seen[a] = 1 }
    /^    uri: / { print "    uri: " base "/" f[a]; next }
    /^    sha256: / { print "    sha256: \"" s[a] "\""; next }
    { print }
    END { for (a in s) if (!(a in seen)) { print "krew-manifest: no platform linux/" a " in the manifest" > "/dev/stderr"; bad = 1 }
      exit bad }' "$manifest"
}

case ${1:-} in
  archive) shift; archive "$@" ;;
  fill) shift; fill "$@" ;;
  *) die "usage: $0 archive VERSION ARCH BINARY OUTDIR | fill VERSION BASE_URL ARCHIVE..." ;;
esac
