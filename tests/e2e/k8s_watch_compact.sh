#!/usr/bin/env bash
# An etcd compaction makes the informer's resourceVersion expire: the watch
# gets 410 Gone, the informer relists once, synthesizes deletes for objects
# that vanished meanwhile (unknown=1), and its store equals a fresh LIST.
#
# How the 410 is forced: the watcher is SIGSTOPped and kube-apiserver
# restarted (so the watch connection is gone and no event reaches the frozen
# watcher's socket), objects are created and deleted, etcd is compacted at its
# current revision (the etcd v3 JSON gateway), and kube-apiserver is restarted
# again so that its watch cache holds no history; the resumed watcher
# re-watches from its old resourceVersion, which no longer exists anywhere.
source "$(dirname "$0")/lib.sh"

ns=$(e2e_namespace)
prog=$TKM_BUILD_DIR/tests/e2e_k8s_watch
[[ -x $prog ]] || fail "missing $prog (build first)"
source "$(dirname "$0")/progs/k8s_watch_lib.sh"

etcd_revision() {
  curl -sf -X POST "$TKM_ETCD/v3/kv/range" -d '{"key":"AA==","limit":"1"}' |
    sed -n 's/.*"revision":"\([0-9]*\)".*/\1/p'
}

step "10 ConfigMaps, then the informer"
for i in $(seq 1 10); do echo "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"c-$i\"},\"data\":{\"i\":\"$i\"}}"; done |
  kubectl -n "$ns" apply -f - >/dev/null
watcher_start configmaps "$ns"
wait_for 60 "informer synced with 10 objects" grep -q "^SYNCED 10$" "$W_OUT"

step "freeze the watcher, drop its connection; delete 4, create 5, modify 1; compact etcd"
kill -STOP "$W_PID"
"$TKM_SOURCE_DIR/hack/cluster.sh" restart-apiserver >/dev/null 2>&1 || fail "restart-apiserver failed"
kubectl -n "$ns" delete configmap c-1 c-2 c-3 c-4 --wait=false >/dev/null
for i in $(seq 11 15); do kubectl -n "$ns" create configmap "c-$i" --from-literal=i="$i" >/dev/null; done
kubectl -n "$ns" patch configmap c-5 --type merge -p '{"data":{"i":"changed"}}' >/dev/null
rev=$(etcd_revision)
[[ -n $rev ]] || fail "cannot read the etcd revision from $TKM_ETCD"
curl -sf -X POST "$TKM_ETCD/v3/kv/compaction" -d "{\"revision\":\"$rev\",\"physical\":true}" >/dev/null ||
  fail "etcd compaction at revision $rev failed"
pass "etcd compacted at revision $rev"
"$TKM_SOURCE_DIR/hack/cluster.sh" restart-apiserver >/dev/null 2>&1 || fail "restart-apiserver failed"
pass "kube-apiserver restarted (its watch cache has no history now)"
kill -CONT "$W_PID"

step "the informer gets 410, relists once and converges"
wait_for 60 "deletes synthesized for the 4 vanished objects" \
  bash -c "[[ \$(grep -c ' unknown=1$' '$W_OUT') -eq 4 ]]"
converged=0
for _ in $(seq 1 30); do
  if store_equals_list configmaps "$ns"; then converged=1; break; fi
  sleep 1
done
((converged)) || { diff "$E2E_TMP/list" "$E2E_TMP/dump" | head >&2 || true; fail "store != LIST"; }
pass "store equals LIST ($(wc -l <"$E2E_TMP/list") objects)"
stats=$(grep '^STATS' "$W_OUT" | tail -1)
relists=$(sed -n 's/.* relists_410=\([0-9]*\).*/\1/p' <<<"$stats")
lists=$(sed -n 's/.* lists=\([0-9]*\).*/\1/p' <<<"$stats")
((relists >= 1)) || fail "no 410 relist happened: $stats"
((lists == 2)) || fail "expected exactly one relist (2 lists in all), got $lists: $stats"
pass "exactly one relist after 410, no storm ($stats)"
assert_eq 0 "$(grep -c '^DUP ' "$W_OUT" || true)" "no event applied twice"
for i in 11 12 13 14 15; do
  grep -q "^ADD $ns/c-$i " "$W_OUT" || fail "no ADD for c-$i"
done
pass "the 5 objects created meanwhile were added"
grep -q "^UPDATE $ns/c-5 " "$W_OUT" || fail "no UPDATE for the modified c-5"
pass "the modified object was updated"

step "clean exit"
watcher_stop
e2e_done
