#!/usr/bin/env bash
# agent_faults: bad input and registry faults end in a clear reason in the node status
# (never a crash, never a hot loop). One agent (H200 root), one cache per fault: image
# missing, registry down, 401 (then fixed with an imagePullSecret), a digest the registry
# serves other bytes for, unsigned under Enforce, a wrong key, not a Triton image, a
# missing key Secret; and a bad tkm-config keeps the last good settings. SIGTERM exits 0, at
# once even with a registry request in flight.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/agent.inc"
e2e_crds
agent_ns
COSIGN=$("$TKM_SOURCE_DIR/hack/testbin/build.sh" --path cosign)
CRANE=$("$TKM_SOURCE_DIR/hack/testbin/build.sh" --path crane)
export COSIGN_PASSWORD='' COSIGN_YES=true
cd "$E2E_TMP"
FX=$TKM_FIXTURES/triton-cache/triton-3.6.0-cuda-sm90.tar.gz

step "keys, images, registries"
"$COSIGN" generate-key-pair >/dev/null 2>&1
mkdir other && (cd other && "$COSIGN" generate-key-pair >/dev/null 2>&1)
BASE=$TKM_REGISTRY/e2e-agent-faults-$RANDOM
D=$(agent_image "$BASE/signed" "$FX")
"$COSIGN" sign --key cosign.key --tlog-upload=false -y "$BASE/signed@$D" >/dev/null 2>&1 || fail "cosign sign"
D2=$(agent_image "$BASE/unsigned" "$FX")
assert_eq "$D" "$D2" "tkmctl build is reproducible (same digest in both repositories)"
"$CRANE" append -f "$TKM_FIXTURES/triton-cache/triton-3.6.0-cuda-sm90-binary-only.tar.gz" -t "$BASE/plain:v1" >/dev/null 2>&1
DP=$("$CRANE" digest "$BASE/plain:v1")
# a registry with basic auth
htpasswd -Bbn tkm e2e-pass >"$E2E_TMP/htpasswd"
AREG=$("$TKM_SOURCE_DIR/hack/registry.sh" start "$E2E_TMP/areg" --htpasswd "$E2E_TMP/htpasswd")
e2e_on_exit "'$TKM_SOURCE_DIR/hack/registry.sh' stop '$E2E_TMP/areg'"
printf '{"auths":{"%s":{"auth":"%s"}}}' "$AREG" "$(printf tkm:e2e-pass | base64)" >auth.json
mkdir l && tar -xzf "$FX" -C l && "$TKMCTL" build l/tcache --output lay >/dev/null 2>&1
"$TKMCTL" push lay "$AREG/e2e/vadd:v1" --auth-file auth.json >/dev/null 2>&1 || fail "push to $AREG"
# a registry whose stored manifest bytes are altered: same digest path, other bytes
TREG=$("$TKM_SOURCE_DIR/hack/registry.sh" start "$E2E_TMP/treg")
e2e_on_exit "'$TKM_SOURCE_DIR/hack/registry.sh' stop '$E2E_TMP/treg'"
"$TKMCTL" push lay "$TREG/e2e/vadd:v1" >/dev/null 2>&1 || fail "push to $TREG"
MF=$(find "$E2E_TMP/treg" -path "*/blobs/sha256/*/${D#sha256:}/data")
[[ -f $MF ]] || fail "no manifest blob for $D under $E2E_TMP/treg"
python3 - "$MF" <<'PY'
import sys
p = sys.argv[1]; b = open(p, 'rb').read()
i = b.index(b'"schemaVersion"')
b = b[:i] + b'"schemaVersion"'.replace(b'V', b'v') + b[i + len(b'"schemaVersion"'):]
open(p, 'wb').write(b)
PY
pass "manifest bytes altered in place (same size) in $TREG"
NOKEY=$(sed 's/^/      /' other/cosign.pub)
# the caches here switch signature checks off for themselves: the admin allows it (issue 23)
kubectl -n "$NS" create configmap tkm-config --from-literal=signatureFloor=Disabled --from-literal=signatureMode=Enforce \
  --from-file=signaturePublicKeys=cosign.pub >/dev/null
ZERO=sha256:$(printf 'no such image %s' "$RANDOM" | sha256sum | cut -d' ' -f1)

step "one cache per fault"
cache_create tkc "$NS" ok "$BASE/signed:v1" "$D"
cache_create tkc "$NS" missing "$BASE/signed:v1" "$ZERO"
cache_create tkc "$NS" down "127.0.0.1:9/e2e/vadd:v1" "$D"
cache_create tkc "$NS" unauth "$AREG/e2e/vadd:v1" "$D" "  signaturePolicy: {mode: Disabled}"
cache_create tkc "$NS" tampered "$TREG/e2e/vadd:v1" "$D" "  signaturePolicy: {mode: Disabled}"
cache_create tkc "$NS" unsigned "$BASE/unsigned:v1" "$D"
cache_create tkc "$NS" wrongkey "$BASE/signed:v1" "$D" "  signaturePolicy:
    mode: Enforce
    publicKey: |
$NOKEY"
cache_create tkc "$NS" plain "$BASE/plain:v1" "$DP" "  signaturePolicy: {mode: Disabled}"
cache_create tkc "$NS" nosecret "$BASE/signed:v1" "$D" "  signaturePolicy: {mode: Enforce, publicKeySecretRef: {name: absent, key: cosign.pub}}"
cache_create tkc "$NS" unpinned "$BASE/signed:v1" ""
NODE=e2e-faults-$RANDOM
agent_node "$NODE"
agent_start h200 h200 "$NODE" "$NS"

wait_jp 60 "ok: verified" true tkcns "$NODE" "$NS" '{.status.caches.ok.verified}'
err() { jp tkcns "$NODE" "$NS" "{.status.caches.$1.error}"; }
wait_err() { # CACHE REASON TEXT
  local t0=$SECONDS
  until [[ $(err "$1") == "$2: "* ]]; do
    ((SECONDS - t0 < 60)) || fail "$1: expected reason $2, got '$(err "$1")'"
    sleep 0.5
  done
  pass "$1: $2"
  assert_contains "$(err "$1")" "$3" "$1: says why"
}
wait_err missing ImageNotFound "HTTP 404"
wait_err down RegistryUnreachable "127.0.0.1:9"
wait_err unauth RegistryUnauthorized "401 Unauthorized"
wait_err tampered DigestMismatch "$D"
wait_err unsigned NoSignature "sha256-${D#sha256:}.sig"
wait_err wrongkey KeyMismatch "signature does not verify with key"
wait_err plain NotATritonCache "cache.triton.image/summary"
wait_err nosecret SecretNotFound "absent"
wait_err unpinned DigestNotPinned "resolvedDigest"
assert_eq "$(jp tkcns "$NODE" "$NS" '{.status.caches.unsigned.verified} {.status.caches.unsigned.compatibleGPUs[0].gpuType}')" "false nvidia-h200" "unsigned: judged, but not verified"
assert_eq "$(err ok)" "" "ok: no error beside the faults"
assert_eq "$(jp tkcns "$NODE" "$NS" '{.status.cacheCount}')" 10 "all ten caches reported"

step "no hot loop: the unreachable registry is retried with backoff"
sleep 8
n=$(grep -c "cache $NS/down: RegistryUnreachable" "$E2E_TMP/h200.log" || true)
((n >= 2 && n <= 6)) || fail "expected 2..6 attempts at the unreachable registry in ~10 s, saw $n"
pass "$n attempts in ~10 s (backoff 1 s doubling)"
kill -0 "${AGENT_PID[h200]}" || fail "the agent died"

step "401 fixed with an imagePullSecret"
kubectl -n "$NS" create secret docker-registry areg --docker-server="$AREG" --docker-username=tkm \
  --docker-password=e2e-pass >/dev/null
kubectl -n "$NS" patch tkc unauth --type=merge -p '{"spec":{"imagePullSecrets":[{"name":"areg"}]}}' >/dev/null
wait_jp 60 "unauth: judged with the credentials" nvidia-h200 tkcns "$NODE" "$NS" '{.status.caches.unauth.compatibleGPUs[0].gpuType}'
assert_eq "$(err unauth)" "" "unauth: error cleared"

step "a bad tkm-config keeps the last good settings"
kubectl -n "$NS" patch configmap tkm-config --type=merge -p '{"data":{"signatureMode":"enforce"}}' >/dev/null
wait_for 30 "the agent says why" grep -q 'signatureMode: \\"enforce\\" is not\|signatureMode.*enforce' "$E2E_TMP/h200.log"
sleep 1
assert_eq "$(jp tkcns "$NODE" "$NS" '{.status.caches.ok.verified}')" true "ok: still verified"
kill -0 "${AGENT_PID[h200]}" || fail "the agent died"
agent_stop h200
assert_not_contains "$(agent_log h200)" "ERROR" "no error in the agent's log"
assert_eq 0 "${AGENT_RC[h200]}" "SIGTERM: exit 0"

step "SIGTERM with a registry request in flight: exit 0 at once"
e2e_silent_registry silent
cache_create tkc "$NS" silent "127.0.0.1:$(cat "$E2E_TMP/silent.port")/e2e/vadd:v1" "$D"
# --gc-grace 600: the spelling of the previous release (seconds)
agent_start term h200 "$NODE" "$NS" --gc-grace 600
wait_for 30 "the agent's request is in flight at the silent registry" test -s "$E2E_TMP/silent.accepts"
agent_stop term
assert_eq 0 "${AGENT_RC[term]}" "SIGTERM with a registry request in flight: exit 0"
((AGENT_STOP_MS[term] < 5000)) || fail "the stop took ${AGENT_STOP_MS[term]} ms"
pass "stopped in ${AGENT_STOP_MS[term]} ms"
assert_contains "$(agent_log term)" "--gc-grace 600: a duration without a unit is deprecated" "the old spelling is accepted, with one deprecation line"
e2e_done
