#!/usr/bin/env bash
# ctrl_leader: two replicas with --leader-elect: exactly one acts (the other writes
# nothing), and after the leader is SIGKILLed the other takes over within the lease
# duration and goes on reconciling. A replica stopped with SIGTERM releases the lease.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/ctrl_helpers.bash"

ctrl_crds
NS=$(e2e_namespace)
CTRL_NS=$NS
finish() {
  kubectl -n "$NS" delete tkc --all --wait=false >/dev/null 2>&1
  for _ in $(seq 20); do [[ -z $(kubectl -n "$NS" get tkc -o name 2>/dev/null) ]] && break; sleep 0.5; done
  ctrl_kill_all
}
e2e_on_exit finish
REPO=$TKM_REGISTRY/e2e-ctrl-$RANDOM/cache
D=$(ctrl_image "$REPO" v1)
tkc() {
  printf 'apiVersion: tkm.io/v1alpha1\nkind: TritonKernelCache\nmetadata: {name: %s}\nspec: {cacheImage: "%s", signaturePolicy: {mode: Disabled}}\n' \
    "$1" "$REPO:v1" | kubectl -n "$NS" apply -f - >/dev/null
}
LE=(--leader-elect --leader-election-id e2e-ctrl --lease-duration 6 --renew-deadline 4 --retry-period 1)

step "two replicas"
CTRL_STATE=a ctrl_start a "${LE[@]}"
CTRL_STATE=b ctrl_start b "${LE[@]}"
holder() { kubectl -n "$NS" get lease e2e-ctrl -o jsonpath='{.spec.holderIdentity}' 2>/dev/null; }
has_holder() { [[ -n $(holder) ]]; }
wait_for 20 "a leader is elected" has_holder
H=$(holder)
if [[ $H == *_${CTRL_PID[a]} ]]; then LEADER=a FOLLOWER=b; elif [[ $H == *_${CTRL_PID[b]} ]]; then LEADER=b FOLLOWER=a; else fail "holder $H is neither replica"; fi
pass "leader is replica $LEADER ($H)"
tkc one
pinned() { [[ $(kubectl -n "$NS" get tkc "$1" -o jsonpath='{.status.resolvedDigest}') == "$D" ]]; }
wait_for 30 "the leader reconciles" pinned one
sleep 2
assert_contains "$(cat "$E2E_TMP/$LEADER.log")" "/one: $REPO:v1 pinned" "the leader pinned it"
assert_not_contains "$(cat "$E2E_TMP/$FOLLOWER.log")" "pinned" "the follower did nothing"
assert_not_contains "$(cat "$E2E_TMP/$FOLLOWER.log")" "became the leader" "the follower never led"
managers=$(kubectl -n "$NS" get tkc one --show-managed-fields -o jsonpath='{range .metadata.managedFields[*]}{.manager}{"\n"}{end}' | sort -u | tr '\n' ' ')
assert_contains "$managers" "tkm-controller" "status written by tkm-controller"

step "the leader is SIGKILLed: the other takes over within the lease duration"
t0=$(date +%s.%N)
ctrl_kill "$LEADER" KILL
took_over() { grep -q "became the leader" "$E2E_TMP/$FOLLOWER.log"; }
wait_for 15 "replica $FOLLOWER becomes the leader" took_over
t1=$(date +%s.%N)
dt=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}')
awk -v d="$dt" 'BEGIN {exit !(d <= 6 + 1 + 1)}' || fail "took over after ${dt}s (lease 6 s, retry 1 s)"
pass "took over after ${dt}s (lease duration 6 s)"
tkc two
wait_for 30 "the new leader reconciles" pinned two

step "SIGTERM releases the lease"
ctrl_kill "$FOLLOWER" TERM
released() { [[ -z $(holder) ]]; }
wait_for 5 "the lease holder is cleared" released
e2e_done
