#!/usr/bin/env bash
# pull_lease.sh - a Lease is renewed on time while four slow pulls run on the same loop.
#   The daemons' shape (tests/e2e/progs/pull_lease.c): one libuv loop carries k8sclient's
#   lease elector (real kube-apiserver) and four pull jobs on one registry session, whose
#   bytes come from the real registry through a proxy that throttles every connection.
#   Asserted: every pull succeeds with the pushed digest and took long enough to span many
#   renew periods; the renewals kept coming at the retry period (largest gap between two
#   successful renewals), leadership was never lost, and the loop never stalled; two cosign
#   verify jobs (the image is signed with real cosign) on the same session: the signer's key
#   verifies, another key is rejected.
source "$(dirname "$0")/lib.sh"

T=$TKM_BUILD_DIR/cli/tkmctl
P=$TKM_BUILD_DIR/tests/e2e_pull_lease
[[ -x $T && -x $P ]] || fail "tkmctl or e2e_pull_lease not built"
RETRY_MS=500
RATE=$((96 * 1024))

step "push an image of the real inductor fixture cache (~0.8 MB layer)"
mkdir -p "$E2E_TMP/src"
tar -xzf "$TKM_FIXTURES/triton-cache/triton-3.6.0-cuda-sm90-inductor-block.tar.gz" -C "$E2E_TMP/src"
expect_ok "build --push" "$T" build "$E2E_TMP/src/$(ls "$E2E_TMP/src")" \
  --push "$TKM_REGISTRY/e2e/pull-lease:v1" -o json
BUILT=$(jq -r .manifest <<<"$OUT")
LAYER=$(jq -r .layer_size <<<"$OUT")
ONE_MS=$((LAYER * 1000 / RATE)) # one pull's layer alone at the throttled rate
ns=$(e2e_namespace)

step "sign it with real cosign (key pair, no tlog) and make a second, unrelated key"
COSIGN=$("$TKM_SOURCE_DIR/hack/testbin/build.sh" --path cosign)
export COSIGN_PASSWORD='' COSIGN_YES=true
(cd "$E2E_TMP" && "$COSIGN" generate-key-pair >/dev/null 2>&1 &&
  mkdir other && cd other && "$COSIGN" generate-key-pair >/dev/null 2>&1) || fail "cosign generate-key-pair"
expect_ok "cosign sign" "$COSIGN" sign --key "$E2E_TMP/cosign.key" --tlog-upload=false -y \
  "$TKM_REGISTRY/e2e/pull-lease@$BUILT"

mkdir -p "$E2E_TMP/pulls"

step "4 pulls at $RATE B/s each, lease retry ${RETRY_MS} ms, all on one loop"
expect_ok "run the pulls beside the elector" "$P" --kubeconfig "$KUBECONFIG" --namespace "$ns" \
  --name pull-lease --upstream "$TKM_REGISTRY" --image e2e/pull-lease:v1 \
  --out "$E2E_TMP/pulls" --pulls 4 --rate "$RATE" --retry-ms "$RETRY_MS" \
  --digest "$BUILT" --key "$E2E_TMP/cosign.pub" --other-key "$E2E_TMP/other/cosign.pub"
echo "$OUT"
R=$(grep '^{' <<<"$OUT" | tail -1)
assert_eq 4 "$(jq -r .pulls_ok <<<"$R")" "all four pulls succeeded"
assert_eq "$BUILT" "$(jq -r '.digests | unique | .[]' <<<"$R")" "each pulled the pushed digest"
for i in 0 1 2 3; do
  L=$E2E_TMP/pulls/pull-$i
  [[ -s $L/index.json ]] || fail "pull-$i: no index.json"
  diff <(ls "$L/blobs/sha256") <(curl -sf "http://$TKM_REGISTRY/v2/e2e/pull-lease/manifests/v1" \
    -H 'Accept: application/vnd.oci.image.manifest.v1+json' |
    jq -r '.config.digest, .layers[].digest, "'"$BUILT"'"' | sed 's/^sha256://' | sort) >/dev/null ||
    fail "pull-$i: blobs differ from the manifest's"
done
pass "each layout holds exactly the manifest, config and layer"
[[ -z $(find "$E2E_TMP/pulls" -mindepth 1 -maxdepth 1 -name '*.pull-*') ]] || fail "a staging directory was left behind"
pass "no staging directory left"

PULL_MS=$(jq -r .pull_ms <<<"$R")
((PULL_MS >= 4000)) || fail "the pulls took ${PULL_MS} ms: too fast to span the renew periods"
pass "the pulls were slow (${PULL_MS} ms, several renew periods)"
# ran side by side on the loop, not one after another (4 x ONE_MS)
((PULL_MS < ONE_MS * 2)) || fail "4 pulls took ${PULL_MS} ms, one alone needs ${ONE_MS} ms: not concurrent"
pass "the 4 pulls ran concurrently (${PULL_MS} ms, one alone ${ONE_MS} ms)"
GAP=$(jq -r .max_renew_gap_ms <<<"$R")
# The elector renews every retry period plus up to 20% jitter; one renewal may take a
# round trip to a loaded apiserver. A loop blocked by the pulls would show here.
((GAP <= RETRY_MS * 12 / 10 + 700)) || fail "a gap of ${GAP} ms between renewals (retry ${RETRY_MS} ms)"
pass "largest gap between renewals ${GAP} ms <= $((RETRY_MS * 12 / 10 + 700)) ms"
DURING=$(jq -r .renewals_during <<<"$R")
MIN=$((PULL_MS / (RETRY_MS * 12 / 10) - 2))
((DURING >= MIN)) || fail "only ${DURING} renewals during ${PULL_MS} ms of pulls (expected >= $MIN)"
pass "${DURING} renewals during the pulls (>= $MIN)"
assert_eq 0 "$(jq -r .lost <<<"$R")" "leadership never lost"
LAG=$(jq -r .max_loop_lag_ms <<<"$R")
((LAG < 250)) || fail "the loop stalled for ${LAG} ms during the pulls"
pass "loop lag at most ${LAG} ms"
step "cosign verify jobs on the same session, beside the pulls"
assert_eq 2 "$(jq -r '.verify | length' <<<"$R")" "both verify jobs reported"
assert_eq 1 "$(jq -r '[.verify[] | select(.rc == 0 and (.info | startswith("sha256:")))] | length' <<<"$R")" \
  "the signer's key verifies (key id reported)"
BAD=$(jq -r '.verify[] | select(.rc != 0) | .info' <<<"$R")
assert_contains "$BAD" "does not verify with key" "another key is rejected, naming why"
assert_eq "$(jq -r .pool_size <<<"$R")" 8 "thread pool sized on purpose (UV_THREADPOOL_SIZE=8)"
e2e_done
