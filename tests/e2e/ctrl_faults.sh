#!/usr/bin/env bash
# ctrl_faults: bad input and faults, each answered by a status condition or an event,
# never a crash: an image that does not exist, a registry that never answers, a missing
# Secret and one without the key, a cache edited while its registry step is in flight,
# a hand-written node status with garbage in it, kube-apiserver restarted after etcd was
# compacted, and the controller SIGKILLed mid-reconcile (converges, no event storm); SIGTERM
# with a registry request in flight exits 0 at once; a deprecated flag spelling still works.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/ctrl_helpers.bash"

ctrl_crds
NS=$(e2e_namespace)
CTRL_NS=$NS
P="e2e-faults-$RANDOM"
N1=$P-1
finish() {
  kubectl -n "$NS" delete tkc --all --wait=false >/dev/null 2>&1
  for _ in $(seq 20); do [[ -z $(kubectl -n "$NS" get tkc -o name 2>/dev/null) ]] && break; sleep 0.5; done
  ctrl_kill_all
  kubectl delete node "$N1" --wait=false >/dev/null 2>&1
}
e2e_on_exit finish

step "a signed image; tkm-config names the key; a registry that never answers"
ctrl_keys
REPO=$TKM_REGISTRY/e2e-ctrl-$RANDOM/cache
DA=$(ctrl_image "$REPO" v1)
ctrl_sign "$REPO@$DA"
kubectl -n "$NS" create configmap tkm-config --from-file=signaturePublicKeys="$E2E_TMP/cosign.pub" >/dev/null
kubectl -n "$NS" create secret generic empty-secret --from-literal=other=x >/dev/null
e2e_silent_registry slow
SLOW=127.0.0.1:$(cat "$E2E_TMP/slow.port")
U1=$(ctrl_node "$N1")

tkc() { # NAME IMAGE [POLICY-YAML]
  printf 'apiVersion: tkm.io/v1alpha1\nkind: TritonKernelCache\nmetadata: {name: %s}\nspec:\n  cacheImage: "%s"\n%s\n' \
    "$1" "$2" "${3:-}" | kubectl -n "$NS" apply -f - >/dev/null
}
reason_is() { [[ $(ctrl_reason "$NS" "tkc/$1" Verified) == "$2" ]]; }

ctrl_start c1
tkc ok "$REPO:v1"
tkc missing "$TKM_REGISTRY/e2e-none-$RANDOM/cache:v1"
tkc slow "$SLOW/e2e/cache:v1"
tkc nosecret "$REPO:v1" '  signaturePolicy: {mode: Enforce, publicKeySecretRef: {name: absent-secret, key: cosign.pub}}'
tkc nokey "$REPO:v1" '  signaturePolicy: {mode: Enforce, publicKeySecretRef: {name: empty-secret, key: cosign.pub}}'
tkc edited "$SLOW/e2e/cache:v2"
tkc latepull "$REPO:v1" '  imagePullSecrets: [{name: late-pull}]'

step "each failure is a condition with a reason a person understands"
wait_for 30 "ok: verified with the key from tkm-config" reason_is ok SignatureVerified
wait_for 30 "missing image: ImageNotFound" reason_is missing ImageNotFound
assert_eq "False" "$(ctrl_cond "$NS" tkc/missing Ready)" "missing image: Ready=False"
wait_for 30 "missing Secret: SecretNotFound" reason_is nosecret SecretNotFound
assert_contains "$(kubectl -n "$NS" get tkc nosecret -o jsonpath='{.status.conditions[?(@.type=="Verified")].message}')" "absent-secret" "the message names the Secret"
wait_for 30 "Secret without the key: SecretNotFound" reason_is nokey SecretNotFound
assert_contains "$(kubectl -n "$NS" get tkc nokey -o jsonpath='{.status.conditions[?(@.type=="Verified")].message}')" "cosign.pub" "the message names the key"

step "Secrets created after the cache are read again (kubectl apply -f dir/ creates them in name order)"
wait_for 30 "missing pull Secret: SecretNotFound" reason_is latepull SecretNotFound
assert_contains "$(kubectl -n "$NS" get tkc latepull -o jsonpath='{.status.conditions[?(@.type=="Verified")].message}')" "late-pull" "the message names the pull Secret"
kubectl -n "$NS" create secret docker-registry late-pull --docker-server="$TKM_REGISTRY" \
  --docker-username=e2e --docker-password=e2e >/dev/null
wait_for 30 "the pull Secret, created later, is read: pinned and verified" reason_is latepull SignatureVerified
assert_eq "$DA" "$(kubectl -n "$NS" get tkc latepull -o jsonpath='{.status.resolvedDigest}')" "latepull: the pinned digest"
kubectl -n "$NS" create secret generic absent-secret --from-file=cosign.pub="$E2E_TMP/cosign.pub" >/dev/null
wait_for 60 "the key Secret, created later, is read: verified" reason_is nosecret SignatureVerified

step "a cache edited while its registry step is in flight"
sleep 1
tkc edited "$REPO:v1"
digest_is() { [[ $(kubectl -n "$NS" get tkc "$1" -o jsonpath='{.status.resolvedDigest}') == "$2" ]]; }
wait_for 60 "edited: the new image is pinned" digest_is edited "$DA"
wait_for 30 "edited: verified" reason_is edited SignatureVerified
assert_contains "$(cat "$E2E_TMP/c1.log")" "/edited: changed during a registry operation: cancelling it" "the resolve of the old image was cancelled"
wait_for 60 "a registry that never answers: RegistryUnreachable" reason_is slow RegistryUnreachable
assert_contains "$(kubectl -n "$NS" get tkc slow -o jsonpath='{.status.conditions[?(@.type=="Verified")].message}')" "$SLOW" "the message names the registry"

step "a node status with garbage in it is ignored with an event"
cat >"$E2E_TMP/garbage.json" <<EOF2
{"apiVersion":"tkm.io/v1alpha1","kind":"TritonKernelCacheNodeStatus","metadata":{"name":"$N1","namespace":"$NS"},
 "status":{"nodeName":"$N1","gpus":[{"id":99999999999}],"caches":{"ok":{"digest":"$DA","compatibleGPUs":[{"ids":[99999999999]}]}}}}
EOF2
kubectl apply --server-side --field-manager=hand -f "$E2E_TMP/garbage.json" >/dev/null
# Kubernetes 1.37 enforces the CRD's `format: int32` and refuses this status itself; older
# apiservers store it, and the controller must ignore it (CI runs this file on 1.35 too:
# the k8s-oldest label).
if out=$(kubectl apply --server-side --field-manager=hand --subresource=status -f "$E2E_TMP/garbage.json" 2>&1); then
  ev_on() { [[ $(ctrl_events "$NS" "$N1" InvalidNodeStatus) -ge 1 ]]; }
  wait_for 20 "an InvalidNodeStatus event on the object" ev_on
  kill -0 "${CTRL_PID[c1]}" || fail "the controller died"
  pass "the controller is alive"
  assert_eq "0" "$(kubectl -n "$NS" get tkc ok -o jsonpath='{.status.counts.nodes}')" "the garbage does not count"
else
  minor=$(kubectl version -o json | jq -r .serverVersion.minor)
  ((${minor%%[!0-9]*} >= 37)) || fail "kube-apiserver 1.$minor refused the garbage status: $out"
  assert_contains "$out" "format int32" "kube-apiserver 1.$minor refuses the out-of-range GPU ids itself (format: int32)"
  kill -0 "${CTRL_PID[c1]}" || fail "the controller died"
  pass "the controller is alive"
fi
kubectl -n "$NS" delete tkcns "$N1" >/dev/null
ctrl_report "$NS" "$N1" "$U1" "{\"ok\":$(ctrl_entry "$DA" compat)}"
ready() { [[ $(ctrl_cond "$NS" "tkc/$1" Ready) == True ]]; }
wait_for 20 "a valid report afterwards counts: ok Ready" ready ok

step "etcd compacted, kube-apiserver restarted"
etcd_revision() {
  curl -sf -X POST "$TKM_ETCD/v3/kv/range" -d '{"key":"AA==","limit":"1"}' | sed -n 's/.*"revision":"\([0-9]*\)".*/\1/p'
}
rev=$(etcd_revision)
curl -sf -X POST "$TKM_ETCD/v3/kv/compaction" -d "{\"revision\":\"$rev\",\"physical\":true}" >/dev/null ||
  fail "etcd compaction failed"
"$TKM_SOURCE_DIR/hack/cluster.sh" restart-apiserver >/dev/null 2>&1 || fail "restart-apiserver failed"
pass "compacted at $rev and restarted"
ctrl_report "$NS" "$N1" "$U1" "{\"ok\":$(ctrl_entry "$DA" incompat)}"
incompat() { [[ $(kubectl -n "$NS" get tkc ok -o jsonpath='{.status.counts.incompatible}') == 1 ]]; }
wait_for 60 "a change after the restart reaches the status" incompat
kill -0 "${CTRL_PID[c1]}" || fail "the controller died"
pass "the controller survived the restart"

step "SIGKILL mid-reconcile converges without an event storm"
for i in $(seq 1 15); do tkc "k$i" "$REPO:v1"; done
sleep 0.3
ctrl_kill c1 KILL
ctrl_start c2
all_verified() {
  local n
  n=$(kubectl -n "$NS" get tkc -o jsonpath='{range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Verified")].reason}{"\n"}{end}' | grep -c '^k[0-9]*=SignatureVerified$')
  [[ $n == 15 ]]
}
wait_for 60 "all 15 caches verified after the restart" all_verified
sleep 2
storm=0
for i in $(seq 1 15); do
  n=$(ctrl_events "$NS" "k$i" Verified)
  ((n <= 1)) || storm=1
done
assert_eq 0 "$storm" "at most one Verified event per cache"
total=$(kubectl -n "$NS" get events -o jsonpath='{range .items[*]}{.count}{"\n"}{end}' | awk '{s+=$1} END {print s+0}')
((total < 60)) || fail "too many events: $total"
pass "events in all: $total"

step "a restart with the same state: nothing re-resolved, re-verified or rewritten"
ctrl_kill c2 TERM
ctrl_start c3 --metrics-bind-address 127.0.0.1:0 --health-probe-bind-address 127.0.0.1:0
port_of() { sed -n 's/.*http server listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$E2E_TMP/c3.log" | head -1; }
has_port() { [[ -n $(port_of) ]]; }
wait_for 10 "c3 serves /readyz" has_port
ready_ok() { [[ $(curl -sf "http://127.0.0.1:$(port_of)/readyz") == ok ]]; }
wait_for 20 "c3 is ready (synced)" ready_ok
reconciled() { curl -sf "http://127.0.0.1:$(port_of)/metrics" | grep -q '^tkm_controller_reconcile_total{kind="TritonKernelCache"} [1-9]'; }
wait_for 20 "c3 reconciled the caches" reconciled
sleep 3
M=$(curl -sf "http://127.0.0.1:$(port_of)/metrics")
metric() { sed -n "s/^$1 \([0-9.e+]*\)$/\1/p" <<<"$M"; }
assert_eq 0 "$(metric tkm_controller_verifications_total)" "no signature searched again"
assert_eq 0 "$(metric tkm_controller_status_writes_total)" "no status rewritten (no flap)"
# The only registry work left: caches whose last attempt failed (missing, slow, edited's first image).
regops=$(metric tkm_controller_registry_operations_total)
((regops <= 3)) || fail "registry operations after the restart: $regops (only the failing caches may retry)"
pass "registry operations after the restart: $regops (the failing caches only)"
ctrl_kill c3 TERM
assert_eq 0 "${CTRL_RC[c3]}" "SIGTERM: exit 0"

step "SIGTERM with a registry request in flight: exit 0 at once; a deprecated spelling still works"
# --registry-timeout 60s: the stop does not wait for the request, it cancels it;
# --status-settle 250: the spelling of the previous release (milliseconds)
accepts() { wc -l <"$E2E_TMP/slow.accepts" 2>/dev/null || echo 0; }
before=$(accepts)
in_flight() { (($(accepts) > before)); }
ctrl_start c4 --registry-timeout 60s --status-settle 250
tkc stuck "$SLOW/e2e/stuck:v1"
wait_for 30 "c4's resolve of stuck is in flight at the silent registry" in_flight
ctrl_kill c4 TERM
assert_eq 0 "${CTRL_RC[c4]}" "SIGTERM with a registry request in flight: exit 0"
((CTRL_STOP_MS[c4] < 5000)) || fail "the stop took ${CTRL_STOP_MS[c4]} ms (the request's timeout is 60 s)"
pass "stopped in ${CTRL_STOP_MS[c4]} ms"
assert_contains "$(cat "$E2E_TMP/c4.log")" "--status-settle 250: a duration without a unit is deprecated" "the old spelling is accepted, with one deprecation line"
assert_contains "$(cat "$E2E_TMP/c4.log")" "controller: stopped" "the stop ran to its end"
e2e_done
