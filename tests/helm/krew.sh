#!/usr/bin/env bash
# helm.krew (ctest, no cluster, no network): plugins/tkm.yaml, kubectl-tkm's krew manifest.
#   - krew's own validator (validate-krew-manifest, what krew-index's CI runs; -skip-install, as
#     installing would download the placeholder URIs) accepts the manifest as committed, and
#     refuses a copy with a malformed sha256, with two platforms selecting linux/amd64, and with
#     a name that is not the file's;
#   - the release path: hack/krew-manifest.sh archive packs the kubectl-tkm that `make` built
#     (argument 1) for linux/amd64 and linux/arm64, fill writes their uri and sha256 into the
#     manifest; the validator accepts the filled manifest; krew itself installs the plugin from
#     it offline (--archive) and the installed kubectl-tkm runs; a tampered archive is refused
#     (sha256 mismatch); fill refuses a missing platform and a misnamed archive.
#     (The arm64 archive holds the same amd64 binary here: only its packing and its entry in the
#     manifest are checked.)
# krew and validate-krew-manifest are built from Go modules by hack/testbin/build.sh (once, cached).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
manifest=$root/plugins/tkm.yaml
bin=${1:-}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tkm-helm-krew-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
checks=0
fail() { echo "FAIL [helm.krew]: $*" >&2; exit 1; }
pass() { checks=$((checks + 1)); echo "ok: $*"; }

[[ -n $bin && -x $bin ]] || fail "usage: krew.sh PATH-TO-kubectl-tkm (the built binary; got '$bin')"
[[ -s $manifest ]] || fail "missing $manifest"
validate=$("$root/hack/testbin/build.sh" --path validate-krew-manifest) || fail "cannot build validate-krew-manifest"
krew=$("$root/hack/testbin/build.sh" --path krew) || fail "cannot build krew"
[[ -x $validate && -x $krew ]] || fail "no validate-krew-manifest at $validate or krew at $krew"
version=$(sed -n 's/^  version: //p' "$manifest")

# valid FILE: krew's validator accepts FILE (its output on failure).
valid() { "$validate" -manifest "$1" -skip-install >"$tmp/v.out" 2>&1; }
# invalid WHAT WANT SED: a copy of the manifest changed by SED is refused, the message naming WANT.
invalid() {
  mkdir -p "$tmp/bad" && sed "$3" "$manifest" >"$tmp/bad/tkm.yaml"
  cmp -s "$tmp/bad/tkm.yaml" "$manifest" && fail "$1: the sed changed nothing"
  if valid "$tmp/bad/tkm.yaml"; then fail "$1: the validator accepted it"; fi
  grep -q "$2" "$tmp/v.out" || fail "$1: the validator's message does not name '$2': $(cat "$tmp/v.out")"
  pass "refused: $1"
}

echo "--- krew's validator on the manifest as committed (placeholders)"
valid "$manifest" || fail "validate-krew-manifest refused $manifest: $(cat "$tmp/v.out")"
grep -q 'no overlapping spec.platform' "$tmp/v.out" || fail "the validator did not run its checks: $(cat "$tmp/v.out")"
[[ $(grep -c 'matchLabels: {os: linux, arch: \(amd64\|arm64\)}' "$manifest") == 2 ]] ||
  fail "the manifest does not have exactly the platforms linux/amd64 and linux/arm64"
pass "validate-krew-manifest accepts plugins/tkm.yaml ($version; linux/amd64, linux/arm64)"
invalid "a malformed sha256" 'sha256.*not valid' '0,/sha256: "0*"/s//sha256: "abc"/'
invalid "two platforms for linux/amd64" 'overlapping' 's/arch: arm64/arch: amd64/'
invalid "a name that is not the file's" 'should be named' 's/^  name: tkm$/  name: tkm2/'

echo "--- the release path: archives, fill, install with krew"
for a in amd64 arm64; do
  "$root/hack/krew-manifest.sh" archive "$version" "$a" "$bin" "$tmp/dl" >/dev/null || fail "archive $a"
done
amd=$tmp/dl/kubectl-tkm_${version}_linux_amd64.tar.gz
[[ $(tar tzf "$amd") == kubectl-tkm ]] || fail "the archive does not hold kubectl-tkm at the top: $(tar tzf "$amd")"
mkdir -p "$tmp/filled"
"$root/hack/krew-manifest.sh" fill "$version" https://example.invalid/tkm/releases "$tmp"/dl/*.tar.gz \
  >"$tmp/filled/tkm.yaml" || fail "fill failed"
sum=$(sha256sum "$amd" | cut -d' ' -f1)
for want in "sha256: \"$sum\"" "uri: https://example.invalid/tkm/releases/kubectl-tkm_${version}_linux_arm64.tar.gz"; do
  grep -qF "$want" "$tmp/filled/tkm.yaml" || fail "fill did not write '$want': $(cat "$tmp/filled/tkm.yaml")"
done
[[ $(diff "$manifest" "$tmp/filled/tkm.yaml" | grep -c '^>') == 4 ]] || fail "fill changed more than 2 uris and 2 sums"
valid "$tmp/filled/tkm.yaml" || fail "the validator refused the filled manifest: $(cat "$tmp/v.out")"
pass "hack/krew-manifest.sh fills uri and sha256 of both archives; the validator accepts the result"
# install ARCHIVE: krew installs the plugin from the filled manifest and ARCHIVE, into a fresh root.
install() {
  rm -rf "$tmp/root"
  env -i PATH=/usr/bin:/bin HOME="$tmp" KREW_ROOT="$tmp/root" KREW_OS=linux KREW_ARCH=amd64 \
    "$krew" install --manifest="$tmp/filled/tkm.yaml" --archive="$1" </dev/null >"$tmp/install.out" 2>&1
}
install "$amd" || fail "krew install: $(cat "$tmp/install.out")"
out=$("$tmp/root/bin/kubectl-tkm" --help 2>&1) || fail "the installed kubectl-tkm does not run: $out"
[[ $out == *"kubectl tkm"* ]] || fail "the installed kubectl-tkm's help: $out"
pass "krew installs kubectl-tkm from the filled manifest (offline) and it runs"
cp "$amd" "$tmp/tampered.tar.gz" && printf x >>"$tmp/tampered.tar.gz"
if install "$tmp/tampered.tar.gz"; then fail "krew installed an archive whose sha256 differs"; fi
grep -q 'checksum does not match' "$tmp/install.out" || fail "krew's refusal does not name the checksum: $(cat "$tmp/install.out")"
pass "krew refuses an archive whose sha256 differs from the manifest's"
if "$root/hack/krew-manifest.sh" fill "$version" https://example.invalid "$amd" >/dev/null 2>"$tmp/e"; then
  fail "fill accepted a manifest platform without an archive"
fi
grep -q 'no archive for linux/arm64' "$tmp/e" || fail "fill's message: $(cat "$tmp/e")"
cp "$amd" "$tmp/kubectl-tkm_v9.9.9_linux_amd64.tar.gz"
if "$root/hack/krew-manifest.sh" fill "$version" https://example.invalid "$tmp/kubectl-tkm_v9.9.9_linux_amd64.tar.gz" \
  >/dev/null 2>"$tmp/e"; then fail "fill accepted an archive of another version"; fi
grep -q 'is not named' "$tmp/e" || fail "fill's message: $(cat "$tmp/e")"
pass "fill refuses a platform without its archive and an archive of another version"
echo "PASS [helm.krew]: $checks checks"
