#!/usr/bin/env bash
# ctrl_leader: two replicas with --leader-elect: exactly one acts (the other writes
# nothing), and after the leader is SIGKILLed the other takes over no sooner than the
# lease duration after the old leader's last renewal and at most one retry period later
# (the Lease's renewTime -> the new holder's acquireTime, both as written in the Lease)
# and goes on reconciling. The
# holder identity is $POD_NAME plus a random suffix (replica a), else host_pid
# (replica b). A replica stopped with SIGTERM releases the lease.
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
# the caches here switch signature checks off for themselves: the admin allows it (issue 23)
kubectl -n "$NS" create configmap tkm-config --from-literal=signatureFloor=Disabled >/dev/null
tkc() {
  printf 'apiVersion: tkm.io/v1alpha1\nkind: TritonKernelCache\nmetadata: {name: %s}\nspec: {cacheImage: "%s", signaturePolicy: {mode: Disabled}}\n' \
    "$1" "$REPO:v1" | kubectl -n "$NS" apply -f - >/dev/null
}
LE=(--leader-elect --leader-election-id e2e-ctrl --lease-duration 6s --renew-deadline 4s --retry-period 1s)

step "two replicas"
POD_NAME=e2e-ctrl-pod-a CTRL_STATE=a ctrl_start a "${LE[@]}"
POD_NAME='' CTRL_STATE=b ctrl_start b "${LE[@]}"
holder() { kubectl -n "$NS" get lease e2e-ctrl -o jsonpath='{.spec.holderIdentity}' 2>/dev/null; }
has_holder() { [[ -n $(holder) ]]; }
wait_for 20 "a leader is elected" has_holder
H=$(holder)
ida=$(sed -n 's/.*campaigning for Lease [^ ]* as \(.*\)$/\1/p' "$E2E_TMP/a.log")
[[ $ida =~ ^e2e-ctrl-pod-a_[0-9a-f]{12}$ ]] || fail "replica a (POD_NAME set) campaigns as \"$ida\""
pass "the identity is \$POD_NAME plus a random suffix: $ida"
if [[ $H == "$ida" ]]; then LEADER=a FOLLOWER=b; elif [[ $H == *_${CTRL_PID[b]} ]]; then LEADER=b FOLLOWER=a; else fail "holder $H is neither replica"; fi
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

step "the leader is SIGKILLed: the other takes over a lease duration after the last renewal"
# The reference is the old leader's last renewal as the Lease records it (a renewal
# in flight at the kill may still land): its renewTime, read until the holder
# changes; the takeover is the new holder's acquireTime. Both are written by
# processes on this machine (one clock), in microseconds.
lease_rec() { kubectl -n "$NS" get lease e2e-ctrl -o jsonpath='{.spec.holderIdentity} {.spec.renewTime} {.spec.acquireTime}' 2>/dev/null; }
t0=$(date +%s.%N)
ctrl_kill "$LEADER" KILL
last_renew='' new_acquire=''
took_over() {
  local h r a
  read -r h r a < <(lease_rec) # (no newline at the end: read says 1 but fills the fields)
  if [[ $h == "$H" ]]; then last_renew=$r; return 1; fi
  [[ -n $h ]] || return 1
  new_acquire=$a
}
wait_for 15 "replica $FOLLOWER holds the lease" took_over
wait_for 5 "replica $FOLLOWER logs it leads" grep -q "became the leader" "$E2E_TMP/$FOLLOWER.log"
t1=$(date +%s.%N)
[[ -n $last_renew && -n $new_acquire ]] || fail "no renewTime ($last_renew) / acquireTime ($new_acquire) in the Lease"
epoch() { # RFC 3339 with microseconds -> seconds since the epoch
  local f=${1#*.}
  f=${f%Z}
  echo "$(date -u -d "${1%%.*}Z" +%s).$f"
}
dt=$(awk -v a="$(epoch "$last_renew")" -v b="$(epoch "$new_acquire")" 'BEGIN {printf "%.3f", b - a}')
dk=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}')
# The bound, from the last renewal: the lease (6 s) plus the time until the standby's poll
# saw that renewal (a retry period, 1 s, jittered up to +20 %; the standby then takes over
# the instant the 6 s run out, not at its next poll), plus 0.5 s for the requests in
# flight and a late timer on a loaded machine. (client-go: lease + 2 retry periods.)
awk -v d="$dt" 'BEGIN {exit !(d >= 6 && d <= 6 + 1.2 + 0.5)}' ||
  fail "took over ${dt}s after the last renewal ($last_renew -> $new_acquire; lease 6 s, retry 1 s)"
pass "took over ${dt}s after the old leader's last renewal (lease duration 6 s; ${dk}s after the kill)"
tkc two
wait_for 30 "the new leader reconciles" pinned two

step "SIGTERM releases the lease"
ctrl_kill "$FOLLOWER" TERM
released() { [[ -z $(holder) ]]; }
wait_for 5 "the lease holder is cleared" released
e2e_done
