#!/usr/bin/env bash
# api_status: lib/api's encoded status bodies through k8sclient's server-side apply
# on the real kube-apiserver, read back through lib/api's decoders. A node status
# (namespaced and cluster kinds, owned by a Node) and a cache status (tkc and tkcc):
# the identical re-apply keeps the resourceVersion, the decoded-and-re-encoded
# status is byte-identical to what was sent, and kubectl sees the fields.
source "$(dirname "$0")/lib.sh"

PBIN=$TKM_BUILD_DIR/tests/e2e_api_status
[[ -x $PBIN ]] || fail "missing $PBIN (build first)"
e2e_crds
NS=$(e2e_namespace)
T=$E2E_TMP
NODE="e2e-api-node-$RANDOM"

step "a Node to own the node statuses"
cat >"$T/node.json" <<EOF2
{"apiVersion":"v1","kind":"Node","metadata":{"name":"$NODE","labels":{"e2e":"api-status"}}}
EOF2
kubectl create -f "$T/node.json" >/dev/null
e2e_on_exit "kubectl delete node $NODE --wait=false >/dev/null 2>&1; kubectl delete tkcnsc $NODE --wait=false >/dev/null 2>&1; kubectl delete tkcc e2e-api-cc --wait=false >/dev/null 2>&1"
NODE_UID=$(kubectl get node "$NODE" -o jsonpath='{.metadata.uid}')
[[ -n $NODE_UID ]] || fail "no uid for node $NODE"

check_roundtrip() { # WHAT: $OUT of one e2e_api_status run
  local rv1 rv2
  rv1=$(sed -n 's/^rv1=\([^ ]*\) rv2=.*/\1/p' <<<"$OUT")
  rv2=$(sed -n 's/^rv1=[^ ]* rv2=\(.*\)/\1/p' <<<"$OUT")
  [[ -n $rv1 ]] || fail "$1: no resourceVersion in: $OUT"
  assert_eq "$rv1" "$rv2" "$1: identical re-apply keeps resourceVersion"
  assert_contains "$OUT" "roundtrip=identical" "$1: decoded and re-encoded status is byte-identical"
}

step "node status (namespaced) applied, re-applied, decoded"
expect_ok "apply node status" e2e_valgrind "$PBIN" node "$NS" "$NODE" "$NODE_UID"
check_roundtrip tkcns
assert_contains "$OUT" "decoded: cluster=0 node=$NODE gpus=2 gpu1=GPU-b caches=2 first=alpha verified=1 compatible=0,1 incompatible=ArchMismatch pod=trainer-0 zeta.error=signature does not verify" "tkcns decoded"
assert_eq "$(kubectl get tkcns "$NODE" -n "$NS" -o jsonpath='{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].uid}')" "Node/$NODE_UID" "owned by the Node"
assert_eq "$(kubectl get tkcns "$NODE" -n "$NS" -o jsonpath='{.status.gpuCount} {.status.gpuTypes} {.status.cacheCount} {.status.caches.alpha.verified}')" "2 nvidia-h200 2 true" "kubectl sees the printer-column fields and the cache"
MGR=$(kubectl get tkcns "$NODE" -n "$NS" --show-managed-fields -o jsonpath='{range .metadata.managedFields[*]}{.manager}:{.operation}:{.subresource};{end}')
assert_contains "$MGR" "tkm-agent:Apply:status" "status owned by tkm-agent through /status"

step "node status (cluster kind)"
expect_ok "apply cluster node status" "$PBIN" node - "$NODE" "$NODE_UID"
check_roundtrip tkcnsc
assert_contains "$OUT" "decoded: cluster=1 node=$NODE" "tkcnsc decoded as the cluster kind"

step "cache status (tkc and tkcc)"
cat >"$T/tkc.yaml" <<EOF2
apiVersion: tkm.io/v1alpha1
kind: TritonKernelCache
metadata: {name: e2e-api-tkc, namespace: $NS}
spec:
  cacheImage: registry.example.com:5000/kernels/vector-add:v1
  signaturePolicy: {mode: Enforce, publicKeySecretRef: {name: sig, key: cosign.pub}}
EOF2
sed -e 's/kind: TritonKernelCache$/kind: TritonKernelCacheCluster/' -e "s/name: e2e-api-tkc, namespace: $NS/name: e2e-api-cc/" "$T/tkc.yaml" >"$T/tkcc.yaml"
kubectl apply -f "$T/tkc.yaml" >/dev/null
kubectl apply -f "$T/tkcc.yaml" >/dev/null
expect_ok "apply cache status" e2e_valgrind "$PBIN" cache "$NS" e2e-api-tkc
check_roundtrip tkc
assert_contains "$OUT" "decoded: cluster=0 image=registry.example.com:5000/kernels/vector-add:v1 mode=1 keyref=sig digest=sha256:1111111111111111111111111111111111111111111111111111111111111111 entries=3 nodes=3 failed=node-9 conditions=2 ready=2 gen=1" "tkc spec and status decoded"
assert_eq "$(kubectl get tkc e2e-api-tkc -n "$NS" -o jsonpath='{.status.conditions[?(@.type=="Verified")].status} {.status.counts.failed}')" "True 1" "kubectl sees the conditions and counts"
expect_ok "apply cluster cache status" "$PBIN" cache - e2e-api-cc
check_roundtrip tkcc
assert_contains "$OUT" "decoded: cluster=1" "tkcc decoded as the cluster kind"

e2e_done
