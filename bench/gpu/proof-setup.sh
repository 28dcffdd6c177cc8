# bench/gpu/proof-setup.sh - the setup bench/gpu/capture-proof.sh and variants-proof.sh
# share. Sourced, not run: source "$here/proof-setup.sh" "$@"
# The script sets first: src (the repository), here (bench/gpu), proof (its name:
# "capture-proof", in messages and as the bundle .device/<proof>.tar.gz), out (the default
# results directory; OUT in the environment wins, then --out), work_name (the work dir's
# prefix under TMPDIR) and bins (the binaries it needs under TKM_BUILD_DIR).
# This file then:
#   - parses [--fake] [--n N] [--out DIR] [--pack] into fake, n (default 2), out, pack;
#   - runs the script again in a private mount namespace (every mount goes with it);
#   - makes out/logs (out made absolute), exports TKM_FIXTURES, sources tests/e2e/csi/env.sh;
#   - makes work (mode 755) and the EXIT trap: stop tkm-csi and the agent, copy their logs
#     into out/logs, unmount everything under work, with --pack move everything but
#     summary.txt, runs.tsv and preflight.txt into out/results.tar.gz, remove work;
#   - finds the binaries: TKM_BUILD_DIR, else the bundle .device/<proof>.tar.gz, else build/;
#     a missing one stops the script; tkmctl is TKM_BUILD_DIR/cli/tkmctl;
#   - finds python (py): TKM_PYTHON; with --fake python3, else the first of python3 and
#     /opt/torch/.venv/bin/python with torch and triton;
#   - defines row (a tab-separated line appended to out/runs.tsv) and count DIR [GLOB]
#     (regular files under DIR).
# shellcheck disable=SC2154 # src, here, proof, out, work_name, bins: set by the script
argv=("$@")
fake=0 pack=0 n=2
out=${OUT:-$out}
# shellcheck disable=SC2034 # n: used by the script
while [[ $# -gt 0 ]]; do
  case $1 in
  --fake) fake=1 ;;
  --n) n=$2; shift ;;
  --out) out=$2; shift ;;
  --pack) pack=1 ;;
  *) echo "usage: $proof.sh [--fake] [--n N] [--out DIR] [--pack]" >&2; exit 2 ;;
  esac
  shift
done
# The whole run in a private mount namespace: every mount goes with it.
if [[ -z ${TKM_CSI_UNSHARED:-} ]]; then
  exec env TKM_CSI_UNSHARED=1 unshare -m --propagation private bash "$0" "${argv[@]}"
fi
mkdir -p "$out/logs"
out=$(cd "$out" && pwd)
export TKM_FIXTURES=${TKM_FIXTURES:-$src/tests/fixtures}
# shellcheck source=tests/e2e/csi/env.sh
source "$src/tests/e2e/csi/env.sh"

work=$(mktemp -d "${TMPDIR:-/tmp}/$work_name-XXXXXX")
chmod 755 "$work"
cleanup() {
  local m
  csi_driver_stop >/dev/null 2>&1 || true
  csi_agent_stop >/dev/null 2>&1 || true
  [[ -f $work/csi/csi.log ]] && cp "$work/csi/csi.log" "$out/logs/tkm-csi.log"
  [[ -f $work/csi/agent.log ]] && cp "$work/csi/agent.log" "$out/logs/agent.log"
  while read -r m; do umount -l "$m" 2>/dev/null || true; done < <(awk -v w="$work" 'index($2, w) == 1 { print $2 }' /proc/self/mounts | sort -r)
  if [[ $pack == 1 ]]; then
    tar -C "$out" --exclude results.tar.gz -czf "$work/results.tar.gz" . 2>/dev/null || true
    find "$out" -mindepth 1 -maxdepth 1 ! -name summary.txt ! -name runs.tsv ! -name preflight.txt \
      -exec rm -rf {} + 2>/dev/null || true
    mv "$work/results.tar.gz" "$out/" 2>/dev/null || true
  fi
  rm -rf "$work" "${bundle_tmp:-}"
}
trap cleanup EXIT

# ---- binaries, python --------------------------------------------------------------------------
bundle_tmp=
if [[ -z ${TKM_BUILD_DIR:-} ]]; then
  if [[ -f $src/.device/$proof.tar.gz ]]; then
    bundle_tmp=$(mktemp -d "${TMPDIR:-/tmp}/tkm-bundle-XXXXXX")
    tar -C "$bundle_tmp" -xzf "$src/.device/$proof.tar.gz"
    export TKM_BUILD_DIR=$bundle_tmp/$proof
  else
    export TKM_BUILD_DIR=$src/build
  fi
fi
for x in "${bins[@]}"; do
  [[ -x $TKM_BUILD_DIR/$x ]] || { echo "$proof: $TKM_BUILD_DIR/$x missing (bench/gpu/bundle.sh)" >&2; exit 1; }
done
# shellcheck disable=SC2034 # used by the script
tkmctl=$TKM_BUILD_DIR/cli/tkmctl
if [[ $fake == 1 ]]; then
  export TKM_PYTHON=${TKM_PYTHON:-python3}
elif [[ -z ${TKM_PYTHON:-} ]]; then
  for p in python3 /opt/torch/.venv/bin/python; do
    if "$p" -c 'import torch, triton' 2>/dev/null; then export TKM_PYTHON=$p; break; fi
  done
  [[ -n ${TKM_PYTHON:-} ]] || { echo "$proof: no python with torch and triton (TKM_PYTHON)" >&2; exit 1; }
fi
# shellcheck disable=SC2034 # used by the script
py=$TKM_PYTHON

row() { (IFS=$'\t' && echo "$*") >>"$out/runs.tsv"; }
count() { find "$1" -type f ${2:+-name "$2"} 2>/dev/null | wc -l; }
