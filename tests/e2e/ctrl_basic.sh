#!/usr/bin/env bash
# ctrl_basic: tkm-controller against the real apiserver and registry, with simulated
# agents (node statuses applied the way tkm-agent does). A signed cache goes Verified
# and Ready with correct counts; an incompatible node shows in counts and failedNodes
# with its reason; a wrong key gives Verified=False, Ready=False and one event; the
# status is not rewritten when nothing changed; a tag pushed to a new digest leaves
# resolvedDigest alone until the tkm.io/re-resolve annotation (which is then removed).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/ctrl_helpers.bash"

ctrl_crds
NS=$(e2e_namespace)
CTRL_NS=$NS
P="e2e-basic-$RANDOM"
N1=$P-1 N2=$P-2 N3=$P-3
CC=e2e-basic-cluster-$RANDOM
finish() {
  kubectl -n "$NS" delete tkc --all --wait=false >/dev/null 2>&1
  kubectl delete tkcc "$CC" --wait=false >/dev/null 2>&1
  for _ in $(seq 20); do [[ -z $(kubectl -n "$NS" get tkc -o name 2>/dev/null) ]] && ! kubectl get tkcc "$CC" >/dev/null 2>&1 && break; sleep 0.5; done
  ctrl_kill_all
  kubectl delete node "$N1" "$N2" "$N3" --wait=false >/dev/null 2>&1
  kubectl delete tkcnsc "$N1" "$N2" --wait=false >/dev/null 2>&1
}
e2e_on_exit finish

step "a signed cache image, a second key"
ctrl_keys
REPO=$TKM_REGISTRY/e2e-ctrl-$RANDOM/cache
DA=$(ctrl_image "$REPO" v1)
ctrl_sign "$REPO@$DA"
PUB=$(sed 's/^/      /' "$E2E_TMP/cosign.pub")
OTHER=$(sed 's/^/      /' "$E2E_TMP/other/cosign.pub")
U1=$(ctrl_node "$N1") U2=$(ctrl_node "$N2") U3=$(ctrl_node "$N3")

step "the controller, and a cache"
ctrl_start c1 --metrics-bind-address 127.0.0.1:0 --health-probe-bind-address 127.0.0.1:0
cat <<EOF2 | kubectl -n "$NS" apply -f - >/dev/null
apiVersion: tkm.io/v1alpha1
kind: TritonKernelCache
metadata: {name: good}
spec:
  cacheImage: $REPO:v1
  signaturePolicy:
    mode: Enforce
    publicKey: |
$PUB
---
apiVersion: tkm.io/v1alpha1
kind: TritonKernelCache
metadata: {name: badsig}
spec:
  cacheImage: $REPO:v1
  signaturePolicy:
    mode: Enforce
    publicKey: |
$OTHER
EOF2
digest_is() { [[ $(kubectl -n "$NS" get tkc "$1" -o jsonpath='{.status.resolvedDigest}') == "$2" ]]; }
wait_for 30 "the tag is pinned in status.resolvedDigest" digest_is good "$DA"
assert_contains "$(kubectl -n "$NS" get tkc good -o jsonpath='{.metadata.finalizers}')" "tkm.io/cleanup" "finalizer added"
cond_is() { [[ $(ctrl_cond "$NS" "tkc/$2" "$3") == "$1" ]]; }
wait_for 30 "good: Verified=True" cond_is True good Verified
assert_eq "False" "$(ctrl_cond "$NS" tkc/good Ready)" "good: Ready=False before any node reports"
assert_eq "NoNodeReports" "$(kubectl -n "$NS" get tkc good -o jsonpath='{.status.conditions[?(@.type=="Ready")].reason}')" "reason NoNodeReports"
assert_eq "1" "$(kubectl -n "$NS" get tkc good -o jsonpath='{.status.summary.targets[0].warpSize}' | sed 's/32/1/')" "summary from the image labels"
assert_eq "1" "$(kubectl -n "$NS" get tkc good -o jsonpath='{.status.summary.entryCount}' | awk '{print ($1 > 0)}')" "summary entryCount > 0"

step "wrong key: Verified=False, Ready=False, one event"
wait_for 30 "badsig: Verified=False" cond_is False badsig Verified
assert_eq "KeyMismatch" "$(kubectl -n "$NS" get tkc badsig -o jsonpath='{.status.conditions[?(@.type=="Verified")].reason}')" "badsig: reason KeyMismatch"
assert_eq "False" "$(ctrl_cond "$NS" tkc/badsig Ready)" "badsig: Ready=False"

step "agents report: two compatible nodes, one incompatible"
ctrl_report "$NS" "$N1" "$U1" "{\"good\":$(ctrl_entry "$DA" compat),\"badsig\":$(ctrl_entry "$DA" compat)}"
ctrl_report "$NS" "$N2" "$U2" "{\"good\":$(ctrl_entry "$DA" compat)}"
ctrl_report "$NS" "$N3" "$U3" "{\"good\":$(ctrl_entry "$DA" incompat ArchMismatch "the cache targets sm_90, the GPU is sm_80")}"
counts_are() { [[ $(kubectl -n "$NS" get tkc good -o jsonpath='{.status.counts.nodes}/{.status.counts.compatible}/{.status.counts.incompatible}/{.status.counts.failed}') == "$1" ]]; }
wait_for 20 "counts nodes/compatible/incompatible/failed = 3/2/1/0" counts_are 3/2/1/0
assert_eq "True" "$(ctrl_cond "$NS" tkc/good Ready)" "good: Ready=True"
assert_eq "$N3 ArchMismatch" "$(kubectl -n "$NS" get tkc good -o jsonpath='{.status.failedNodes[0].node} {.status.failedNodes[0].reason}')" "failedNodes names the incompatible node and its reason"
assert_contains "$(kubectl -n "$NS" get tkc good -o jsonpath='{.status.conditions[?(@.type=="Ready")].message}')" "usable on 2 of 3 nodes" "Ready message says on how many"
assert_eq "False" "$(ctrl_cond "$NS" tkc/badsig Ready)" "badsig stays Ready=False although a node reports it compatible"

step "events: one per transition, no storm"
sleep 3
assert_eq 1 "$(ctrl_events "$NS" good Verified)" "good: one Verified event"
assert_eq 1 "$(ctrl_events "$NS" good Ready)" "good: one Ready event"
assert_eq 1 "$(ctrl_events "$NS" badsig VerificationFailed)" "badsig: exactly one VerificationFailed event"
assert_eq 0 "$(ctrl_events "$NS" badsig Ready)" "badsig: no Ready event"

step "no write when nothing changed"
RV=$(kubectl -n "$NS" get tkc good -o jsonpath='{.metadata.resourceVersion}')
ctrl_report "$NS" "$N2" "$U2" "{\"good\":$(ctrl_entry "$DA" compat)}"
sleep 3
assert_eq "$RV" "$(kubectl -n "$NS" get tkc good -o jsonpath='{.metadata.resourceVersion}')" "a node heartbeat with the same facts does not rewrite the status"

step "the tag moves: the pin stays until tkm.io/re-resolve"
"$CRANE" mutate "$REPO:v1" --annotation tkm.e2e/moved=yes -t "$REPO:v1" >/dev/null 2>&1
DB=$("$CRANE" digest "$REPO:v1")
[[ $DB != "$DA" ]] || fail "the tag did not move"
kubectl -n "$NS" annotate tkc good e2e/poke=1 >/dev/null
sleep 3
assert_eq "$DA" "$(kubectl -n "$NS" get tkc good -o jsonpath='{.status.resolvedDigest}')" "moved tag: resolvedDigest unchanged"
kubectl -n "$NS" annotate tkc good tkm.io/re-resolve=now >/dev/null
wait_for 30 "re-resolve pins the new digest" digest_is good "$DB"
ann_gone() { [[ -z $(kubectl -n "$NS" get tkc good -o jsonpath='{.metadata.annotations.tkm\.io/re-resolve}') ]]; }
wait_for 10 "the annotation is removed" ann_gone
wait_for 30 "the unsigned new digest: Verified=False" cond_is False good Verified
assert_eq "NoSignature" "$(kubectl -n "$NS" get tkc good -o jsonpath='{.status.conditions[?(@.type=="Verified")].reason}')" "new digest: reason NoSignature"

step "the cluster kind: key from a Secret in the controller's namespace, cluster node statuses"
kubectl -n "$CTRL_NS" create secret generic signing-key --from-file=cosign.pub="$E2E_TMP/cosign.pub" >/dev/null
cat <<EOF2 | kubectl apply -f - >/dev/null
apiVersion: tkm.io/v1alpha1
kind: TritonKernelCacheCluster
metadata: {name: $CC}
spec:
  cacheImage: $REPO@$DA
  signaturePolicy: {mode: Enforce, publicKeySecretRef: {name: signing-key, key: cosign.pub}}
EOF2
ccond() { kubectl get tkcc "$CC" -o jsonpath="{.status.conditions[?(@.type==\"$1\")].status}"; }
cverified() { [[ $(ccond Verified) == True ]]; }
wait_for 30 "tkcc: Verified=True with the key from Secret $CTRL_NS/signing-key" cverified
assert_eq "$DA" "$(kubectl get tkcc "$CC" -o jsonpath='{.status.resolvedDigest}')" "tkcc: a digest in spec.cacheImage is taken as is"
report_cluster() { # NODE UID ENTRY
  cat >"$E2E_TMP/rc.json" <<EOF2
{"apiVersion":"tkm.io/v1alpha1","kind":"TritonKernelCacheNodeStatusCluster",
 "metadata":{"name":"$1","ownerReferences":[{"apiVersion":"v1","kind":"Node","name":"$1","uid":"$2"}]},
 "status":{"nodeName":"$1","caches":{"$CC":$3}}}
EOF2
  kubectl apply --server-side --field-manager=tkm-agent -f "$E2E_TMP/rc.json" >/dev/null
  kubectl apply --server-side --field-manager=tkm-agent --subresource=status -f "$E2E_TMP/rc.json" >/dev/null
}
report_cluster "$N1" "$U1" "$(ctrl_entry "$DA" compat)"
report_cluster "$N2" "$U2" "$(ctrl_entry "$DA" error "disk full")"
cready() { [[ $(ccond Ready) == True && $(ccond Degraded) == True ]]; }
wait_for 20 "tkcc: Ready=True, Degraded=True (one node failed)" cready
assert_eq "2/1/1" "$(kubectl get tkcc "$CC" -o jsonpath='{.status.counts.nodes}/{.status.counts.compatible}/{.status.counts.failed}')" "tkcc counts nodes/compatible/failed"
assert_contains "$(kubectl get tkcc "$CC" -o jsonpath='{.status.conditions[?(@.type=="Degraded")].message}')" "$N2: NodeError: disk full" "Degraded says which node and why"
kubectl delete tkcc "$CC" --wait=false >/dev/null
ccgone() { ! kubectl get tkcc "$CC" >/dev/null 2>&1; }
wait_for 20 "tkcc deleted after its entries are removed (agents silent: --cleanup-timeout 3 s)" ccgone
assert_not_contains "$(kubectl get tkcnsc "$N1" -o json)" "$CC" "the cluster node status entry is gone"
step "metrics and probes"
port=$(sed -n 's/.*http server listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$E2E_TMP/c1.log" | head -1)
[[ -n $port ]] || fail "no http server port in the log"
assert_eq "ok" "$(curl -sf "http://127.0.0.1:$port/readyz")" "/readyz ok once synced"
assert_eq "ok" "$(curl -sf "http://127.0.0.1:$port/healthz")" "/healthz ok"
M=$(curl -sf "http://127.0.0.1:$port/metrics")
assert_contains "$M" 'tkm_controller_caches{condition="Ready",status="False"} 2' "caches by condition (both namespaced caches are unverified now)"
assert_contains "$M" 'tkm_controller_reconcile_duration_seconds_count{kind="TritonKernelCache"}' "reconcile histogram"
assert_contains "$M" 'tkm_controller_workqueue_latency_seconds_count' "queue latency histogram"
assert_contains "$M" 'tkm_controller_watch_restarts_total{resource="tritonkernelcachenodestatuses"}' "watch restarts"
assert_contains "$M" 'process_resident_memory_bytes' "process metrics"
writes=$(sed -n 's/^tkm_controller_status_writes_total \([0-9]*\)$/\1/p' <<<"$M")
((writes >= 4 && writes <= 20)) || fail "status writes $writes: expected a handful for this scenario"
pass "status writes: $writes"

step "bad flags are named"
expect_fail "--workers 0" "$CTRL_BIN" --workers 0
assert_contains "$OUT" "--workers 0: use 1..256" "names the flag"
expect_fail "a bind address that is not one" "$CTRL_BIN" --kubeconfig "$KUBECONFIG" --namespace "$NS" --state-dir "" --metrics-bind-address nohost:x
assert_contains "$OUT" "--metrics-bind-address" "names the bind flag"
expect_fail "an unknown flag" "$CTRL_BIN" --bogus
assert_contains "$("$CTRL_BIN" --help)" "--leader-election-id NAME" "--help teaches the flags"
e2e_done
