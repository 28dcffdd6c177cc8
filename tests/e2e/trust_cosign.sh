#!/usr/bin/env bash
# trust_cosign: real cosign (hack/testbin, v2.6.x) signs images in the e2e
# registry with a key; `tkmctl verify` must accept the signed digest and
# reject, each with a clear reason: an unsigned image, a wrong key, a
# signature copied from another image (signature for another digest), and a
# tag moved to a modified manifest (reliability.md checklist 16-17).
source "$(dirname "$0")/lib.sh"

COSIGN=$("$TKM_SOURCE_DIR/hack/testbin/build.sh" --path cosign)
CRANE=$("$TKM_SOURCE_DIR/hack/testbin/build.sh" --path crane)
TKMCTL=$TKM_BUILD_DIR/cli/tkmctl
[[ -x $TKMCTL ]] || fail "no tkmctl in $TKM_BUILD_DIR"
export COSIGN_PASSWORD=
export COSIGN_YES=true
cd "$E2E_TMP"

step "keys"
expect_ok "cosign generate-key-pair" "$COSIGN" generate-key-pair
mkdir other && (cd other && "$COSIGN" generate-key-pair >/dev/null 2>&1)
[[ -s cosign.pub && -s other/cosign.pub ]] || fail "cosign did not write the key pairs"

step "two images"
repo=$TKM_REGISTRY/e2e-trust-$RANDOM
fx=$TKM_FIXTURES/triton-cache
expect_ok "push image a" "$CRANE" append -f "$fx/triton-3.6.0-cuda-sm90-binary-only.tar.gz" -t "$repo/a:v1"
expect_ok "push image b" "$CRANE" append -f "$fx/triton-3.6.0-cuda-sm90.tar.gz" -t "$repo/b:v1"
DA=$("$CRANE" digest "$repo/a:v1")
DB=$("$CRANE" digest "$repo/b:v1")
[[ $DA == sha256:* && $DB == sha256:* && $DA != "$DB" ]] || fail "bad digests '$DA' '$DB'"

step "sign a with cosign (key, no tlog)"
expect_ok "cosign sign" "$COSIGN" sign --key cosign.key --tlog-upload=false -y "$repo/a@$DA"
expect_ok "cosign itself verifies" "$COSIGN" verify --key cosign.pub --insecure-ignore-tlog=true "$repo/a@$DA"

step "tkmctl verify accepts the signed image"
expect_ok "verify a by tag" "$TKMCTL" verify "$repo/a:v1" --key cosign.pub
assert_contains "$OUT" "$repo/a:v1@$DA" "prints the verified digest"
assert_contains "$OUT" "ECDSA P-256" "names the key type"
expect_ok "verify a by digest" "$TKMCTL" verify "$repo/a@$DA" --key cosign.pub
assert_contains "$OUT" "@$DA" "digest form"
json=$("$TKMCTL" verify "$repo/a:v1" --key cosign.pub -o json 2>/dev/null)
assert_contains "$json" "\"digest\": \"$DA\"" "json digest"
assert_contains "$json" "\"verified\": true" "json verified"

step "unsigned image"
expect_fail "verify b (unsigned)" "$TKMCTL" verify "$repo/b:v1" --key cosign.pub
assert_contains "$OUT" "is not signed" "unsigned reason"
assert_contains "$OUT" "sha256-${DB#sha256:}.sig" "names the signature tag"

step "wrong key"
expect_fail "verify a with another key" "$TKMCTL" verify "$repo/a:v1" --key other/cosign.pub
assert_contains "$OUT" "signature does not verify with key sha256:" "wrong-key reason"

step "signature copied from a to b"
expect_ok "copy a's .sig to b's sig tag" "$CRANE" copy "$repo/a:sha256-${DA#sha256:}.sig" "$repo/b:sha256-${DB#sha256:}.sig"
expect_fail "verify b with a's signature" "$TKMCTL" verify "$repo/b:v1" --key cosign.pub
assert_contains "$OUT" "signature is for $DA, image is $DB" "other-digest reason"

step "tag moved to a modified manifest"
expect_ok "mutate a:v1" "$CRANE" mutate "$repo/a:v1" --annotation tkm.e2e/tampered=yes -t "$repo/a:v1"
DA2=$("$CRANE" digest "$repo/a:v1")
[[ $DA2 != "$DA" ]] || fail "mutate did not change the digest"
expect_fail "verify moved tag" "$TKMCTL" verify "$repo/a:v1" --key cosign.pub
assert_contains "$OUT" "is not signed" "moved tag has no signature"
expect_ok "copy the old .sig to the new digest" "$CRANE" copy "$repo/a:sha256-${DA#sha256:}.sig" "$repo/a:sha256-${DA2#sha256:}.sig"
expect_fail "verify moved tag with the old signature" "$TKMCTL" verify "$repo/a:v1" --key cosign.pub
assert_contains "$OUT" "signature is for $DA, image is $DA2" "tampered-manifest reason"
expect_ok "the old digest still verifies" "$TKMCTL" verify "$repo/a@$DA" --key cosign.pub

step "bad key file"
printf 'not a key\n' >bad.pub
expect_fail "verify with a junk key" "$TKMCTL" verify "$repo/a@$DA" --key bad.pub
assert_contains "$OUT" "not a PEM public key" "junk-key reason"
expect_fail "verify with the private key" "$TKMCTL" verify "$repo/a@$DA" --key cosign.key
assert_contains "$OUT" "this is a private key" "private-key reason"

e2e_done
