#!/usr/bin/env bash
# Leader election on a Lease with real processes (short timings: lease 6 s,
# renew deadline 4 s, retry 1 s):
#   1. A leads, B follows and observes A.
#   2. SIGKILL A: B takes over within lease duration + 2 retry periods of the
#      kill, and leaseTransitions goes up by one.
#   3. C joins; SIGSTOP the leader B for 12 s: C acquires after expiry; B,
#      resumed, stops acting at once (no ACTING line after C started
#      leading), and never two candidates act at the same time.
#   4. SIGTERM with --release hands the lease over without waiting.
# Candidates run under valgrind when installed (leaks are errors), except the
# SIGKILLed one.
source "$(dirname "$0")/lib.sh"

ns=$(e2e_namespace)
prog=$TKM_BUILD_DIR/tests/e2e_k8s_lease
[[ -x $prog ]] || fail "missing $prog (build first)"
LEASE_MS=6000 RENEW_MS=4000 RETRY_MS=1000
declare -A PID

start_candidate() { # ID [valgrind 0|1]
  local id=$1 vg=()
  if [[ ${2:-1} == 1 ]] && command -v valgrind >/dev/null && [[ ${TKM_E2E_VALGRIND:-1} == 1 ]]; then
    vg=(valgrind -q --leak-check=full '--show-leak-kinds=definite,indirect'
      '--errors-for-leak-kinds=definite,indirect' --error-exitcode=9
      --suppressions="$TKM_SOURCE_DIR/tests/valgrind.supp" --log-file="$E2E_TMP/vg-$id.log")
  fi
  "${vg[@]}" "$prog" --name tkm-leader --namespace "$ns" --identity "$id" --lease-ms $LEASE_MS \
    --renew-ms $RENEW_MS --retry-ms $RETRY_MS --release >"$E2E_TMP/$id.out" 2>"$E2E_TMP/$id.err" &
  PID[$id]=$!
  e2e_on_exit "kill -CONT ${PID[$id]} 2>/dev/null; kill -9 ${PID[$id]} 2>/dev/null"
}

stop_candidate() { # ID
  local id=$1 rc=0
  kill -TERM "${PID[$id]}"
  wait "${PID[$id]}" || rc=$?
  ((rc == 0)) || { cat "$E2E_TMP/vg-$id.log" "$E2E_TMP/$id.err" >&2 2>/dev/null; fail "$id exited $rc"; }
  pass "$id exited 0 (valgrind clean when enabled)"
}

first_ms() { # FILE WHAT [ARG]: unix ms of the first matching line
  awk -v w="$2" -v a="${3:-}" '$2 == w && (a == "" || $3 == a) { print $1; exit }' "$1"
}
last_ms() {
  awk -v w="$2" '$2 == w { t = $1 } END { print t }' "$1"
}
transitions() {
  kubectl -n "$ns" get lease tkm-leader -o jsonpath='{.spec.leaseTransitions}'
}
holder() {
  kubectl -n "$ns" get lease tkm-leader -o jsonpath='{.spec.holderIdentity}'
}
now_ms() { date +%s%3N; }

step "A leads, B follows"
start_candidate A 0
wait_for 30 "A is the leader" grep -q " LEADING A" "$E2E_TMP/A.out"
start_candidate B
wait_for 30 "B observes A as the leader" grep -q " LEADER A" "$E2E_TMP/B.out"
sleep 2
assert_eq "" "$(grep ' LEADING B' "$E2E_TMP/B.out" || true)" "B does not lead while A renews"
assert_eq A "$(holder)" "the Lease names A"
t0=$(transitions)

step "SIGKILL A: B takes over within the lease duration"
kill -9 "${PID[A]}"
killed=$(now_ms)
wait_for 30 "B becomes the leader" grep -q " LEADING B" "$E2E_TMP/B.out"
took=$(($(first_ms "$E2E_TMP/B.out" LEADING B) - killed))
((took <= LEASE_MS + 2 * RETRY_MS + 500)) || fail "takeover took $took ms (lease $LEASE_MS ms)"
pass "B took over $took ms after the kill (lease $LEASE_MS ms, retry $RETRY_MS ms)"
assert_eq B "$(holder)" "the Lease names B"
assert_eq $((t0 + 1)) "$(transitions)" "leaseTransitions went up by one"

step "C joins; SIGSTOP the leader B: C acquires after expiry, B stops acting when resumed"
start_candidate C
wait_for 30 "C observes B" grep -q " LEADER B" "$E2E_TMP/C.out"
kill -STOP "${PID[B]}"
stopped=$(now_ms)
wait_for 40 "C becomes the leader" grep -q " LEADING C" "$E2E_TMP/C.out"
c_leads=$(first_ms "$E2E_TMP/C.out" LEADING C)
((c_leads - stopped >= LEASE_MS - RETRY_MS)) ||
  fail "C acquired only $((c_leads - stopped)) ms after B froze: before the lease expired"
pass "C acquired $((c_leads - stopped)) ms after B froze (lease $LEASE_MS ms)"
sleep $(((12000 - ($(now_ms) - stopped)) / 1000 + 1))
kill -CONT "${PID[B]}"
wait_for 10 "B, resumed, reports it stopped leading" grep -q " STOPPED B" "$E2E_TMP/B.out"
b_last=$(last_ms "$E2E_TMP/B.out" ACTING)
((b_last < c_leads)) || fail "B acted at $b_last, after C started leading at $c_leads"
pass "B's last action ($b_last) precedes C's leadership ($c_leads): never two leaders acting"
sleep 2
assert_eq C "$(holder)" "the Lease still names C"
assert_eq "" "$(grep ' LEADING B' "$E2E_TMP/B.out" | tail -n +2)" "B did not grab the lease back"

step "release on SIGTERM hands over without waiting for expiry"
released=$(now_ms)
stop_candidate C
wait_for 30 "B takes over after C released" bash -c "grep -c ' LEADING B' '$E2E_TMP/B.out' | grep -q 2"
b2=$(awk '$2 == "LEADING" { n++; if (n == 2) print $1 }' "$E2E_TMP/B.out")
# C prints STOPPED after its release PUT returned: measure from there, not from
# the SIGTERM (C runs under valgrind; on a loaded machine it may take seconds to
# reach the release). Waiting for the lease to expire would take LEASE_MS.
c_released=$(first_ms "$E2E_TMP/C.out" STOPPED C)
[[ -n $c_released ]] || fail "C printed no STOPPED line (release never completed)"
if ((b2 - c_released >= LEASE_MS)); then
  echo "--- C.out"; tail -5 "$E2E_TMP/C.out"; echo "--- C.err"; tail -20 "$E2E_TMP/C.err"
  echo "--- B.out"; tail -8 "$E2E_TMP/B.out"
  fail "B needed $((b2 - c_released)) ms after C's release returned (SIGTERM $((c_released - released)) ms before that)"
fi
pass "B led again $((b2 - c_released)) ms after C's release returned ($((b2 - released)) ms after the SIGTERM; less than the lease duration)"
stop_candidate B
e2e_done
