#!/usr/bin/env bash
# images_python: hack/images/build.sh's tkm-test/python image, the fake workload's
# container for the image-volume comparison (issue 22), checked without the node.
# Built twice into a private registry on loopback: the first build pushes, the second
# pushes nothing and prints the same digests, and the layer is the same file. Its root
# filesystem, exported from the registry, runs in a chroot: /bin/sh, python3 with and
# without site, the workload's --help; with a writable TRITON_CACHE_DIR and the seed
# every kernel is compiled, then every kernel hits; the seed mounted read-only at the
# path it was compiled at (/tmp/tcache) hits every kernel; mounted read-only anywhere
# else, every kernel misses and the first write fails with OSError errno 30 (EROFS),
# as Triton's FileCacheManager does on an image volume.
source "$(dirname "$0")/lib.sh"
source "$TKM_SOURCE_DIR/hack/lib.sh" # free_port

[[ $(id -u) == 0 ]] || fail "needs root (chroot, mount)"
CRANE=$("$TKM_SOURCE_DIR/hack/testbin/build.sh" --path crane)
BUILD=$TKM_SOURCE_DIR/hack/images/build.sh
FIXTURE=$TKM_FIXTURES/triton-cache/triton-3.6.0-cuda-sm90.tar.gz

step "a private registry"
PORT=$(free_port)
REG=127.0.0.1:$PORT
setsid "$CRANE" registry serve --address "$REG" >"$E2E_TMP/registry.log" 2>&1 </dev/null &
REG_PID=$!
e2e_on_exit "kill $REG_PID"
wait_for 20 "registry answers" curl -sf "http://$REG/v2/"

step "build and push, twice"
expect_ok "first build" "$BUILD" "$REG" "$E2E_TMP/w1"
FIRST=$OUT
echo "$FIRST"
LINE=$(awk '$1 == "python"' <<<"$FIRST")
read -r _ REF DIGEST <<<"$LINE"
[[ $REF == "$REG/tkm-test/python:"* && $DIGEST == "$REG/tkm-test/python@sha256:"* ]] ||
  fail "no python line in: $FIRST"
pass "python line: $LINE"
pushes() { grep -cE '"?(PUT|POST|PATCH) ' "$E2E_TMP/registry.log" || true; }
BEFORE=$(pushes)
((BEFORE > 0)) || fail "the first build pushed nothing (registry log: $(cat "$E2E_TMP/registry.log"))"
pass "the first build pushed ($BEFORE writes)"
expect_ok "second build" "$BUILD" "$REG" "$E2E_TMP/w2"
assert_eq "$FIRST" "$OUT" "the same inputs give the same digests"
assert_eq "$BEFORE" "$(pushes)" "the second build pushed nothing"
assert_eq "$(sha256sum <"$E2E_TMP/w1/python.tar.gz")" "$(sha256sum <"$E2E_TMP/w2/python.tar.gz")" \
  "the layer is reproducible"
SIZE=$("$CRANE" manifest "$REF" | jq -r '[.layers[].size] | add')
echo "size: $LINE $SIZE bytes compressed"

step "image config"
CFG=$("$CRANE" config "$REF")
assert_eq "null" "$(jq -c '.config.Entrypoint' <<<"$CFG")" "no entrypoint"
assert_eq '["python3"]' "$(jq -c '.config.Cmd' <<<"$CFG")" "cmd python3"
assert_eq '["PATH=/usr/bin:/bin"]' "$(jq -c '.config.Env' <<<"$CFG")" "env PATH"
assert_eq "amd64/linux" "$(jq -r '.architecture + "/" + .os' <<<"$CFG")" "platform"

step "its root filesystem, in a chroot"
ROOT=$E2E_TMP/root
mkdir -p "$ROOT"
"$CRANE" export "$REF" - | tar -x -C "$ROOT"
assert_eq "" "$(cd "$ROOT/usr/lib" && find . -name __pycache__ -o -name test -o -name idlelib -o -name tkinter)" \
  "no __pycache__, test/, idlelib or tkinter in /usr/lib"
assert_eq "1777" "$(stat -c %a "$ROOT/tmp")" "/tmp is 1777"
# run [ENV...] CMD...: CMD in the image's root, in an empty environment but PATH and ENV.
run() { chroot "$ROOT" /bin/env -i PATH=/usr/bin:/bin "$@"; }
expect_ok "sh -c" run sh -c 'test -x /usr/bin/python3 && readlink /bin/sh'
assert_eq "busybox" "$OUT" "busybox sh runs a script"
expect_ok "python3 (site)" run python3 -c 'import site, sys; print(sys.prefix, sys.flags.no_site)'
assert_eq "/usr 0" "$OUT" "python3 starts with site and finds its prefix"
expect_ok "python3 -S" run python3 -S -c 'import argparse, json, os, shutil, sys, time, uuid; print(uuid.uuid4().version)'
assert_eq "4" "$OUT" "python3 -S imports what the workload imports"
expect_ok "the workload's --help" run python3 /fake_workload.py --help
assert_contains "$OUT" "usage: fake_workload.py" "usage printed"
W=(FAKE_SEED=/seed/tcache FAKE_COMPILE_S=0 python3 /fake_workload.py triton)
KERNELS=$(find "$ROOT/seed/tcache" -mindepth 1 -maxdepth 1 -type d | wc -l)
((KERNELS > 0)) || fail "no kernels in /seed/tcache"
# hits_misses JSON: "HITS MISSES" from the workload's line
hits_misses() { jq -r '"\(.compile_hits) \(.compile_misses)"' <<<"$1"; }
expect_ok "a writable cache, first run" run TRITON_CACHE_DIR=/tmp/c "${W[@]}"
assert_eq "0 $KERNELS" "$(hits_misses "$OUT")" "first run: every kernel compiled"
expect_ok "a writable cache, second run" run TRITON_CACHE_DIR=/tmp/c "${W[@]}"
assert_eq "$KERNELS 0" "$(hits_misses "$OUT")" "second run: every kernel hits"

step "the seed read-only, as an image volume mounts it"
SRC=$E2E_TMP/src
mkdir -p "$SRC"
tar -xzf "$FIXTURE" -C "$SRC"
# ro MOUNTPOINT: the workload with the extracted fixture bind-mounted read-only at
# MOUNTPOINT as its cache, in a mount namespace of its own (the mount goes with it).
ro() {
  mkdir -p "$ROOT$1"
  # shellcheck disable=SC2016 # expanded by sh
  unshare -m --propagation private sh -c 'mount --bind -o ro "$1" "$2" && shift 2 && exec "$@"' sh \
    "$SRC/tcache" "$ROOT$1" chroot "$ROOT" /bin/env -i PATH=/usr/bin:/bin "TRITON_CACHE_DIR=$1" "${W[@]}"
}
expect_ok "read-only at the path it was compiled at" ro /tmp/tcache
assert_eq "$KERNELS 0" "$(hits_misses "$OUT")" "every kernel hits"
rmdir "$ROOT/tmp/tcache"
expect_fail "read-only at another path" ro /cache
assert_contains "$OUT" "OSError: [Errno 30] Read-only file system: '/cache/" "a miss fails writing: EROFS"
! findmnt -rn -o TARGET | grep -qF "$E2E_TMP" || fail "a mount outlived its namespace"
pass "no mount left behind"

step "bad input"
expect_fail "a non-loopback registry is refused" "$BUILD" registry.example.com "$E2E_TMP/w3"
assert_contains "$OUT" "loopback registries only" "says why"
e2e_done
