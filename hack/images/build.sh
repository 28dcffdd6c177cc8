#!/usr/bin/env bash
# Builds the test node's two images without Docker and pushes them to a
# registry on loopback (plain http):
#
#   <registry>/tkm-test/pause:1           /pause, our static C program (hack/images/pause.c);
#                                         containerd's sandbox image on the test node
#   <registry>/tkm-test/busybox:<version>  /bin/busybox from Debian's busybox-static and a
#                                         symlink per applet in /bin; entrypoint unset,
#                                         cmd ["sh"]
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

# --- busybox -----------------------------------------------------------------
bb=/bin/busybox
[[ -x $bb && $(dpkg-query -W -f='${Status}' busybox-static 2>/dev/null) == *'ok installed'* ]] ||
  die "images: $bb is missing or not static (apt-get install busybox-static; hack/deps.sh)"
bbver=$(dpkg-query -W -f='${Version}' busybox-static 2>/dev/null | sed 's/^[0-9]*://; s/[^A-Za-z0-9_.-]/_/g')
rm -rf "$work/busybox-root"
mkdir -p "$work/busybox-root"/{bin,etc,tmp,root,proc,sys,dev}
cp "$bb" "$work/busybox-root/bin/busybox"
while read -r applet; do
  [[ -n $applet && $applet != busybox ]] && ln -sf busybox "$work/busybox-root/bin/$applet"
done < <("$bb" --list)
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' \
  >"$work/busybox-root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$work/busybox-root/etc/group"
find "$work/busybox-root" -type d -exec chmod 0755 {} +
chmod 1777 "$work/busybox-root/tmp"
chmod 0644 "$work/busybox-root"/etc/{passwd,group}
chmod 0755 "$work/busybox-root/bin/busybox"
mklayer "$work/busybox-root" "$work/busybox.tar.gz"
push busybox "${bbver:-unknown}" "$work/busybox.tar.gz" --cmd sh
