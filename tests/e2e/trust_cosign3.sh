#!/usr/bin/env bash
# trust_cosign3: real cosign v3.1.3 (hack/testbin/cosign3) signs images with a
# key in its default format, a Sigstore bundle attached as an OCI referrer,
# and `tkmctl verify` must find and verify it:
#   - on the e2e registry (Debian's registry 2.8: no referrers API, so cosign
#     and tkm use the "sha256-<hex>" tag schema);
#   - on go-containerregistry's registry with the referrers API on
#     (hack/testbin referrers-registry, on a loopback port of its own);
# and tell apart: not signed (where it looked), a wrong key (its id), a
# bundle for another image, classic (.sig) and bundle signatures on one
# image (either key satisfies the policy; tkmctl says which).
source "$(dirname "$0")/lib.sh"

COSIGN3=$("$TKM_SOURCE_DIR/hack/testbin/build.sh" --path cosign3)
CRANE=$("$TKM_SOURCE_DIR/hack/testbin/build.sh" --path crane)
RREG=$("$TKM_SOURCE_DIR/hack/testbin/build.sh" --path referrers-registry)
TKMCTL=$TKM_BUILD_DIR/cli/tkmctl
[[ -x $TKMCTL ]] || fail "no tkmctl in $TKM_BUILD_DIR"
export COSIGN_PASSWORD=
export COSIGN_YES=true
cd "$E2E_TMP"
OFFLINE=(--use-signing-config=false --tlog-upload=false)

step "keys"
expect_ok "cosign3 generate-key-pair" "$COSIGN3" generate-key-pair
mkdir other third
(cd other && "$COSIGN3" generate-key-pair >/dev/null 2>&1)
(cd third && "$COSIGN3" generate-key-pair >/dev/null 2>&1)
[[ -s cosign.pub && -s other/cosign.pub && -s third/cosign.pub ]] || fail "cosign did not write the key pairs"

step "a registry with the OCI referrers API, on loopback"
port=$((20000 + RANDOM % 20000))
"$RREG" "127.0.0.1:$port" >rreg.log 2>&1 &
rreg_pid=$!
e2e_on_exit "kill $rreg_pid"
wait_for 20 "referrers registry answers" curl -sf "http://127.0.0.1:$port/v2/"
RREG_HOST=127.0.0.1:$port

fx=$TKM_FIXTURES/triton-cache
for host in "$TKM_REGISTRY" "$RREG_HOST"; do
  if [[ $host == "$RREG_HOST" ]]; then where="referrers"; else where="tag schema"; fi
  repo=$host/e2e-trust3-$RANDOM
  step "[$where] two images in $repo"
  expect_ok "push a" "$CRANE" append -f "$fx/triton-3.6.0-cuda-sm90-binary-only.tar.gz" -t "$repo/a:v1"
  expect_ok "push b" "$CRANE" append -f "$fx/triton-3.6.0-cuda-sm90.tar.gz" -t "$repo/b:v1"
  DA=$("$CRANE" digest "$repo/a:v1")
  DB=$("$CRANE" digest "$repo/b:v1")
  [[ $DA == sha256:* && $DB == sha256:* && $DA != "$DB" ]] || fail "bad digests '$DA' '$DB'"

  step "[$where] unsigned"
  expect_fail "verify b (unsigned)" "$TKMCTL" verify "$repo/b:v1" --key cosign.pub
  assert_contains "$OUT" "is not signed: no signature found" "unsigned reason"
  assert_contains "$OUT" "sha256-${DB#sha256:}.sig (not found)" "names the .sig tag it looked at"
  if [[ $where == referrers ]]; then
    assert_contains "$OUT" "the referrers API (/v2/" "names the referrers API"
  else
    assert_contains "$OUT" "the referrers API (none on this registry), the tag" "says the registry has no referrers API"
    assert_contains "$OUT" ":sha256-${DB#sha256:} (not found)" "names the tag-schema tag"
  fi

  step "[$where] cosign v3 signs a (bundle, default format)"
  expect_ok "cosign3 sign" "$COSIGN3" sign --key cosign.key "${OFFLINE[@]}" -y "$repo/a@$DA"
  expect_ok "cosign3 itself verifies" "$COSIGN3" verify --key cosign.pub --insecure-ignore-tlog=true "$repo/a@$DA"
  if [[ $where == referrers ]]; then
    idx=$(curl -sf "http://$RREG_HOST/v2/${repo#*/}/a/referrers/$DA")
    assert_contains "$idx" "\"digest\":\"sha256:" "the referrers API lists it"
  else
    expect_ok "the tag-schema index exists" "$CRANE" manifest "$repo/a:sha256-${DA#sha256:}"
  fi

  step "[$where] tkmctl verify accepts the bundle"
  expect_ok "verify a" "$TKMCTL" verify "$repo/a:v1" --key cosign.pub
  assert_contains "$OUT" "$repo/a:v1@$DA" "prints the verified digest"
  assert_contains "$OUT" "Sigstore bundle (DSSE) from the $where" "says the format and where"
  json=$("$TKMCTL" verify "$repo/a@$DA" --key cosign.pub -o json 2>/dev/null)
  assert_contains "$json" "\"source\": \"$where\"" "json source"
  assert_contains "$json" "\"bundleMediaType\": \"application/vnd.dev.sigstore.bundle.v0.3+json\"" "json media type"

  step "[$where] wrong key"
  expect_fail "verify a with another key" "$TKMCTL" verify "$repo/a:v1" --key other/cosign.pub
  assert_contains "$OUT" "signature does not verify with key sha256:" "wrong-key reason"
  assert_not_contains "$OUT" "is not signed" "a wrong key is not 'unsigned'"

  step "[$where] classic and bundle on one image"
  expect_ok "cosign3 sign --new-bundle-format=false with the other key" \
    "$COSIGN3" sign --key other/cosign.key "${OFFLINE[@]}" --new-bundle-format=false -y "$repo/a@$DA"
  expect_ok "the .sig tag exists" "$CRANE" manifest "$repo/a:sha256-${DA#sha256:}.sig"
  expect_ok "verify a with the other key (classic)" "$TKMCTL" verify "$repo/a:v1" --key other/cosign.pub -o json
  assert_contains "$OUT" "\"source\": \".sig tag\"" "the classic signature satisfied the policy"
  assert_contains "$OUT" "\"signaturesFound\": 2" "both signatures found"
  assert_contains "$OUT" "\"dockerReference\": \"$repo/a\"" "docker-reference reported"
  expect_ok "verify a with the first key (bundle)" "$TKMCTL" verify "$repo/a:v1" --key cosign.pub -o json
  assert_contains "$OUT" "\"source\": \"$where\"" "the bundle satisfied the policy"
  expect_ok "either key" "$TKMCTL" verify "$repo/a:v1" --key other/cosign.pub,cosign.pub
  expect_fail "a third key" "$TKMCTL" verify "$repo/a:v1" --key third/cosign.pub
  assert_contains "$OUT" "none of the 2 signatures satisfies the policy" "counts the signatures"
  assert_contains "$OUT" "(.sig tag): signature does not verify with key" "names the classic failure"

  step "[$where] a's signatures copied to b"
  expect_ok "copy a's .sig to b" "$CRANE" copy "$repo/a:sha256-${DA#sha256:}.sig" "$repo/b:sha256-${DB#sha256:}.sig"
  expect_fail "verify b with a's classic signature" "$TKMCTL" verify "$repo/b:v1" --key other/cosign.pub
  assert_contains "$OUT" "signature is for $DA, image is $DB" "other-digest reason"

  step "[$where] docker-reference: the image copied to another repository"
  expect_ok "copy a to c" "$CRANE" copy "$repo/a@$DA" "$repo/c:v1"
  expect_ok "copy the .sig" "$CRANE" copy "$repo/a:sha256-${DA#sha256:}.sig" "$repo/c:sha256-${DA#sha256:}.sig"
  expect_fail "verify c (signed for a)" "$TKMCTL" verify "$repo/c:v1" --key other/cosign.pub
  assert_contains "$OUT" "names the image $repo/a, not ${repo#*/}/c" "cross-repository reason"
  expect_ok "verify c --allow-cross-repository" "$TKMCTL" verify "$repo/c:v1" --key other/cosign.pub --allow-cross-repository
done

step "a bundle for another image, attached through the tag schema"
repo=$TKM_REGISTRY/e2e-trust3-$RANDOM
expect_ok "push x" "$CRANE" append -f "$fx/triton-3.6.0-cuda-sm90-binary-only.tar.gz" -t "$repo/x:v1"
expect_ok "push y" "$CRANE" append -f "$fx/triton-3.6.0-cuda-sm90.tar.gz" -t "$repo/y:v1"
DX=$("$CRANE" digest "$repo/x:v1")
DY=$("$CRANE" digest "$repo/y:v1")
expect_ok "cosign3 sign x" "$COSIGN3" sign --key cosign.key "${OFFLINE[@]}" -y "$repo/x@$DX"
expect_ok "x's referrers index copied to y's tag" "$CRANE" copy "$repo/x:sha256-${DX#sha256:}" "$repo/y:sha256-${DY#sha256:}"
expect_fail "verify y" "$TKMCTL" verify "$repo/y:v1" --key cosign.pub
assert_contains "$OUT" "signature is for $DX, image is $DY" "bundle subject mismatch reason"

e2e_done
