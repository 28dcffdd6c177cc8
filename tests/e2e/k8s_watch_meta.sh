#!/usr/bin/env bash
# Metadata-only informers (PartialObjectMetadata): for Nodes (cluster-scoped)
# and ConfigMaps the store holds only metadata (no spec, status or data),
# through the initial list and through watch events.
source "$(dirname "$0")/lib.sh"

ns=$(e2e_namespace)
prog=$TKM_BUILD_DIR/tests/e2e_k8s_watch
[[ -x $prog ]] || fail "missing $prog (build first)"
source "$(dirname "$0")/progs/k8s_watch_lib.sh"

node=e2e-meta-$RANDOM
kubectl create -f - >/dev/null <<YAML
apiVersion: v1
kind: Node
metadata: {name: $node, labels: {tkm.io/e2e: meta}}
spec: {podCIDR: 10.9.0.0/24}
YAML
e2e_on_exit "kubectl delete node $node --wait=false >/dev/null 2>&1"
kubectl -n "$ns" create configmap big --from-literal=payload="$(head -c 4000 /dev/zero | tr '\0' x)" >/dev/null

step "Nodes, metadata only"
watcher_start nodes "" --metadata-only --show-json
wait_for 30 "informer synced" grep -q "^SYNCED" "$W_OUT"
line=$(grep "^JSON $node " "$W_OUT" || true)
assert_contains "$line" '"kind":"PartialObjectMetadata"' "the Node is stored as PartialObjectMetadata"
assert_contains "$line" '"tkm.io/e2e":"meta"' "its labels are kept"
assert_not_contains "$line" '"spec":{' "its spec is not"
watcher_stop
rm -f "$E2E_TMP/watcher.ok"

step "ConfigMaps, metadata only, list and watch"
watcher_start configmaps "$ns" --metadata-only --show-json
wait_for 30 "informer synced" grep -q "^SYNCED 1$" "$W_OUT"
kubectl -n "$ns" create configmap later --from-literal=payload=yyyyyyyyyyyy >/dev/null
wait_for 30 "the watched object arrives" grep -q "^JSON $ns/later " "$W_OUT"
listed=$(grep "^JSON $ns/big " "$W_OUT")
watched=$(grep "^JSON $ns/later " "$W_OUT")
assert_contains "$listed" '"kind":"PartialObjectMetadata"' "listed object is metadata only"
assert_not_contains "$listed" xxxxxxxx "listed object has no data"
assert_contains "$watched" '"kind":"PartialObjectMetadata"' "watched object is metadata only"
assert_not_contains "$watched" yyyyyyyy "watched object has no data"
((${#listed} < 1500)) || fail "metadata-only object is ${#listed} bytes"
pass "metadata-only object is ${#listed} bytes (the ConfigMap holds 4000 bytes of data)"
watcher_stop
e2e_done
