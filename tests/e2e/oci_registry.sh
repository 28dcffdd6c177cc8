#!/usr/bin/env bash
# oci_registry.sh - tkmctl build/push/pull/extract against real registries:
#   1. build the real Triton 3.6.0 fixture cache, push it, pull it back: same digest, labels;
#      extract it: every file equal to the source (group files rewritten to the mount path);
#   2. a registry with htpasswd basic auth: works with a docker config.json, fails clearly
#      without one and with wrong credentials;
#   3. a bearer-token registry (token service in front of a real registry): token flow;
#   4. tampered blob and manifest in the registry's storage: rejected naming the digest.
source "$(dirname "$0")/lib.sh"

T=$TKM_BUILD_DIR/cli/tkmctl
[[ -x $T ]] || fail "tkmctl not built at $T"
REG=$TKM_REGISTRY
FIX=triton-3.6.0-cuda-sm90

step "unpack the fixture cache"
mkdir -p "$E2E_TMP/src"
tar -xzf "$TKM_FIXTURES/triton-cache/$FIX.tar.gz" -C "$E2E_TMP/src"
CACHE=$E2E_TMP/src/$(ls "$E2E_TMP/src")
[[ -d $CACHE ]] || fail "fixture did not unpack to one directory"

step "build + push"
expect_ok "build the fixture into a layout" "$T" build "$CACHE" --output "$E2E_TMP/img" --tag sm90 -o json
BUILT=$(jq -r .manifest <<<"$OUT")
assert_eq 4 "$(jq -r .entries <<<"$OUT")" "entry count of the fixture"
expect_ok "build again: same digest" "$T" build "$CACHE" --output "$E2E_TMP/img2" --tag sm90 -o json
assert_eq "$BUILT" "$(jq -r .manifest <<<"$OUT")" "deterministic image digest"
expect_ok "push the layout" "$T" push "$E2E_TMP/img" "$REG/e2e/oci-cache:sm90" --tag sm90 -o json
assert_eq "$BUILT" "$(jq -r .digest <<<"$OUT")" "pushed digest"
expect_ok "build --push in one go" "$T" build "$CACHE" --push "$REG/e2e/oci-cache2:v1" -o json
assert_contains "$(jq -r .pushed <<<"$OUT")" "@$BUILT" "build --push reports the digest"

step "pull"
expect_ok "pull by tag" "$T" pull "$REG/e2e/oci-cache:sm90" --output "$E2E_TMP/pulled" -o json
assert_eq "$BUILT" "$(jq -r .digest <<<"$OUT")" "pulled manifest digest"
assert_eq 4 "$(jq -r '.labels["cache.triton.image/entry-count"]' <<<"$OUT")" "entry-count label"
SIZE=$(find "$CACHE" -type f -printf '%s\n' | awk '{s+=$1} END {print s}')
assert_eq "$SIZE" "$(jq -r '.labels["cache.triton.image/cache-size-bytes"]' <<<"$OUT")" "cache-size-bytes label"
assert_eq '[{"backend":"cuda","arch":"90","warp_size":32}]' \
  "$(jq -c '.labels["cache.triton.image/summary"] | fromjson | .targets' <<<"$OUT")" "summary targets"
REGDIG=$(curl -sf -I -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
  "http://$REG/v2/e2e/oci-cache/manifests/sm90" | tr -d '\r' | awk -F': ' 'tolower($1)=="docker-content-digest"{print $2}')
assert_eq "$BUILT" "$REGDIG" "registry's own digest for the tag"
expect_ok "pull by digest" "$T" pull "$REG/e2e/oci-cache@$BUILT" --output "$E2E_TMP/pulled2" -o json
assert_eq "$BUILT" "$(jq -r .digest <<<"$OUT")" "pull by digest"
diff -r "$E2E_TMP/img/blobs" "$E2E_TMP/pulled/blobs" >/dev/null || fail "pulled blobs differ from the built ones"
pass "pulled blobs equal the built blobs"

step "index: linux/amd64 is picked, attestations and other platforms skipped"
mkdir -p "$E2E_TMP/src2"
tar -xzf "$TKM_FIXTURES/triton-cache/triton-3.6.0-cuda-sm90-binary-only.tar.gz" -C "$E2E_TMP/src2"
expect_ok "push a second image" "$T" build "$E2E_TMP/src2/$(ls "$E2E_TMP/src2")" --push "$REG/e2e/oci-cache:other" -o json
OTHER=$(jq -r .manifest <<<"$OUT")
OSIZE=$(curl -sf -H 'Accept: application/vnd.oci.image.manifest.v1+json' "http://$REG/v2/e2e/oci-cache/manifests/$OTHER" | wc -c)
BSIZE=$(stat -c %s "$E2E_TMP/img/blobs/sha256/${BUILT#sha256:}")
MT=application/vnd.oci.image.manifest.v1+json
IDX=$(jq -nc --arg o "$OTHER" --arg b "$BUILT" --argjson os "$OSIZE" --argjson bs "$BSIZE" --arg mt "$MT" \
  '{schemaVersion:2,mediaType:"application/vnd.oci.image.index.v1+json",manifests:[
    {mediaType:$mt,digest:$o,size:$os,platform:{os:"unknown",architecture:"unknown"},
     annotations:{"vnd.docker.reference.type":"attestation-manifest"}},
    {mediaType:$mt,digest:$o,size:$os,platform:{os:"linux",architecture:"arm64",variant:"v8"}},
    {mediaType:$mt,digest:$b,size:$bs,platform:{os:"linux",architecture:"amd64"}}]}')
curl -sf -X PUT -H 'Content-Type: application/vnd.oci.image.index.v1+json' --data-binary "$IDX" \
  "http://$REG/v2/e2e/oci-cache/manifests/multi" >/dev/null || fail "could not push the index"
expect_ok "pull through an index" "$T" pull "$REG/e2e/oci-cache:multi" --output "$E2E_TMP/ipull" -o json
WANT=$BUILT
[[ $(uname -m) == aarch64 ]] && WANT=$OTHER
assert_eq "$WANT" "$(jq -r .digest <<<"$OUT")" "index resolved to this machine's linux manifest"
assert_contains "$(jq -r .index <<<"$OUT")" "sha256:" "index digest reported"
# one resolver: inspect (and check) reach the same manifest through the same index
expect_ok "inspect through the index" "$T" inspect "$REG/e2e/oci-cache:multi" -o json
assert_eq "$WANT" "$(jq -r .manifestDigest <<<"$OUT")" "inspect pins the same manifest as pull"

step "extract"
expect_ok "extract from the registry" "$T" extract "$REG/e2e/oci-cache:sm90" --output "$E2E_TMP/x" \
  --mount-path /tmp/tcache -o json
assert_eq 36 "$(jq -r .files <<<"$OUT")" "files extracted"
assert_eq 4 "$(jq -r .groups_rewritten <<<"$OUT")" "group files rewritten"
diff -r -x '__grp__*' "$CACHE" "$E2E_TMP/x" || fail "extracted cache differs from the source"
pass "every non-group file is byte-for-byte equal to the source"
for g in "$CACHE"/*/__grp__*.json; do
  rel=${g#"$CACHE"/}
  [[ $(jq -S . "$g") == $(jq -S . "$E2E_TMP/x/$rel") ]] || fail "group $rel differs in content"
done
pass "group files (mount path = the producer's /tmp/tcache) have the same content"
expect_ok "extract from the layout to its own path" "$T" extract "$E2E_TMP/img" --tag sm90 --output "$E2E_TMP/y" -o json
Y=$(cd "$E2E_TMP/y" && pwd)
grep -q "\"$Y/52YLWQSH5NKVBZHLAIWFDCXR4CYJL53TKUIEQ5AYQ4DTYQ45LZYQ/add_kernel.cubin\"" \
  "$E2E_TMP/y/52YLWQSH5NKVBZHLAIWFDCXR4CYJL53TKUIEQ5AYQ4DTYQ45LZYQ/__grp__add_kernel.json" ||
  fail "group file not rewritten to $Y"
pass "group child paths point at the extraction dir"
expect_fail "extract into an existing dir" "$T" extract "$E2E_TMP/img" --output "$E2E_TMP/y"
assert_contains "$OUT" "exists" "existing output refused"

step "basic auth registry"
htpasswd -Bbn tkm e2e-pass >"$E2E_TMP/htpasswd"
AREG=$("$TKM_SOURCE_DIR/hack/registry.sh" start "$E2E_TMP/areg" --htpasswd "$E2E_TMP/htpasswd")
e2e_on_exit "'$TKM_SOURCE_DIR/hack/registry.sh' stop '$E2E_TMP/areg'"
mkdir -p "$E2E_TMP/dc" "$E2E_TMP/nodc"
printf '{"auths":{"http://%s/v1/":{"auth":"%s"}}}' "$AREG" "$(printf tkm:e2e-pass | base64)" >"$E2E_TMP/dc/config.json"
printf '{"auths":{"%s":{"auth":"%s"}}}' "$AREG" "$(printf tkm:wrong | base64)" >"$E2E_TMP/bad.json"
expect_fail "push without credentials" env DOCKER_CONFIG="$E2E_TMP/nodc" "$T" push "$E2E_TMP/img" "$AREG/e2e/c:v1"
assert_contains "$OUT" "401 Unauthorized (no credentials found for this registry" "clear no-credentials error"
expect_fail "push with wrong credentials" "$T" push "$E2E_TMP/img" "$AREG/e2e/c:v1" --auth-file "$E2E_TMP/bad.json"
assert_contains "$OUT" "the credentials for $AREG from $E2E_TMP/bad.json were rejected" "clear bad-credentials error"
expect_ok "push with DOCKER_CONFIG credentials" env DOCKER_CONFIG="$E2E_TMP/dc" "$T" push "$E2E_TMP/img" "$AREG/e2e/c:v1" -o json
assert_eq "$BUILT" "$(jq -r .digest <<<"$OUT")" "digest through basic auth"
expect_ok "pull with credentials" env DOCKER_CONFIG="$E2E_TMP/dc" "$T" pull "$AREG/e2e/c:v1" --output "$E2E_TMP/ap" -o json
assert_eq "$BUILT" "$(jq -r .digest <<<"$OUT")" "pulled through basic auth"
expect_fail "pull anonymously" env DOCKER_CONFIG="$E2E_TMP/dc" "$T" pull "$AREG/e2e/c:v1" --output "$E2E_TMP/ap2" --anonymous
assert_contains "$OUT" "401" "anonymous pull refused"

step "bearer token registry"
BREG_UP=$("$TKM_SOURCE_DIR/hack/registry.sh" start "$E2E_TMP/breg")
e2e_on_exit "'$TKM_SOURCE_DIR/hack/registry.sh' stop '$E2E_TMP/breg'"
python3 "$TKM_SOURCE_DIR/tests/e2e/oci_bearer_proxy.py" "$BREG_UP" tok e2e-tok >"$E2E_TMP/proxy.addr" 2>"$E2E_TMP/proxy.log" &
PROXY_PID=$!
e2e_on_exit "kill $PROXY_PID"
wait_for 10 "token proxy up" test -s "$E2E_TMP/proxy.addr"
BREG=$(head -1 "$E2E_TMP/proxy.addr")
printf '{"auths":{"%s":{"auth":"%s"}}}' "$BREG" "$(printf tok:e2e-tok | base64)" >"$E2E_TMP/tok.json"
expect_fail "bearer push without credentials" env DOCKER_CONFIG="$E2E_TMP/nodc" "$T" push "$E2E_TMP/img" "$BREG/e2e/t:v1"
assert_contains "$OUT" "token request" "token service refusal is named"
expect_ok "bearer push with credentials" "$T" push "$E2E_TMP/img" "$BREG/e2e/t:v1" --auth-file "$E2E_TMP/tok.json" -o json
assert_eq "$BUILT" "$(jq -r .digest <<<"$OUT")" "digest through the token flow"
expect_ok "bearer extract" "$T" extract "$BREG/e2e/t:v1" --auth-file "$E2E_TMP/tok.json" --output "$E2E_TMP/bx" -o json
diff -r -x '__grp__*' "$CACHE" "$E2E_TMP/bx" || fail "bearer-extracted cache differs"
pass "bearer-pulled cache equals the source"

printf '{"auths":{"%s":{"identitytoken":"e2e-tok"}}}' "$BREG" >"$E2E_TMP/idt.json"
printf '{"auths":{"%s":{"identitytoken":"stale"}}}' "$BREG" >"$E2E_TMP/idt-bad.json"
expect_ok "pull with an identitytoken (refresh_token grant)" "$T" pull "$BREG/e2e/t:v1" --auth-file "$E2E_TMP/idt.json" --output "$E2E_TMP/ip" -o json
assert_eq "$BUILT" "$(jq -r .digest <<<"$OUT")" "digest through the refresh-token flow"
expect_fail "pull with a stale identitytoken" "$T" pull "$BREG/e2e/t:v1" --auth-file "$E2E_TMP/idt-bad.json" --output "$E2E_TMP/ip2"
assert_contains "$OUT" "token request" "refused refresh token named"

step "flaky registry: 503 on manifests, blobs cut off halfway (first time each)"
python3 "$TKM_SOURCE_DIR/tests/e2e/oci_bearer_proxy.py" "$BREG_UP" tok e2e-tok flaky >"$E2E_TMP/flaky.addr" 2>"$E2E_TMP/flaky.log" &
FLAKY_PID=$!
e2e_on_exit "kill $FLAKY_PID"
wait_for 10 "flaky proxy up" test -s "$E2E_TMP/flaky.addr"
FREG=$(head -1 "$E2E_TMP/flaky.addr")
printf '{"auths":{"%s":{"auth":"%s"}}}' "$FREG" "$(printf tok:e2e-tok | base64)" >"$E2E_TMP/flaky.json"
expect_ok "pull retries and restarts partial blobs" "$T" -v pull "$FREG/e2e/t:v1" --auth-file "$E2E_TMP/flaky.json" --output "$E2E_TMP/fp"
assert_contains "$OUT" "HTTP 503, retrying" "503 retried"
assert_contains "$OUT" "retrying in" "cut-off blob retried"
diff -r "$E2E_TMP/img/blobs" "$E2E_TMP/fp/blobs" >/dev/null || fail "blobs pulled through the flaky registry differ"
pass "blobs pulled through the flaky registry are intact"

step "tampered content"
TREG=$BREG_UP
BLOBS=$E2E_TMP/breg/data/docker/registry/v2/blobs/sha256
LAYER=$(jq -r '.layers[0].digest' "$E2E_TMP/img/blobs/sha256/${BUILT#sha256:}")
LHEX=${LAYER#sha256:}
LF=$BLOBS/${LHEX:0:2}/$LHEX/data
[[ -f $LF ]] || fail "layer data not found at $LF"
cp "$LF" "$E2E_TMP/layer.orig"
printf 'X' | dd of="$LF" bs=1 seek=1000 conv=notrunc 2>/dev/null
expect_fail "pull of a tampered layer" "$T" pull "$TREG/e2e/t:v1" --output "$E2E_TMP/tp"
assert_contains "$OUT" "blob $LAYER" "error names the layer digest"
assert_contains "$OUT" "digest mismatch" "error says digest mismatch"
[[ ! -e $E2E_TMP/tp/blobs/sha256/$LHEX ]] || fail "tampered blob left in the layout"
pass "no unverified blob left behind"
[[ ! -e $E2E_TMP/tp && -z $(find "$E2E_TMP" -mindepth 1 -maxdepth 1 -name '*.tp.pull-*') ]] || fail "the failed pull left a directory"
pass "the failed pull left no layout and no staging directory"
cp "$E2E_TMP/layer.orig" "$LF"
MHEX=${BUILT#sha256:}
MF=$BLOBS/${MHEX:0:2}/$MHEX/data
cp "$MF" "$E2E_TMP/man.orig"
sed -i 's/"schemaVersion":2/"schemaVersion":2 /' "$MF"
# By digest the bytes must hash to it; by tag the digest IS the hash of the bytes served
# (Docker-Content-Digest is never trusted), so the tag now names other content.
expect_fail "pull of a tampered manifest by digest" "$T" pull "$TREG/e2e/t@$BUILT" --output "$E2E_TMP/tm"
assert_contains "$OUT" "manifest" "error is about the manifest"
assert_contains "$OUT" "digest mismatch: expected $BUILT" "error names the expected digest"
[[ ! -e $E2E_TMP/tm ]] || fail "a failed pull left $E2E_TMP/tm behind"
pass "a failed pull leaves no layout directory"
expect_ok "pull of the tampered manifest by tag" "$T" pull "$TREG/e2e/t:v1" --output "$E2E_TMP/tm2" -o json
TAMPERED=$(jq -r .digest <<<"$OUT")
assert_eq "sha256:$(sha256sum "$MF" | cut -d' ' -f1)" "$TAMPERED" "a tag pins the hash of the bytes served"
[[ $TAMPERED != "$BUILT" ]] || fail "the tampered manifest kept the old digest"
pass "the tag resolved to the tampered content's own digest, not the registry's header"
cp "$E2E_TMP/man.orig" "$MF"
expect_ok "pull after restoring" "$T" pull "$TREG/e2e/t:v1" --output "$E2E_TMP/tok"

step "TLS registry (self-signed CA, certificate for IP 127.0.0.1)"
mkdir -p "$E2E_TMP/tls/data"
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=tkm-e2e-ca -keyout "$E2E_TMP/tls/ca.key" \
  -out "$E2E_TMP/tls/ca.crt" -addext basicConstraints=critical,CA:TRUE -addext keyUsage=keyCertSign 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout "$E2E_TMP/tls/srv.key" -out "$E2E_TMP/tls/srv.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\n' >"$E2E_TMP/tls/ext"
openssl x509 -req -in "$E2E_TMP/tls/srv.csr" -CA "$E2E_TMP/tls/ca.crt" -CAkey "$E2E_TMP/tls/ca.key" \
  -CAcreateserial -days 1 -extfile "$E2E_TMP/tls/ext" -out "$E2E_TMP/tls/srv.crt" 2>/dev/null
TPORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$E2E_TMP/tls/config.yml" <<YML
version: 0.1
log: {level: warn, accesslog: {disabled: true}}
storage: {filesystem: {rootdirectory: $E2E_TMP/tls/data}}
http:
  addr: 127.0.0.1:$TPORT
  tls: {certificate: $E2E_TMP/tls/srv.crt, key: $E2E_TMP/tls/srv.key}
YML
setsid docker-registry serve "$E2E_TMP/tls/config.yml" >"$E2E_TMP/tls/log" 2>&1 </dev/null &
TLS_PID=$!
e2e_on_exit "kill $TLS_PID"
wait_for 20 "TLS registry answers" curl -sf --cacert "$E2E_TMP/tls/ca.crt" "https://127.0.0.1:$TPORT/v2/"
expect_ok "push over TLS with --ca-file" "$T" push "$E2E_TMP/img" "127.0.0.1:$TPORT/e2e/tls:v1" --ca-file "$E2E_TMP/tls/ca.crt" -o json
assert_eq "$BUILT" "$(jq -r .digest <<<"$OUT")" "digest over TLS"
expect_ok "pull over TLS" "$T" pull "127.0.0.1:$TPORT/e2e/tls:v1" --ca-file "$E2E_TMP/tls/ca.crt" --output "$E2E_TMP/tlsp" -o json
assert_eq "$BUILT" "$(jq -r .digest <<<"$OUT")" "pulled over TLS"
expect_fail "TLS with the system CAs only" "$T" pull "127.0.0.1:$TPORT/e2e/tls:v1" --ca-file /etc/ssl/certs/ca-certificates.crt --output "$E2E_TMP/tlsq"
assert_contains "$OUT" "https://127.0.0.1:$TPORT/v2/e2e/tls/manifests/v1" "certificate failure names the URL"

step "bad input"
expect_fail "invalid reference" "$T" pull "$REG/E2E/Upper:v1" --output "$E2E_TMP/z"
assert_contains "$OUT" "must be lower-case" "reference error"
expect_fail "unknown tag" "$T" pull "$REG/e2e/oci-cache:nope" --output "$E2E_TMP/z"
assert_contains "$OUT" "HTTP 404" "unknown tag named"

e2e_done
