#!/usr/bin/env bash
# consumers-carry.sh DEST: the folder bench/gpu/consumers-proof.sh runs from on the device
# (carried with the device tool's `carry`, an ignored path: nothing of it is ever committed).
#   DEST/bench/gpu/...           these scripts (copied from this tree)
#   DEST/tests/e2e/csi/env.sh    the tkm-csi test world they source
#   DEST/csi-proof.tar.gz        tkmctl, tkm-csi and the CSI test agent/client (bundle.sh)
#   DEST/deps/                   the third-party sources, each with the commit it came from:
#     libtriton_jit/  git archive of LTJ_GIT (github flagos-ai/libtriton_jit) HEAD
#     fmt/ json/ googletest/  git archives of FMT_GIT tag 10.2.1, JSON_GIT v3.11.3, GTEST_GIT
#                     v1.16.0: the versions libtriton_jit's CMakeLists fetches (FetchContent
#                     is pointed at them, the device has no network)
#     epath-src/      git archive of EPATH_GIT (github kot-begemot-uk/enhanced_pathlib) HEAD
#     tce/            TCE_CACHE_PY: TKDK tce/triton_cache_extensions/runtime/cache.py (github
#                     kot-begemot-uk/TKDK; TCE_SOURCE says from which commit)
#     py/Cryptodome   Debian's python3-pycryptodome (apt-get download; its native parts are
#                     plain .abi3.so libraries that pycryptodome loads itself)
# The git dirs are bare clones (e.g. the session's `fetch` of the repository).
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
dest=${1:?usage: consumers-carry.sh DEST}
: "${LTJ_GIT:?} ${FMT_GIT:?} ${JSON_GIT:?} ${GTEST_GIT:?} ${EPATH_GIT:?} ${TCE_CACHE_PY:?} ${TCE_SOURCE:?}"
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)
rm -rf "$dest/deps" "$dest/bench" "$dest/tests"
d=$dest/deps
mkdir -p "$d"/{libtriton_jit,fmt,json,googletest,epath-src,tce/triton_cache_extensions/runtime,py} \
  "$dest/bench/gpu" "$dest/tests/e2e/csi"
arch() { # GIT REV DIR PATHS...
  local git=$1 rev=$2 dir=$3
  shift 3
  git --git-dir="$git" archive "$rev" -- "$@" | tar -x -C "$dir"
  git --git-dir="$git" rev-parse "$rev^{commit}" >"$dir/COMMIT"
}
arch "$LTJ_GIT" HEAD "$d/libtriton_jit" CMakeLists.txt cmake include src scripts examples LICENSE README.md
arch "$FMT_GIT" 10.2.1 "$d/fmt" CMakeLists.txt include src support LICENSE README.md ChangeLog.md
arch "$JSON_GIT" v3.11.3 "$d/json" CMakeLists.txt cmake include single_include LICENSE.MIT nlohmann_json.natvis
arch "$GTEST_GIT" v1.16.0 "$d/googletest" CMakeLists.txt googletest googlemock LICENSE
rm -rf "$d"/googletest/{googletest,googlemock}/{docs,test}
arch "$EPATH_GIT" HEAD "$d/epath-src" enhanced_pathlib/__init__.py LICENSE
cp "$TCE_CACHE_PY" "$d/tce/triton_cache_extensions/runtime/cache.py"
echo "$TCE_SOURCE" >"$d/tce/SOURCE"
tmp=$(mktemp -d)
(cd "$tmp" && apt-get download python3-pycryptodome >/dev/null 2>&1 && dpkg -x python3-pycryptodome_*.deb x)
cp -r "$tmp"/x/usr/lib/python3/dist-packages/Cryptodome "$d/py/"
rm -rf "$d/py/Cryptodome/SelfTest"
echo "Debian $(basename "$tmp"/python3-pycryptodome_*.deb .deb)" >"$d/py/Cryptodome.SOURCE"
rm -rf "$tmp"
cp -r "$src/bench/gpu/consumers" "$dest/bench/gpu/"
cp "$src"/bench/gpu/{consumers-proof.sh,triton_workload.py} "$dest/bench/gpu/"
cp "$src/tests/e2e/csi/env.sh" "$dest/tests/e2e/csi/"
TKM_BUNDLE_BINS="cli/tkmctl csi/tkm-csi tests/e2e_csi_testagent tests/e2e_csi_client" \
  "$src/bench/gpu/bundle.sh" "$src/build" "$dest/csi-proof"
rm -rf "$dest/csi-proof"
du -sh "$dest"
