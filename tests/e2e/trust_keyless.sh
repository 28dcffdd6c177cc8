#!/usr/bin/env bash
# trust_keyless: keyless Sigstore bundles made offline by hack/testbin
# sigstore-testca (sigstore-go's virtual Sigstore: a test Fulcio CA and a test
# Rekor, with a matching trusted_root.json) for an image in a real registry.
# `tkmctl verify --trusted-root` must accept the bundle for the right
# identity and refuse, each with its own reason: another identity or issuer,
# another trusted root (untrusted chain/log), another CT log (the embedded
# SCT), a tampered inclusion proof, a tampered SET, a policy with no identity. The bundle is also attached to the
# image as cosign v3 does (an OCI referrer on the referrers registry, the
# "sha256-<hex>" tag-schema index on Debian's registry 2.8) and found there.
source "$(dirname "$0")/lib.sh"

CRANE=$("$TKM_SOURCE_DIR/hack/testbin/build.sh" --path crane)
COSIGN3=$("$TKM_SOURCE_DIR/hack/testbin/build.sh" --path cosign3)
RREG=$("$TKM_SOURCE_DIR/hack/testbin/build.sh" --path referrers-registry)
TESTCA=$("$TKM_SOURCE_DIR/hack/testbin/build.sh" --path sigstore-testca)
TKMCTL=$TKM_BUILD_DIR/cli/tkmctl
[[ -x $TKMCTL ]] || fail "no tkmctl in $TKM_BUILD_DIR"
cd "$E2E_TMP"
ID=builder@example.test
ISS=https://issuer.example.test
BT=application/vnd.dev.sigstore.bundle.v0.3+json

port=$((20000 + RANDOM % 20000))
"$RREG" "127.0.0.1:$port" >rreg.log 2>&1 &
rreg_pid=$!
e2e_on_exit "kill $rreg_pid"
wait_for 20 "referrers registry answers" curl -sf "http://127.0.0.1:$port/v2/"
RREG_HOST=127.0.0.1:$port

# push_blob HOST REPO FILE: monolithic upload (POST, then PUT ?digest=).
push_blob() {
  local d loc
  d=sha256:$(sha256sum "$3" | cut -d' ' -f1)
  loc=$(curl -sf -D - -o /dev/null -X POST "http://$1/v2/$2/blobs/uploads/" | tr -d '\r' |
    sed -n 's/^[Ll]ocation: //p')
  [[ $loc == http* ]] || loc=http://$1$loc
  [[ $loc == *\?* ]] && loc="$loc&digest=$d" || loc="$loc?digest=$d"
  curl -sf -X PUT -H 'Content-Type: application/octet-stream' --data-binary "@$3" "$loc" >/dev/null
  echo "$d"
}
# attach HOST REPO IMAGE_DIGEST BUNDLE MODE: a referrer manifest as cosign v3
# writes it; MODE=tag-schema also writes the index tagged sha256-<hex>.
attach() {
  local host=$1 repo=$2 img=$3 bundle=$4 mode=$5 bd bs cd ms md
  printf '{}' >empty.json
  cd=$(push_blob "$host" "$repo" empty.json)
  bd=$(push_blob "$host" "$repo" "$bundle")
  bs=$(stat -c %s "$bundle")
  ms=$(stat -c %s <(curl -sf -H 'Accept: application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json' "http://$host/v2/$repo/manifests/$img"))
  cat >ref.json <<JSON
{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","artifactType":"$BT","config":{"mediaType":"application/vnd.oci.empty.v1+json","size":2,"digest":"$cd"},"layers":[{"mediaType":"$BT","size":$bs,"digest":"$bd"}],"annotations":{"dev.sigstore.bundle.content":"dsse-envelope","dev.sigstore.bundle.predicateType":"https://sigstore.dev/cosign/sign/v1"},"subject":{"mediaType":"application/vnd.docker.distribution.manifest.v2+json","size":$ms,"digest":"$img"}}
JSON
  md=sha256:$(sha256sum ref.json | cut -d' ' -f1)
  curl -sf -X PUT -H 'Content-Type: application/vnd.oci.image.manifest.v1+json' --data-binary @ref.json "http://$host/v2/$repo/manifests/$md" >/dev/null
  if [[ $mode == tag-schema ]]; then
    cat >idx.json <<JSON
{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","size":$(stat -c %s ref.json),"digest":"$md","artifactType":"$BT","annotations":{"dev.sigstore.bundle.predicateType":"https://sigstore.dev/cosign/sign/v1"}}]}
JSON
    curl -sf -X PUT -H 'Content-Type: application/vnd.oci.image.index.v1+json' --data-binary @idx.json "http://$host/v2/$repo/manifests/sha256-${img#sha256:}" >/dev/null
  fi
}

step "an image and its keyless bundle"
repo=e2e-keyless-$RANDOM/a
expect_ok "push" "$CRANE" append -f "$TKM_FIXTURES/triton-cache/triton-3.6.0-cuda-sm90-binary-only.tar.gz" -t "$TKM_REGISTRY/$repo:v1"
D=$("$CRANE" digest "$TKM_REGISTRY/$repo:v1")
mkdir ca
expect_ok "sigstore-testca" "$TESTCA" ca "$D" "$ID" "$ISS"
KL=(--trusted-root ca/trusted_root.json --certificate-oidc-issuer "$ISS")

step "cosign v3 itself accepts the test bundle (offline, same trusted root, SCT and tlog checked)"
"$CRANE" manifest "$TKM_REGISTRY/$repo@$D" >manifest.json
C3V=("$COSIGN3" verify-blob-attestation --bundle ca/bundle.json --trusted-root ca/trusted_root.json
  --certificate-oidc-issuer "$ISS" --type https://sigstore.dev/cosign/sign/v1)
expect_ok "cosign3 verify-blob-attestation" "${C3V[@]}" --certificate-identity "$ID" manifest.json
expect_fail "cosign3, another identity" "${C3V[@]}" --certificate-identity someone@example.test manifest.json
expect_ok "cosign3 verify-blob (the message-signature bundle)" "$COSIGN3" verify-blob --bundle ca/bundle-message.json \
  --trusted-root ca/trusted_root.json --certificate-oidc-issuer "$ISS" --certificate-identity "$ID" manifest.json

step "the bundle file verifies for the right identity"
expect_ok "verify --bundle, exact identity" "$TKMCTL" verify "$TKM_REGISTRY/$repo:v1" --bundle ca/bundle.json "${KL[@]}" --certificate-identity "$ID" -o json
assert_contains "$OUT" "\"certificateIdentity\": \"$ID\"" "names the identity"
assert_contains "$OUT" "\"certificateOidcIssuer\": \"$ISS\"" "names the issuer"
assert_contains "$OUT" "\"tlogIndex\": 5" "names the log index"
expect_ok "verify --bundle, message signature (v0.2, hashedrekord)" "$TKMCTL" verify "$TKM_REGISTRY/$repo:v1" --bundle ca/bundle-message.json "${KL[@]}" --certificate-identity "$ID" -o json
assert_contains "$OUT" "\"format\": \"Sigstore bundle (message signature)\"" "message-signature format"
expect_ok "verify --bundle, identity regexp" "$TKMCTL" verify "$TKM_REGISTRY/$repo:v1" --bundle ca/bundle.json "${KL[@]}" --certificate-identity-regexp '.*@example\.test'

step "refusals, each with its reason"
expect_fail "another identity" "$TKMCTL" verify "$TKM_REGISTRY/$repo:v1" --bundle ca/bundle.json "${KL[@]}" --certificate-identity someone@example.test
assert_contains "$OUT" "signed by $ID (issuer $ISS), an identity the policy does not allow" "identity reason"
expect_fail "another issuer" "$TKMCTL" verify "$TKM_REGISTRY/$repo:v1" --bundle ca/bundle.json --trusted-root ca/trusted_root.json --certificate-oidc-issuer https://accounts.example.test --certificate-identity "$ID"
assert_contains "$OUT" "an identity the policy does not allow" "issuer reason"
expect_fail "no identity at all" "$TKMCTL" verify "$TKM_REGISTRY/$repo:v1" --bundle ca/bundle.json --trusted-root ca/trusted_root.json
assert_contains "$OUT" "any signer at all is not a policy" "keyless without identity is a configuration error"
expect_fail "another trusted root" "$TKMCTL" verify "$TKM_REGISTRY/$repo:v1" --bundle ca/bundle.json --trusted-root ca/other_trusted_root.json --certificate-oidc-issuer "$ISS" --certificate-identity "$ID"
assert_contains "$OUT" "is not in the trusted root" "untrusted log reason"
jq --slurpfile o ca/other_trusted_root.json '.ctlogs = $o[0].ctlogs' ca/trusted_root.json >ct_root.json
expect_fail "a trusted root with another CT log" "$TKMCTL" verify "$TKM_REGISTRY/$repo:v1" --bundle ca/bundle.json --trusted-root ct_root.json --certificate-oidc-issuer "$ISS" --certificate-identity "$ID"
assert_contains "$OUT" "is not publicly logged: no SCT is from a CT log of the trusted root" "SCT reason"
jq '.verificationMaterial.tlogEntries[0].inclusionProof.hashes[1] = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="' ca/bundle.json >proof.json
expect_fail "tampered inclusion proof" "$TKMCTL" verify "$TKM_REGISTRY/$repo:v1" --bundle proof.json "${KL[@]}" --certificate-identity "$ID"
assert_contains "$OUT" "the inclusion proof does not verify" "inclusion proof reason"
jq '.verificationMaterial.tlogEntries[0].logIndex = "6"' ca/bundle.json >set.json
expect_fail "tampered log index (SET)" "$TKMCTL" verify "$TKM_REGISTRY/$repo:v1" --bundle set.json "${KL[@]}" --certificate-identity "$ID"
assert_contains "$OUT" "signed entry timestamp (SET) does not verify" "SET reason"
openssl ecparam -name prime256v1 -genkey -noout 2>/dev/null | openssl ec -pubout -out k.pub 2>/dev/null
expect_fail "keyless bundle, a key policy" "$TKMCTL" verify "$TKM_REGISTRY/$repo:v1" --bundle ca/bundle.json --key k.pub
assert_contains "$OUT" "keyless signature by $ID (issuer $ISS), and the policy has no trusted root" "names the keyless signer"

step "attached as cosign v3 does, found on both registries"
attach "$TKM_REGISTRY" "$repo" "$D" ca/bundle.json tag-schema
expect_ok "verify (tag schema)" "$TKMCTL" verify "$TKM_REGISTRY/$repo:v1" "${KL[@]}" --certificate-identity "$ID"
assert_contains "$OUT" "from the tag schema" "found through the tag schema"
assert_contains "$OUT" "certificate for $ID (issuer $ISS), tlog index 5" "says who signed"
expect_ok "copy the image to the referrers registry" "$CRANE" copy "$TKM_REGISTRY/$repo@$D" "$RREG_HOST/$repo:v1"
attach "$RREG_HOST" "$repo" "$D" ca/bundle.json referrers
expect_ok "verify (referrers)" "$TKMCTL" verify "$RREG_HOST/$repo:v1" "${KL[@]}" --certificate-identity "$ID"
assert_contains "$OUT" "from the referrers" "found through the referrers API"
expect_fail "verify (referrers), another identity" "$TKMCTL" verify "$RREG_HOST/$repo:v1" "${KL[@]}" --certificate-identity someone@example.test
assert_contains "$OUT" "an identity the policy does not allow" "identity reason through discovery"
assert_not_contains "$OUT" "is not signed" "not reported as unsigned"

e2e_done
