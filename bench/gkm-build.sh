#!/usr/bin/env bash
# bench/gkm-build.sh - builds upstream GKM's agent and operator (the baselines
# of bench/agent.sh and bench/controller.sh) from the bare mirror of
# redhat-et/GKM, once per commit, into a cache directory outside the clone.
#
# Usage: bench/gkm-build.sh MIRROR     prints the directory holding
#                                      gkm-agent, gkm-operator and crds/
#   MIRROR       a git repository (bare or not) holding GKM's history: a clone of
#                github.com/redhat-et/GKM, wherever it is on this machine.
#                Required; GKM_MIRROR in the environment gives it instead (how
#                bench/agent.sh and bench/controller.sh pass it on).
#   env: GKM_COMMIT  (default f0e65de4, the snapshot docs/ and the reference read)
#        TKM_CACHE   (default ~/.cache/tkm; output in $TKM_CACHE/gkm/<commit>/)
#
# How GKM is built here (what its Containerfile.gkm-agent.no-gpu does, minus
# the Debian packages this machine lacks):
#   - its own vendor/ tree (-mod=vendor): nothing of GKM is fetched from the
#     module proxy (which refuses GKM's module anyway);
#   - CGO_ENABLED=1, as upstream's Makefile: go-nvml (NVML through dlopen)
#     needs cgo even though the agent runs with NO_GPU=true (stub GPUs, no
#     library opened);
#   - tags containers_image_openpgp (pure-Go OpenPGP instead of gpgme: no
#     libgpgme-dev here), exclude_graphdriver_btrfs and
#     exclude_graphdriver_devicemapper (no libbtrfs/devmapper headers; GKM never
#     uses container storage drivers), libsqlite3 (link Debian's libsqlite3
#     instead of go-sqlite3's bundled amalgamation: the mirror lacks
#     vendor/github.com/mattn/go-sqlite3/sqlite3-binding.c, an 8 MB blob the
#     snapshot left out, as it left out two other large files that no build
#     uses). Needs gcc and libsqlite3-dev.
#   - one build-time edit of the extracted cmd/main.go (never of anything in
#     this repository): upstream's operator always registers its two
#     admission webhooks, whose server then listens on :9443 on every
#     interface and exits when cert-manager's certificate is missing. The
#     edit adds kubebuilder's usual switch: with ENABLE_WEBHOOKS=false the
#     operator registers no webhook and starts no webhook server (the
#     benchmarks run it so: "GKM's operator (webhooks off)"). The edit is
#     checked: the build fails if the two registrations are not found.
# The source is extracted blob by blob from the mirror into a temporary
# directory (git archive stops at the first missing blob), which is removed
# afterwards. GKM's code and binaries never enter this repository.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
commit=${GKM_COMMIT:-f0e65de4}
cache=${TKM_CACHE:-$HOME/.cache/tkm}
# shellcheck source=hack/lib.sh
source "$repo/hack/lib.sh" # go_ensure
die() { echo "gkm-build: $*" >&2; exit 1; } # (after lib.sh, whose die says "error:")

(($# <= 1)) || die "usage: bench/gkm-build.sh MIRROR (one argument: a clone of github.com/redhat-et/GKM)"
mirror=${1:-${GKM_MIRROR:-}}
[[ -n $mirror ]] || die "no GKM source: give a clone of github.com/redhat-et/GKM (bare or not) as the argument or in GKM_MIRROR, e.g. git clone --bare https://github.com/redhat-et/GKM gkm.git; bench/gkm-build.sh gkm.git"
mirror=$(git -C "$mirror" rev-parse --absolute-git-dir 2>/dev/null) ||
  die "GKM source ${1:-${GKM_MIRROR:-}} is not a git repository (want a clone of github.com/redhat-et/GKM)"
full=$(git --git-dir="$mirror" rev-parse --verify -q "$commit^{commit}") ||
  die "commit $commit is not in $mirror"
out=$cache/gkm/${full:0:8}
built() { [[ -x $out/gkm-agent && -x $out/gkm-operator && -d $out/crds && -f $out/.built-v2 ]]; }
if built; then
  echo "$out"
  exit 0
fi
mkdir -p "$cache/locks" "$out"
exec 9>"$cache/locks/gkm-${full:0:8}.lock"
flock 9
if built; then
  echo "$out" # another run built it while we waited
  exit 0
fi
command -v gcc >/dev/null || die "gcc is needed (GKM builds with cgo)"
[[ -f /usr/include/sqlite3.h ]] || die "libsqlite3-dev is needed (apt-get install libsqlite3-dev)"
go_ensure || die "no Go to build GKM with (hack/deps.sh bootstraps one)"

src=$(mktemp -d "${TMPDIR:-/tmp}/tkm-gkm-src-XXXXXX")
trap 'rm -rf "$src"' EXIT
echo "gkm-build: extracting GKM ${full:0:8} from $mirror into $src..." >&2
git --git-dir="$mirror" ls-tree -r -z "$full" | python3 -c '
import os, subprocess, sys
mirror, dest = sys.argv[1], sys.argv[2]
cat = subprocess.Popen(["git", "--git-dir=" + mirror, "cat-file", "--batch"],
                       stdin=subprocess.PIPE, stdout=subprocess.PIPE)
missing = []
for entry in sys.stdin.buffer.read().split(b"\0"):
    if not entry:
        continue
    meta, path = entry.split(b"\t", 1)
    mode, kind, oid = meta.split()
    if kind != b"blob":
        continue
    cat.stdin.write(oid + b"\n")
    cat.stdin.flush()
    head = cat.stdout.readline().split()
    if head[1] == b"missing":
        missing.append(path.decode())
        continue
    body = cat.stdout.read(int(head[2]))
    cat.stdout.read(1)
    p = os.path.join(dest, path.decode())
    os.makedirs(os.path.dirname(p), exist_ok=True)
    if mode == b"120000":
        os.symlink(body.decode(), p)
        continue
    with open(p, "wb") as f:
        f.write(body)
    if mode == b"100755":
        os.chmod(p, 0o755)
for m in missing:
    print("gkm-build: blob missing in the mirror, skipped:", m, file=sys.stderr)
' "$mirror" "$src"

# ENABLE_WEBHOOKS=false: skip both SetupWebhookWithManager calls.
python3 - "$src/cmd/main.go" <<'PY' || die "cannot add the ENABLE_WEBHOOKS switch to GKM's cmd/main.go"
import re, sys
p = sys.argv[1]
s = open(p).read()
pat = re.compile(r"\bif err = (\(&gkmv1alpha1\.\w+\{\}\)\.SetupWebhookWithManager\(mgr\); err != nil \{)")
s, n = pat.subn(r'if os.Getenv("ENABLE_WEBHOOKS") == "false" {\n\t} else if err = \1', s)
if n != 2:
    sys.exit("expected 2 webhook registrations in %s, found %d" % (p, n))
open(p, "w").write(s)
PY

log=$cache/logs/gkm-${full:0:8}.log
mkdir -p "$(dirname "$log")"
tags="containers_image_openpgp exclude_graphdriver_btrfs exclude_graphdriver_devicemapper libsqlite3"
for what in agent:./agent operator:./cmd; do
  name=gkm-${what%%:*} pkg=${what#*:}
  echo "gkm-build: go build $pkg -> $out/$name (log: $log)..." >&2
  if ! (cd "$src" && GOFLAGS=-mod=vendor CGO_ENABLED=1 GOMAXPROCS=${GOMAXPROCS:-2} \
    go build -p 2 -trimpath -tags "$tags" -o "$out/$name.tmp" "$pkg") >>"$log" 2>&1; then
    tail -20 "$log" >&2
    die "go build of GKM's $pkg failed (full log: $log)"
  fi
  mv "$out/$name.tmp" "$out/$name"
done
rm -rf "$out/crds"
cp -r "$src/config/crd/bases" "$out/crds"
echo "$full" >"$out/COMMIT"
touch "$out/.built-v2"
echo "gkm-build: built $out/gkm-agent and $out/gkm-operator ($(go version | awk '{ print $3 }'))" >&2
echo "$out"
