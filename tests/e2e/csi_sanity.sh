#!/usr/bin/env bash
# csi_sanity: the CSI conformance suite (csi-sanity v5.6.0, built from Go modules by
# hack/testbin) against tkm-csi, with only the tests that need a Controller service
# skipped (tkm-csi is a node-only driver): the [Controller Server] suite, and the two
# Node tests that create their volume with Controller.CreateVolume unconditionally
# ("should remove target path", "should fail when volume does not exist on the
# specified path"; node.go in csi-test v5.6.0). tkm-csi talks to e2e_csi_testagent, a protocol-level stand-in
# for tkm-agent (tests/e2e/csi/env.sh); every mount happens in this script's private
# mount namespace.
source "$(dirname "$0")/csi/env.sh"
csi_unshare "$0" "$@"
source "$(dirname "$0")/lib.sh"

sanity=$("$TKM_SOURCE_DIR/hack/testbin/build.sh" --path csi-sanity)
csi_setup "$E2E_TMP/csi"
e2e_on_exit csi_teardown
csi_agent_start
csi_driver_start

step "csi-sanity v5.6.0 ($sanity)"
# mountdir/stagingdir below the target root; csi-sanity creates and removes them.
if ! "$sanity" --csi.endpoint "unix://$CSI_SOCK" --csi.mountdir "$CSI_TMP/pods/sanity-mount" \
  --csi.stagingdir "$CSI_TMP/pods/sanity-staging" \
  --ginkgo.skip '\[Controller Server\]|should remove target path|does not exist on the specified path' \
  --ginkgo.no-color >"$E2E_TMP/sanity.log" 2>&1; then
  tail -60 "$E2E_TMP/sanity.log" >&2
  echo "--- tkm-csi log" >&2; tail -30 "$CSI_TMP/csi.log" >&2
  fail "csi-sanity failed (log above)"
fi
summary=$(grep -E '^(Ran|PASS|SUCCESS|FAIL)' "$E2E_TMP/sanity.log" | tr '\n' ' ')
echo "$summary"
assert_contains "$summary" "SUCCESS" "csi-sanity passes"
assert_not_contains "$summary" " 0 Passed" "csi-sanity ran tests"
csi_driver_stop
assert_eq 0 "$CSI_DRIVER_RC" "tkm-csi exits 0 on SIGTERM"
csi_logs_clean && pass "no sanitizer report in the logs"
e2e_done
