#!/usr/bin/env bash
# Builds the test node's three images without Docker and pushes them to a
# registry on loopback (plain http):
#
#   <registry>/tkm-test/pause:1           /pause, our static C program (hack/images/pause.c);
#                                         containerd's sandbox image on the test node
#   <registry>/tkm-test/busybox:<version>  /bin/busybox from Debian's busybox-static and a
#                                         symlink per applet in /bin; entrypoint unset,
#                                         cmd ["sh"]
#   <registry>/tkm-test/python:<version>-<hash>
#                                         the busybox image's files plus a minimal runtime of
#                                         Debian's /usr/bin/python3: the binary, the shared
#                                         libraries ldd names (and the loader), and the stdlib
#                                         files bench/gpu/fake_workload.py imports (traced with
#                                         `python3 -X importtime`, no __pycache__); the
#                                         workload at /fake_workload.py and the extracted
#                                         fixture triton-3.6.0-cuda-sm90 at /seed/tcache (its
#                                         FAKE_SEED); entrypoint unset, cmd ["python3"], env
#                                         PATH=/usr/bin:/bin. <version> is the Debian package's,
#                                         <hash> of the workload and the fixture.
#
# Each image is one gzip layer made by a deterministic tar (sorted names, mtime 0,
# uid/gid 0, fixed modes, `gzip -n`), turned into an OCI image by crane (built
# by hack/testbin/build.sh): `crane append --oci-empty-base` pushes the layer,
# `crane mutate` sets platform linux/amd64, entrypoint/cmd and a label with the
# layer's digest. The same inputs give the same digests, so pushing again is a
# no-op; when the tag already carries the label of the current layer, nothing
# is pushed at all.
#
# Usage: hack/images/build.sh REGISTRY [WORKDIR]   (REGISTRY: 127.0.0.1:PORT)
# Prints one line per image: NAME REF:TAG REF@DIGEST
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=hack/lib.sh
source "$here/../lib.sh"

reg=${1:-}
[[ $reg =~ ^127\.0\.0\.1:[0-9]+$ ]] || die "images: usage: $0 127.0.0.1:PORT [WORKDIR] (loopback registries only)"
work=${2:-$(mktemp -d "${TMPDIR:-/tmp}/tkm-images-XXXXXX")}
mkdir -p "$work"
crane=$("$here/../testbin/build.sh" --path crane)

# mklayer ROOTDIR OUT.tar.gz: a reproducible gzip tar of ROOTDIR's contents.
mklayer() {
  local root=$1 out=$2
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --format=gnu \
    -C "$root" -cf - . | gzip -n -9 >"$out.tmp"
  mv -f "$out.tmp" "$out"
}

# push NAME TAG LAYER MUTATE_ARGS...: pushes unless the tag already has this layer.
push() {
  local name=$1 tag=$2 layer=$3
  shift 3
  local ref=$reg/tkm-test/$name:$tag sum
  sum=sha256:$(sha256sum "$layer" | cut -d' ' -f1)
  if [[ $("$crane" config "$ref" 2>/dev/null | jq -r '.config.Labels["io.tkm.test.layer"] // ""' 2>/dev/null) != "$sum" ]]; then
    "$crane" append --oci-empty-base -f "$layer" -t "$ref" >/dev/null 2>"$work/$name.crane.log" ||
      { cat "$work/$name.crane.log" >&2; die "images: crane append $ref failed"; }
    "$crane" mutate "$ref" --set-platform linux/amd64 -l "io.tkm.test.layer=$sum" "$@" -t "$ref" \
      >/dev/null 2>"$work/$name.crane.log" ||
      { cat "$work/$name.crane.log" >&2; die "images: crane mutate $ref failed"; }
  fi
  echo "$name $ref $reg/tkm-test/$name@$("$crane" digest "$ref")"
}

# --- pause -------------------------------------------------------------------
cc=musl-gcc
command -v "$cc" >/dev/null || cc=cc
command -v "$cc" >/dev/null || die "images: no C compiler (musl-gcc or cc; run hack/deps.sh)"
rm -rf "$work/pause-root"
mkdir -p "$work/pause-root"
"$cc" -static -Os -s -Wall -Wextra -Werror -o "$work/pause-root/pause" "$here/pause.c" ||
  die "images: compiling $here/pause.c with $cc -static failed"
chmod 0755 "$work/pause-root" "$work/pause-root/pause"
mklayer "$work/pause-root" "$work/pause.tar.gz"
push pause 1 "$work/pause.tar.gz" --entrypoint /pause

# busybox_root DIR: /bin/busybox (Debian's busybox-static) with a symlink per applet in
# /bin, /etc/passwd and /etc/group, /tmp (1777) and empty /root /proc /sys /dev.
busybox_root() {
  local root=$1 applet
  rm -rf "$root"
  mkdir -p "$root"/{bin,etc,tmp,root,proc,sys,dev}
  cp "$bb" "$root/bin/busybox"
  while read -r applet; do
    [[ -n $applet && $applet != busybox ]] && ln -sf busybox "$root/bin/$applet"
  done < <("$bb" --list)
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$root/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
  find "$root" -type d -exec chmod 0755 {} +
  chmod 1777 "$root/tmp"
  chmod 0644 "$root"/etc/{passwd,group}
  chmod 0755 "$root/bin/busybox"
}

# --- busybox -----------------------------------------------------------------
bb=/bin/busybox
[[ -x $bb && $(dpkg-query -W -f='${Status}' busybox-static 2>/dev/null) == *'ok installed'* ]] ||
  die "images: $bb is missing or not static (apt-get install busybox-static; hack/deps.sh)"
bbver=$(dpkg-query -W -f='${Version}' busybox-static 2>/dev/null | sed 's/^[0-9]*://; s/[^A-Za-z0-9_.-]/_/g')
busybox_root "$work/busybox-root"
mklayer "$work/busybox-root" "$work/busybox.tar.gz"
push busybox "${bbver:-unknown}" "$work/busybox.tar.gz" --cmd sh

# --- python ------------------------------------------------------------------
# The busybox image's files plus what Debian's python3 needs to run the fake workload:
# the stdlib modules it imports (traced, so nothing is listed by hand), the libraries
# ldd names for the binary and those modules' extensions, and the seed it copies from.
py=/usr/bin/python3
pyreal=$(readlink -f "$py")
pypkg=$(dpkg-query -S "$pyreal" 2>/dev/null | cut -d: -f1 | head -n1)
pyver=$(dpkg-query -W -f='${Version}' "$pypkg" 2>/dev/null | sed 's/^[0-9]*://; s/[^A-Za-z0-9_.-]/_/g')
[[ -x $pyreal && -n $pyver ]] || die "images: $py is not Debian's python3 (apt-get install python3; hack/deps.sh)"
repo=$(cd "$here/../.." && pwd)
wl=$repo/bench/gpu/fake_workload.py
fixture=$repo/tests/fixtures/triton-cache/triton-3.6.0-cuda-sm90.tar.gz
[[ -s $wl && -s $fixture ]] || die "images: $wl or $fixture is missing"
[[ $(tar -tzf "$fixture" | cut -d/ -f1 | sort -u) == tcache ]] || die "images: $fixture's top dir is not tcache/"
pyroot=$work/python-root trace=$work/python-trace
busybox_root "$pyroot"
rm -rf "$trace"
mkdir -p "$pyroot/seed" "$pyroot/usr/bin" "$trace"
tar -xzf "$fixture" -C "$pyroot/seed"
cp "$wl" "$pyroot/fake_workload.py"
cp "$pyreal" "$pyroot$pyreal"
ln -s "$(basename "$pyreal")" "$pyroot$py"

# pyrun ENV... CMD...: CMD in an empty environment (as in the container); its
# `-X importtime` lines (stderr) are appended to $trace/stderr; no .pyc is written.
pyrun() { env -i PATH=/usr/bin:/bin PYTHONDONTWRITEBYTECODE=1 FAKE_COMPILE_S=0 "$@" 2>>"$trace/stderr" >/dev/null; }
run=("$py" -S -X importtime "$pyroot/fake_workload.py")
seed=("FAKE_SEED=$pyroot/seed/tcache" "TRITON_CACHE_DIR=$trace/cache")
touch "$trace/file"
# site's imports (-S, then `import site`: the normal startup, without the host's .pth files);
# --help; every kernel a miss, then a hit, then one more miss; and the failure paths:
# an OSError's traceback (the cache dir is a file) and sys.exit's message (no env).
{ pyrun "$py" -S -X importtime -c 'import site' && pyrun "${seed[@]}" "${run[@]}" --help &&
  pyrun "${seed[@]}" "${run[@]}" triton && pyrun "${seed[@]}" "${run[@]}" triton &&
  pyrun "${seed[@]}" "${run[@]}" triton --miss &&
  ! pyrun "FAKE_SEED=$pyroot/seed/tcache" "TRITON_CACHE_DIR=$trace/file" "${run[@]}" triton &&
  ! pyrun "${run[@]}" triton; } || { cat "$trace/stderr" >&2; die "images: tracing the imports of $wl failed"; }
awk -F'|' '/^import time: +[0-9]/ {gsub(/ /, "", $3); print $3}' "$trace/stderr" | sort -u >"$trace/modules"
# Each module's file, when it lies in the stdlib dir (not built in, frozen only, or from
# the host's site-packages); and the stdlib dir first.
"$py" -I -S -X frozen_modules=off - "$trace/modules" >"$trace/files" <<'PY' || die "images: mapping the modules of $wl to files failed"
import importlib.util, sys, sysconfig
std = sysconfig.get_path("stdlib")
print(std)
for name in open(sys.argv[1]).read().split():
    spec = importlib.util.find_spec(name)
    if spec and spec.origin and spec.origin.startswith(std + "/") and "-packages/" not in spec.origin:
        print(spec.origin)
PY
pystd=$(head -n1 "$trace/files")
mkdir -p "$pyroot$pystd/lib-dynload"
while read -r f; do
  mkdir -p "$pyroot$(dirname "$f")"
  cp -L "$f" "$pyroot$f"
done < <(tail -n +2 "$trace/files")
# getpath's landmark: without it python3 warns and guesses its prefix
[[ -f $pyroot$pystd/os.py ]] || die "images: the trace of $wl did not name $pystd/os.py"
# The libraries (and the loader) at the paths ldd prints, which are the paths the loader
# searches without an ld.so.cache.
for elf in "$pyreal" $(grep '\.so$' "$trace/files"); do
  ldd "$elf" || die "images: ldd $elf failed"
done >"$trace/ldd"
! grep -q 'not found' "$trace/ldd" || { cat "$trace/ldd" >&2; die "images: a library of $pyreal is missing"; }
while read -r lib; do
  mkdir -p "$pyroot$(dirname "$lib")"
  cp -L "$lib" "$pyroot$lib"
done < <(awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' "$trace/ldd" | sort -u)
find "$pyroot" -type d -exec chmod 0755 {} +
find "$pyroot" -type f -perm /111 -exec chmod 0755 {} +
find "$pyroot" -type f ! -perm /111 -exec chmod 0644 {} +
chmod 1777 "$pyroot/tmp"
mklayer "$pyroot" "$work/python.tar.gz"
pyhash=$(cat "$wl" "$fixture" | sha256sum | cut -c1-12)
push python "$pyver-$pyhash" "$work/python.tar.gz" --cmd python3 --env PATH=/usr/bin:/bin
