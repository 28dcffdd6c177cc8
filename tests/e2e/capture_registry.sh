#!/usr/bin/env bash
# capture_registry: `tkmctl capture` with the real registry and real cosign v3.
#   - a workload (bench/gpu/fake_workload.py, which writes like Triton's
#     FileCacheManager) run under capture, pushed: the printed cosign command
#     signs the pushed digest and `tkmctl verify` accepts it; the image's
#     config carries the io.tkm.capture/ labels;
#   - --add-variant twice (an sm90 run and an sm80 run): one index, two variants;
#   - a push without credentials to a registry that wants them fails with the
#     401 message, and leaves no temporary directory;
#   - manifests/samples/capture-job.yaml passes the apiserver's strict validation.
source "$(dirname "$0")/lib.sh"

COSIGN3=$("$TKM_SOURCE_DIR/hack/testbin/build.sh" --path cosign3)
CRANE=$("$TKM_SOURCE_DIR/hack/testbin/build.sh" --path crane)
TKMCTL=$TKM_BUILD_DIR/cli/tkmctl
[[ -x $TKMCTL ]] || fail "no tkmctl in $TKM_BUILD_DIR"
export COSIGN_PASSWORD=
export COSIGN_YES=true
cd "$E2E_TMP"
mkdir tmp
export TMPDIR=$E2E_TMP/tmp
REPO=$TKM_REGISTRY/e2e-capture-$RANDOM
FX=$TKM_FIXTURES/triton-3.6-sm90-native/cache
# shellcheck disable=SC2016 # expanded by the workload's shell, not this one
COPY='cp -r "$0"/. "$TRITON_CACHE_DIR"/'

left_behind() {
  local n
  n=$(find "$E2E_TMP/tmp" -mindepth 1 -maxdepth 1 | wc -l)
  assert_eq "$n" 0 "no temporary directory left behind"
}

step "keys"
expect_ok "cosign3 generate-key-pair" "$COSIGN3" generate-key-pair

step "capture the fake workload, push, sign with the printed command, verify"
expect_ok "capture --push --sign-key" env FAKE_SEED="$FX" FAKE_COMPILE_S=0 "$TKMCTL" capture \
  --push "$REPO/c:sm90" --sign-key cosign.key --no-nvml \
  -- python3 "$TKM_SOURCE_DIR/bench/gpu/fake_workload.py" triton
assert_contains "$OUT" '"compile_hits": 0' "the workload found the cache empty and compiled everything"
assert_contains "$OUT" "triton   TRITON_CACHE_DIR:" "says what it captured per part"
assert_contains "$OUT" "pushed $REPO/c:sm90@sha256:" "says what it pushed"
SIGN=$(grep -E '^  cosign sign --key cosign.key ' <<<"$OUT" | sed 's/^  //')
[[ -n $SIGN ]] || fail "no cosign command printed: $OUT"
pass "printed: $SIGN"
DIGEST=${SIGN##*@}
assert_eq "$("$CRANE" digest "$REPO/c:sm90")" "$DIGEST" "the command names the pushed digest"
read -r -a sign_argv <<<"${SIGN#cosign }"
expect_ok "run the printed command (cosign v3)" "$COSIGN3" "${sign_argv[@]}" \
  --use-signing-config=false --tlog-upload=false
expect_ok "tkmctl verify accepts it" "$TKMCTL" verify "$REPO/c:sm90" --key cosign.pub
cfg=$("$CRANE" config "$REPO/c:sm90")
assert_contains "$(jq -r '.config.Labels["io.tkm.capture/tool"]' <<<"$cfg")" "tkmctl capture" "tool label"
assert_eq "$(jq -r '.config.Labels["cache.triton.image/entry-count"] | tonumber > 0' <<<"$cfg")" "true" \
  "kernels counted"
expect_ok "inspect the pushed image" "$TKMCTL" inspect "$REPO/c:sm90"
assert_contains "$OUT" "cuda  arch 90" "its target"
json=$("$TKMCTL" capture --push "$REPO/j:1" --sign-key cosign.key --no-nvml -o json -- sh -c "$COPY" "$FX" 2>/dev/null) ||
  fail "capture -o json failed"
assert_eq "$(jq -r .signCommand <<<"$json")" "cosign sign --key cosign.key $(jq -r .pushed <<<"$json")" \
  "-o json: signCommand names the pushed digest"
assert_eq "$(jq -r .captured.triton.files <<<"$json")" "36" "-o json: what the Triton part captured"
left_behind

step "one variant per GPU type into one index"
expect_ok "capture sm90 --add-variant" "$TKMCTL" capture --push "$REPO/v:1" --add-variant --no-nvml \
  -- sh -c "$COPY" "$FX"
cp -r "$FX" sm80
sed -i 's/"arch": 90,/"arch": 80,/' sm80/*/*.json
expect_ok "capture sm80 --add-variant" "$TKMCTL" capture --push "$REPO/v:1" --add-variant --no-nvml \
  -- sh -c "$COPY" "$E2E_TMP/sm80"
assert_contains "$OUT" "pushed variant index" "says it pushed the index"
expect_ok "inspect the index" "$TKMCTL" inspect "$REPO/v:1"
assert_contains "$OUT" "Variants:     2" "two variants"
assert_contains "$OUT" "cuda sm80" "the sm80 one"
assert_contains "$OUT" "cuda sm90" "the sm90 one"
left_behind

step "a push without credentials"
htpasswd -Bbn tkm e2e-pass >users.htpasswd
AREG=$("$TKM_SOURCE_DIR/hack/registry.sh" start "$E2E_TMP/areg" --htpasswd "$E2E_TMP/users.htpasswd")
e2e_on_exit "'$TKM_SOURCE_DIR/hack/registry.sh' stop '$E2E_TMP/areg'"
mkdir nodc
expect_fail "capture --push, no credentials" env DOCKER_CONFIG="$E2E_TMP/nodc" "$TKMCTL" capture \
  --push "$AREG/e2e/c:v1" --no-nvml -- sh -c "$COPY" "$FX"
assert_contains "$OUT" "401 Unauthorized (no credentials found for this registry" "the 401 message"
left_behind

step "the sample capture Job is valid for the apiserver"
ns=$(e2e_namespace)
sed "s/namespace: ml/namespace: $ns/" "$TKM_SOURCE_DIR/manifests/samples/capture-job.yaml" >job.yaml
kubectl -n "$ns" create serviceaccount default >/dev/null 2>&1 || true
expect_ok "sample Secret and Job (server dry run, strict)" kubectl create --dry-run=server --validate=strict -f job.yaml
assert_contains "$(grep -A1 -- '- capture' job.yaml)" "--push" "the Job runs tkmctl capture --push"
e2e_done
