#!/usr/bin/env bash
# trust_sigjob: the signature search as a job on a registry session
# (tkm_sig_job_verify, tests/e2e/progs/sigjob.c: every search side by side on
# one loop and one session, as the daemons run it) against real registries and
# real signatures:
#   - real cosign v2.6.5 signs one image the classic way (the .sig tag);
#   - real cosign v3.1.3 signs another with a Sigstore bundle: through the
#     tag schema on the e2e registry (Debian's registry 2.8, no referrers API)
#     and as an OCI referrer on go-containerregistry's registry with the API;
# and the job reports the source and the key id that verified (the key's
# sha256:<16 hex>, computed here with openssl), NoSignature for an unsigned
# image, ImageNotFound for a digest the registry does not have, KeyMismatch
# for another key, and -ECANCELED once for a job cancelled at once.
source "$(dirname "$0")/lib.sh"

COSIGN=$("$TKM_SOURCE_DIR/hack/testbin/build.sh" --path cosign)
COSIGN3=$("$TKM_SOURCE_DIR/hack/testbin/build.sh" --path cosign3)
CRANE=$("$TKM_SOURCE_DIR/hack/testbin/build.sh" --path crane)
RREG=$("$TKM_SOURCE_DIR/hack/testbin/build.sh" --path referrers-registry)
PROG=$TKM_BUILD_DIR/tests/e2e_sigjob
[[ -x $PROG ]] || fail "no e2e_sigjob in $TKM_BUILD_DIR/tests"
export COSIGN_PASSWORD=
export COSIGN_YES=true
cd "$E2E_TMP"

key_id() { # the id tkm reports: sha256 of the key's DER SubjectPublicKeyInfo, 16 hex
  local h
  h=$(openssl pkey -pubin -in "$1" -outform DER | sha256sum) || fail "openssl cannot read $1"
  echo "sha256:${h:0:16}"
}

step "keys: cosign v2 and cosign v3 key pairs, and one that signs nothing"
mkdir v2 v3 other
(cd v2 && "$COSIGN" generate-key-pair >/dev/null 2>&1)
(cd v3 && "$COSIGN3" generate-key-pair >/dev/null 2>&1)
(cd other && "$COSIGN3" generate-key-pair >/dev/null 2>&1)
[[ -s v2/cosign.pub && -s v3/cosign.pub && -s other/cosign.pub ]] || fail "cosign did not write the key pairs"
KV2=$(key_id v2/cosign.pub)
KV3=$(key_id v3/cosign.pub)
[[ $KV2 == sha256:* && $KV3 == sha256:* && $KV2 != "$KV3" ]] || fail "bad key ids '$KV2' '$KV3'"

step "a registry with the OCI referrers API, on loopback"
port=$((20000 + RANDOM % 20000))
"$RREG" "127.0.0.1:$port" >rreg.log 2>&1 &
rreg_pid=$!
e2e_on_exit "kill $rreg_pid"
wait_for 20 "referrers registry answers" curl -sf "http://127.0.0.1:$port/v2/"
RREG_HOST=127.0.0.1:$port

fx=$TKM_FIXTURES/triton-cache
MISSING=sha256:$(printf 'no such image %s' "$RANDOM" | sha256sum | cut -c1-64)
for host in "$TKM_REGISTRY" "$RREG_HOST"; do
  if [[ $host == "$RREG_HOST" ]]; then where="referrers"; else where="tag schema"; fi
  name=e2e-sigjob-$RANDOM
  repo=$host/$name
  step "[$where] three images in $repo: classic (cosign v2), bundle (cosign v3), unsigned"
  expect_ok "push c" "$CRANE" append -f "$fx/triton-3.6.0-cuda-sm90-binary-only.tar.gz" -t "$repo/c:v1"
  expect_ok "push b" "$CRANE" append -f "$fx/triton-3.6.0-cuda-sm90.tar.gz" -t "$repo/b:v1"
  expect_ok "push u" "$CRANE" mutate --label unsigned=1 "$repo/b:v1" -t "$repo/u:v1"
  DC=$("$CRANE" digest "$repo/c:v1")
  DB=$("$CRANE" digest "$repo/b:v1")
  DU=$("$CRANE" digest "$repo/u:v1")
  [[ $DC == sha256:* && $DB == sha256:* && $DU == sha256:* && $DB != "$DU" ]] || fail "bad digests"
  expect_ok "cosign v2 signs c (classic .sig)" "$COSIGN" sign --key v2/cosign.key --tlog-upload=false -y "$repo/c@$DC"
  expect_ok "cosign v3 signs b (bundle)" "$COSIGN3" sign --key v3/cosign.key --use-signing-config=false \
    --tlog-upload=false -y "$repo/b@$DB"
  expect_ok "the .sig tag exists" "$CRANE" manifest "$repo/c:sha256-${DC#sha256:}.sig"

  step "[$where] five searches side by side on one session, one cancelled at once"
  expect_ok "e2e_sigjob" "$PROG" --host "$host" --key v2/cosign.pub --key v3/cosign.pub --cancel \
    "$name/c@$DC" "$name/b@$DB" "$name/u@$DU" "$name/b@$MISSING"
  echo "$OUT"
  assert_contains "$OUT" "target=$name/c@$DC calls=1 rc=0 reason=Verified source=.sig tag format=cosign simplesigning key=$KV2 found=1" \
    "cosign v2's classic signature: source and key id"
  assert_contains "$OUT" "target=$name/b@$DB calls=1 rc=0 reason=Verified source=$where format=Sigstore bundle (DSSE) key=$KV3 found=1" \
    "cosign v3's bundle: source ($where) and key id"
  assert_contains "$OUT" "target=$name/u@$DU calls=1 rc=-2 reason=NoSignature" "unsigned image"
  assert_contains "$OUT" "$name/u@$DU is not signed: no signature found; looked at the referrers API" \
    "names the places looked at"
  assert_contains "$OUT" "sha256-${DU#sha256:}.sig (not found)" "names the .sig tag"
  assert_contains "$OUT" "target=$name/b@$MISSING calls=1 rc=-6 reason=ImageNotFound" "a digest the registry lacks"
  assert_contains "$OUT" "the registry has no such image (HEAD http://$host/v2/$name/b/manifests/$MISSING: HTTP 404)" \
    "says which request told"
  assert_contains "$OUT" "cancelled calls=1 rc=-125 reason=Cancelled" "a cancelled job reports once"
  assert_contains "$OUT" "jobs_left=0" "no job left on the session"

  step "[$where] another key: KeyMismatch, naming the key"
  expect_ok "e2e_sigjob with another key" "$PROG" --host "$host" --key other/cosign.pub "$name/b@$DB" "$name/c@$DC"
  assert_contains "$OUT" "target=$name/b@$DB calls=1 rc=-129 reason=KeyMismatch" "bundle, wrong key"
  assert_contains "$OUT" "target=$name/c@$DC calls=1 rc=-129 reason=KeyMismatch" "classic, wrong key"
  assert_contains "$OUT" "signature does not verify with key $(key_id other/cosign.pub)" "names the key by id"
done

e2e_done
