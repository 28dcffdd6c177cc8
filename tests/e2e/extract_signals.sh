#!/usr/bin/env bash
# extract_signals: `tkmctl extract` stopped by SIGINT, SIGTERM or SIGKILL leaves
# nothing behind, and a rerun removes what a killed run left -- never what a
# live one is working on. Needs no cluster (only tkmctl and the fixtures).
source "$(dirname "$0")/lib.sh"
TKMCTL=$TKM_BUILD_DIR/cli/tkmctl
W=$E2E_TMP

step "a layout with a large layer (fixture cache + 300 MB of random bytes) and a small one"
mkdir -p "$W/big" "$W/small" "$W/out"
tar -xzf "$TKM_FIXTURES/triton-cache/triton-3.6.0-cuda-sm90.tar.gz" -C "$W/small"
tar -xzf "$TKM_FIXTURES/triton-cache/triton-3.6.0-cuda-sm90.tar.gz" -C "$W/big"
kdir=$(find "$W/big/tcache" -mindepth 1 -maxdepth 1 -type d | sort | head -1)
head -c 300000000 /dev/urandom >"$kdir/big.bin"
expect_ok "build the big layout" "$TKMCTL" build "$W/big/tcache" --output "$W/img-big" --level 1
expect_ok "build the small layout" "$TKMCTL" build "$W/small/tcache" --output "$W/img-small"

# staging_of DIR: the staging dirs in DIR (names only).
staging_of() { find "$1" -mindepth 1 -maxdepth 1 -name '.tkm-staging-*' -printf '%f\n' | sort; }
# start_big OUTPUT: starts an extraction of the big layout in the background
# ($XPID) and waits until its staging dir exists and holds a file.
start_big() {
  "$TKMCTL" extract "$W/img-big" --output "$1" >"$W/x.log" 2>&1 &
  XPID=$!
  local t0=$SECONDS
  until [[ -n $(find "$(dirname "$1")" -mindepth 2 -path '*/.tkm-staging-*' -type f 2>/dev/null | head -1) ]]; do
    kill -0 "$XPID" 2>/dev/null || fail "extract ended before it was signalled: $(cat "$W/x.log")"
    ((SECONDS - t0 < 120)) || fail "no staging dir with a file after 120 s"
    sleep 0.02
  done
}

for sig in INT TERM; do
  step "SIG$sig mid-extraction"
  start_big "$W/out/c-$sig"
  kill -"$sig" "$XPID"
  rc=0
  wait "$XPID" || rc=$?
  want=$((128 + $(kill -l "$sig")))
  assert_eq "$want" "$rc" "exit status after SIG$sig"
  assert_contains "$(cat "$W/x.log")" "interrupted by signal" "SIG$sig is reported"
  assert_eq "" "$(ls -A "$W/out")" "nothing left beside --output after SIG$sig"
done

step "SIGKILL mid-extraction leaves a staging dir; the rerun removes it"
start_big "$W/out/c-kill"
kill -KILL "$XPID"
wait "$XPID" || true
left=$(staging_of "$W/out")
[[ -n $left ]] || fail "SIGKILL left no staging dir (the extraction was not under way)"
pass "SIGKILL left $left"
[[ ! -e $W/out/c-kill ]] || fail "a killed extraction published $W/out/c-kill"
pass "no destination after SIGKILL"
expect_ok "rerun after SIGKILL" "$TKMCTL" extract "$W/img-small" --output "$W/out/c-kill"
assert_eq "c-kill" "$(ls -A "$W/out")" "the rerun removed $left and left only its output"
rm -rf "$W/out/c-kill"

step "a live extraction's staging dir survives another run's purge"
start_big "$W/out/c-live"
kill -STOP "$XPID" # still alive, but cannot finish while the other run purges
e2e_on_exit "kill -CONT $XPID 2>/dev/null"
live=$(staging_of "$W/out")
expect_ok "a second extraction into the same parent" "$TKMCTL" extract "$W/img-small" --output "$W/out/c-other"
[[ -d $W/out/$live ]] || fail "the purge removed the staging dir $live of a live extraction"
pass "live staging $live survived"
kill -CONT "$XPID"
rc=0
wait "$XPID" || rc=$?
assert_eq 0 "$rc" "the live extraction completed: $(cat "$W/x.log")"
assert_eq "$(printf 'c-live\nc-other')" "$(find "$W/out" -mindepth 1 -maxdepth 1 -printf '%f\n' | sort)" "both outputs, no staging left"
cmp -s "$kdir/big.bin" "$W/out/c-live/$(basename "$kdir")/big.bin" || fail "big.bin differs"
pass "the live extraction's big file is intact"

step "attribution: dead pid and reused pid are purged, a live process's dir is kept"
sleep 300 &
SPID=$!
e2e_on_exit "kill $SPID 2>/dev/null"
start=$(awk '{ sub(/.*\) /, ""); print $20 }' "/proc/$SPID/stat")
mkdir -p "$W/out/.tkm-staging-$SPID-$start-aaaa/x" "$W/out/.tkm-staging-$SPID-$((start + 1))-bbbb/x"
# A pid that is not running: the highest pid_max value is never in use here.
dead=$(($(cat /proc/sys/kernel/pid_max) - 1))
kill -0 "$dead" 2>/dev/null && fail "pid $dead runs"
mkdir -p "$W/out/.tkm-staging-$dead-12345-cccc/y" "$W/out/.not-ours-staging"
rm -rf "$W/out/c-live" "$W/out/c-other"
expect_ok "extract purges" "$TKMCTL" extract "$W/img-small" --output "$W/out/c3"
assert_eq "$(printf '%s\n' .not-ours-staging ".tkm-staging-$SPID-$start-aaaa" c3 | sort)" \
  "$(find "$W/out" -mindepth 1 -maxdepth 1 -printf '%f\n' | sort)" "kept: a foreign name and a live process's dir; removed: reused and dead pids"

step "--max-bytes / --max-file-bytes"
expect_fail "--max-file-bytes below big.bin" "$TKMCTL" extract "$W/img-big" --output "$W/out/c4" --max-file-bytes 100Mi
assert_contains "$OUT" "per-file limit" "the per-file cap names the limit"
assert_contains "$OUT" "big.bin" "the per-file cap names the entry"
expect_fail "--max-bytes below the layer" "$TKMCTL" extract "$W/img-big" --output "$W/out/c4" --max-bytes 200M
assert_contains "$OUT" "max_total_bytes" "the total cap names the limit"
expect_fail "bad size" "$TKMCTL" extract "$W/img-big" --output "$W/out/c4" --max-bytes 12Q
assert_contains "$OUT" "'12Q': not a positive size" "a bad size is explained"
for bad in 0 -5 1.5G 99999999999999999999 16EiB ""; do
  rc=0
  "$TKMCTL" extract "$W/img-big" --output "$W/out/c4" --max-file-bytes="$bad" 2>/dev/null || rc=$?
  assert_eq 2 "$rc" "--max-file-bytes='$bad' is a usage error"
done
assert_eq "$(printf '%s\n' .not-ours-staging ".tkm-staging-$SPID-$start-aaaa" c3 | sort)" \
  "$(find "$W/out" -mindepth 1 -maxdepth 1 -printf '%f\n' | sort)" "refusals leave nothing"
expect_ok "generous caps" "$TKMCTL" extract "$W/img-small" --output "$W/out/c5" --max-bytes 1Gi --max-file-bytes 64MiB

step "from a registry: caps checked from the manifest, before any layer is fetched"
REG=$TKM_REGISTRY
expect_ok "push the big layout" "$TKMCTL" push "$W/img-big" "$REG/e2e/extract-signals:big"
expect_fail "pull --max-bytes below the image" "$TKMCTL" pull "$REG/e2e/extract-signals:big" --output "$W/pulled" --max-bytes 100Mi
assert_contains "$OUT" "over the 104857600-byte cap (--max-bytes)" "pull names the total cap"
expect_fail "pull --max-file-bytes below the layer" "$TKMCTL" pull "$REG/e2e/extract-signals:big" --output "$W/pulled" --max-file-bytes 1M
assert_contains "$OUT" "over the 1000000-byte cap (--max-file-bytes)" "pull names the per-blob cap"
[[ ! -e $W/pulled ]] || fail "a refused pull created $W/pulled"
pass "a refused pull created no layout"
expect_ok "pull within the caps" "$TKMCTL" pull "$REG/e2e/extract-signals:big" --output "$W/pulled" --max-bytes 1Gi --max-file-bytes 400Mi
rm -rf "$W/pulled"
mkdir -p "$W/rout"
expect_fail "extract REF --max-bytes below the download" "$TKMCTL" extract "$REG/e2e/extract-signals:big" --output "$W/rout/c" --max-bytes 200Mi
assert_contains "$OUT" "(--max-bytes)" "extract REF names the cap"
assert_eq "" "$(ls -A "$W/rout")" "a refused extract REF leaves nothing"

step "SIGINT while extract REF downloads"
"$TKMCTL" extract "$REG/e2e/extract-signals:big" --output "$W/rout/c" >"$W/x.log" 2>&1 &
XPID=$!
t0=$SECONDS
until [[ -n $(find "$W/rout" -path '*/.tkm-staging-*/*blobs/*' -name '.pull-*' -size +0 2>/dev/null | head -1) ]]; do
  kill -0 "$XPID" 2>/dev/null || fail "extract REF ended before the download was seen: $(cat "$W/x.log")"
  ((SECONDS - t0 < 120)) || fail "no download in progress after 120 s"
  sleep 0.01
done
kill -INT "$XPID"
rc=0
wait "$XPID" || rc=$?
assert_eq 130 "$rc" "exit status after SIGINT during the download"
assert_contains "$(cat "$W/x.log")" "interrupted by signal 2" "SIGINT during the download is reported"
assert_eq "" "$(ls -A "$W/rout")" "nothing left beside --output after SIGINT during the download"
expect_ok "extract REF completes" "$TKMCTL" extract "$REG/e2e/extract-signals:big" --output "$W/rout/c"
assert_eq "c" "$(ls -A "$W/rout")" "only the output, the pull layout removed"

step "SIGTERM while pull downloads"
mkdir -p "$W/pout"
"$TKMCTL" pull "$REG/e2e/extract-signals:big" --output "$W/pout/img" >"$W/p.log" 2>&1 &
PULLPID=$!
t0=$SECONDS
# the pull stages a new layout in .img.pull-XXXXXX; a layer streams into blobs/.pull-*.tmp
until [[ -n $(find "$W/pout" -path '*/.img.pull-*/blobs/*' -name '.pull-*' -size +0 2>/dev/null | head -1) ]]; do
  kill -0 "$PULLPID" 2>/dev/null || fail "pull ended before the download was seen: $(cat "$W/p.log")"
  ((SECONDS - t0 < 120)) || fail "no pull download in progress after 120 s"
  sleep 0.01
done
kill -TERM "$PULLPID"
rc=0
wait "$PULLPID" || rc=$?
assert_eq 143 "$rc" "pull's exit status after SIGTERM during the download"
assert_contains "$(cat "$W/p.log")" "interrupted by signal 15" "SIGTERM during the pull is reported"
assert_eq "" "$(ls -A "$W/pout")" "nothing left beside --output after SIGTERM during the pull"
expect_ok "pull completes" "$TKMCTL" pull "$REG/e2e/extract-signals:big" --output "$W/pout/img"
assert_eq "img" "$(ls -A "$W/pout")" "only the layout, no staging left"

e2e_done
