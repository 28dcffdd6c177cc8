#!/usr/bin/env bash
# Streaming list (sendInitialEvents=true) against the real apiserver, seen
# through the fault proxy's request log: the informer syncs from the initial
# events and the initial-events-end bookmark, sends no LIST at all, follows
# changes on the same stream, and after a cut stream resumes with a plain
# watch from its resourceVersion.
source "$(dirname "$0")/lib.sh"

ns=$(e2e_namespace)
prog=$TKM_BUILD_DIR/tests/e2e_k8s_watch
proxy=$TKM_BUILD_DIR/tests/e2e_faultproxy
[[ -x $prog && -x $proxy ]] || fail "missing $prog or $proxy (build first)"
source "$(dirname "$0")/progs/k8s_watch_lib.sh"

pki=$TKM_CLUSTER_DIR/pki
"$proxy" --upstream "$TKM_APISERVER" --cacert "$pki/ca.crt" --cert "$pki/admin.crt" \
  --key "$pki/admin.key" --port-file "$E2E_TMP/proxy.port" --log "$E2E_TMP/proxy.log" \
  2>"$E2E_TMP/proxy.err" &
e2e_on_exit "kill $! 2>/dev/null"
wait_for 10 "proxy listening" test -s "$E2E_TMP/proxy.port"
P=http://127.0.0.1:$(cat "$E2E_TMP/proxy.port")
kc=$E2E_TMP/proxy.kubeconfig
kubectl config --kubeconfig="$kc" set-cluster proxy --server="$P" >/dev/null
kubectl config --kubeconfig="$kc" set-credentials anonymous >/dev/null
kubectl config --kubeconfig="$kc" set-context proxy --cluster=proxy --user=anonymous >/dev/null
kubectl config --kubeconfig="$kc" use-context proxy >/dev/null

step "informer with a streaming list"
for i in 1 2 3 4 5; do kubectl -n "$ns" create configmap "s-$i" --from-literal=i=$i >/dev/null; done
watcher_start configmaps "$ns" --kubeconfig "$kc" --streaming-list
wait_for 60 "synced with 5 objects" grep -q "^SYNCED 5$" "$W_OUT"
first=$(grep -m1 'configmaps.* START$' "$E2E_TMP/proxy.log")
assert_contains "$first" "sendInitialEvents=true&resourceVersionMatch=NotOlderThan" "the list is a streaming watch"
kubectl -n "$ns" delete configmap s-1 >/dev/null
kubectl -n "$ns" patch configmap s-2 --type merge -p '{"data":{"i":"x"}}' >/dev/null
kubectl -n "$ns" create configmap s-6 --from-literal=i=6 >/dev/null
wait_for 30 "changes arrive on the same stream" grep -q "^ADD $ns/s-6 " "$W_OUT"

step "cut the stream: a plain watch resumes, still no LIST"
curl -sf "$P/__fault/cut?count=1&after_bytes=10" >/dev/null
kubectl -n "$ns" create configmap s-7 --from-literal=i=7 >/dev/null
wait_for 30 "the object created at the cut arrives" grep -q "^ADD $ns/s-7 " "$W_OUT"
converged=0
for _ in $(seq 1 20); do
  if store_equals_list configmaps "$ns"; then converged=1; break; fi
  sleep 0.5
done
((converged)) || { diff "$E2E_TMP/list" "$E2E_TMP/dump" >&2 || true; fail "store != LIST"; }
pass "store equals LIST"
lists=$(grep -c 'configmaps?resourceVersion=[^ ]* START$' "$E2E_TMP/proxy.log" || true)
assert_eq 0 "$lists" "no LIST request was sent"
rewatch=$(grep 'configmaps.* START$' "$E2E_TMP/proxy.log" | sed -n 2p)
assert_contains "$rewatch" "?watch=1&resourceVersion=" "the resumed request is a plain watch from the RV"
assert_not_contains "$rewatch" "sendInitialEvents" "the resumed request does not stream a list again"
stats=$(grep '^STATS' "$W_OUT" | tail -1)
assert_contains "$stats" "lists=1 " "one (streamed) list"
assert_contains "$stats" "streaming_fallbacks=0 " "no fallback to LIST"
assert_eq 0 "$(grep -c '^DUP ' "$W_OUT" || true)" "no event applied twice"
watcher_stop
e2e_done
