#!/usr/bin/env bash
# k8s_rest: libk8sclient's REST verbs against the real kube-apiserver.
# CRUD and server-side apply of a ConfigMap and of a TritonKernelCache and its
# status; identical re-apply keeps the resourceVersion; two field managers
# conflict (409 with the apiserver's message) unless forced; 404/409/422/403
# Status replies surface with their messages; list paging; delete
# preconditions; Event aggregation.
source "$(dirname "$0")/lib.sh"

PBIN=$TKM_BUILD_DIR/tests/e2e_k8s_rest
[[ -x $PBIN ]] || fail "missing $PBIN (build first)"
P() { "$PBIN" "$@"; }
PV() { e2e_valgrind "$PBIN" "$@"; } # one run of each kind of call is checked by valgrind
kubectl apply -f "$TKM_SOURCE_DIR/crds/" >/dev/null
e2e_crds_established tritonkernelcaches
NS=$(e2e_namespace)
T=$E2E_TMP
jf() { jq -r "$1"; } # jf FILTER < json

step "raw requests over HTTP/2"
expect_ok "GET /version twice" PV version
assert_eq "$(grep -c '^http=2 git=v1\.' <<<"$OUT")" "2" "HTTP/2 negotiated with the apiserver"

step "ConfigMap CRUD"
cat >"$T/cm.json" <<EOF
{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm1","labels":{"app":"e2e"}},"data":{"a":"1"}}
EOF
expect_ok "create configmap" P create configmaps "$NS" "$T/cm.json"
UID1=$(jf .metadata.uid <<<"$OUT")
RV1=$(jf .metadata.resourceVersion <<<"$OUT")
assert_eq "$(kubectl get cm cm1 -n "$NS" -o jsonpath='{.data.a}')" "1" "kubectl sees the created data"
expect_fail "create again" PV create configmaps "$NS" "$T/cm.json"
assert_contains "$OUT" "rc=EEXIST code=409 reason=AlreadyExists" "409 AlreadyExists decoded"
assert_contains "$OUT" 'configmaps "cm1" already exists' "apiserver message shown"
expect_ok "get" P get configmaps "$NS" cm1
assert_eq "$(jf .data.a <<<"$OUT")" "1" "get returns the data"
echo '{"data":{"c":"3"}}' >"$T/merge.json"
expect_ok "merge patch" P patch configmaps "$NS" cm1 merge "$T/merge.json"
assert_eq "$(jf .data.c <<<"$OUT")" "3" "merge patch applied"
echo '[{"op":"replace","path":"/data/c","value":"4"}]' >"$T/jp.json"
expect_ok "json patch" P patch configmaps "$NS" cm1 json "$T/jp.json"
assert_eq "$(jf .data.c <<<"$OUT")" "4" "json patch applied"
echo '[{"op":"test","path":"/data/c","value":"nope"}]' >"$T/jp-bad.json"
expect_fail "json patch test op fails" PV patch configmaps "$NS" cm1 json "$T/jp-bad.json"
assert_contains "$OUT" "code=422" "failed JSON patch test is 422"
expect_fail "get missing" P get configmaps "$NS" missing
assert_contains "$OUT" 'rc=ENOENT code=404 reason=NotFound transport=0: 404 NotFound: configmaps "missing" not found' "404 decoded with message"

step "list with selector and paging"
for i in 2 3 4; do
  jq --arg n "cm$i" '.metadata.name = $n' "$T/cm.json" >"$T/cm$i.json"
  P create configmaps "$NS" "$T/cm$i.json" >/dev/null
done
expect_ok "list page 1" PV list configmaps "$NS" "app=e2e" 2
assert_eq "$(jf '.items | length' <<<"$OUT")" "2" "limit 2 gives 2 items"
CONT=$(jf .metadata.continue <<<"$OUT")
[[ -n $CONT && $CONT != null ]] || fail "no continue token"
expect_ok "list page 2" P list configmaps "$NS" "app=e2e" 2 "$CONT"
assert_eq "$(jf '.items | length' <<<"$OUT")" "2" "second page has the rest"
expect_ok "list with a selector matching nothing" P list configmaps "$NS" "app=none"
assert_eq "$(jf '.items | length' <<<"$OUT")" "0" "selector filters"

step "delete with preconditions"
expect_fail "delete with a wrong uid precondition" PV delete configmaps "$NS" cm1 uid=00000000-0000-0000-0000-000000000000
assert_contains "$OUT" "code=409" "precondition failure is 409"
assert_contains "$OUT" "the UID in the precondition" "precondition message shown"
expect_ok "delete with the right uid, foreground" P delete configmaps "$NS" cm1 "uid=$UID1" prop=Foreground
# No garbage collector runs in the test control plane: foreground deletion
# stays pending, which shows the propagation policy reached the apiserver.
assert_contains "$(kubectl get cm cm1 -n "$NS" -o jsonpath='{.metadata.finalizers}')" "foregroundDeletion" "propagationPolicy Foreground sent"
RV2=$(kubectl get cm cm2 -n "$NS" -o jsonpath='{.metadata.resourceVersion}')
expect_fail "delete with a stale resourceVersion precondition" P delete configmaps "$NS" cm2 rv=1
assert_contains "$OUT" "rc=ESTALE code=409 reason=Conflict" "stale resourceVersion precondition is a 409 Conflict"
expect_ok "delete with the current resourceVersion" P delete configmaps "$NS" cm2 "rv=$RV2" prop=Background
expect_fail "gone after delete" kubectl get cm cm2 -n "$NS"
[[ -n $RV1 ]] || fail "no resourceVersion"

step "server-side apply of a ConfigMap"
cat >"$T/ssa.json" <<EOF
{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"ssa1"},"data":{"k":"a"}}
EOF
expect_ok "apply creates" P apply configmaps "$NS" mgr-a 0 "$T/ssa.json"
RVA=$(jf .metadata.resourceVersion <<<"$OUT")
expect_ok "identical re-apply" P apply configmaps "$NS" mgr-a 0 "$T/ssa.json"
assert_eq "$(jf .metadata.resourceVersion <<<"$OUT")" "$RVA" "identical re-apply keeps the resourceVersion"
jq '.data.k = "b"' "$T/ssa.json" >"$T/ssa-b.json"
expect_fail "second manager conflicts" PV apply configmaps "$NS" mgr-b 0 "$T/ssa-b.json"
assert_contains "$OUT" "rc=ESTALE code=409 reason=Conflict" "conflict is 409"
assert_contains "$OUT" 'conflict with "mgr-a"' "apiserver's conflict message shown"
assert_contains "$OUT" "FieldManagerConflict" "causes decoded"
expect_ok "forced apply takes over" P apply configmaps "$NS" mgr-b 1 "$T/ssa-b.json"
assert_eq "$(jf .data.k <<<"$OUT")" "b" "forced apply wrote"
assert_contains "$(jf '[.metadata.managedFields[].manager] | join(",")' <<<"$OUT")" "mgr-b" "mgr-b owns a field"

step "TritonKernelCache: SSA of the object and of its status"
cat >"$T/tkc.json" <<EOF
{"apiVersion":"tkm.io/v1alpha1","kind":"TritonKernelCache","metadata":{"name":"cache-a"},
 "spec":{"cacheImage":"registry.example.com:5000/kernels/flash:3.6.0"}}
EOF
expect_ok "apply TKC" P apply tkc "$NS" tkm-e2e 0 "$T/tkc.json"
RVT=$(jf .metadata.resourceVersion <<<"$OUT")
expect_ok "re-apply TKC" P apply tkc "$NS" tkm-e2e 0 "$T/tkc.json"
assert_eq "$(jf .metadata.resourceVersion <<<"$OUT")" "$RVT" "identical TKC re-apply keeps the resourceVersion"
assert_eq "$(kubectl get tkc cache-a -n "$NS" -o jsonpath='{.spec.cacheImage}')" "registry.example.com:5000/kernels/flash:3.6.0" "kubectl sees the TKC"
DIG=sha256:$(printf '%064d' 7)
cat >"$T/tkc-status.json" <<EOF
{"apiVersion":"tkm.io/v1alpha1","kind":"TritonKernelCache","metadata":{"name":"cache-a"},
 "status":{"resolvedDigest":"$DIG","observedGeneration":1,"summary":{"entryCount":4}}}
EOF
expect_ok "apply TKC status" PV apply tkc "$NS" tkm-controller 1 "$T/tkc-status.json" status
assert_eq "$(jf .status.resolvedDigest <<<"$OUT")" "$DIG" "status applied through /status"
RVS=$(jf .metadata.resourceVersion <<<"$OUT")
expect_ok "re-apply TKC status" P apply tkc "$NS" tkm-controller 1 "$T/tkc-status.json" status
assert_eq "$(jf .metadata.resourceVersion <<<"$OUT")" "$RVS" "identical status re-apply keeps the resourceVersion"
assert_eq "$(kubectl get tkc cache-a -n "$NS" -o jsonpath='{.status.summary.entryCount}')" "4" "kubectl sees the status"
jq '.status.resolvedDigest = "sha256:'"$(printf '%064d' 8)"'"' "$T/tkc-status.json" >"$T/tkc-status-b.json"
expect_fail "another manager's status apply conflicts" P apply tkc "$NS" intruder 0 "$T/tkc-status-b.json" status
assert_contains "$OUT" "code=409" "status conflict is 409"
assert_contains "$OUT" 'conflict with "tkm-controller"' "status conflict names the owner"
expect_ok "get the status subresource" P get tkc "$NS" cache-a status
assert_eq "$(jf .status.resolvedDigest <<<"$OUT")" "$DIG" "status unchanged after the refused apply"

step "422 Invalid from the CRD schema"
cat >"$T/tkc-bad.json" <<EOF
{"apiVersion":"tkm.io/v1alpha1","kind":"TritonKernelCache","metadata":{"name":"bad"},"spec":{"cacheImage":"no registry here"}}
EOF
expect_fail "invalid TKC" PV create tkc "$NS" "$T/tkc-bad.json"
assert_contains "$OUT" "rc=EINVAL code=422 reason=Invalid" "422 Invalid decoded"
assert_contains "$OUT" "spec.cacheImage" "the field is named"
cat >"$T/tkc-nospec.json" <<EOF
{"apiVersion":"tkm.io/v1alpha1","kind":"TritonKernelCache","metadata":{"name":"bad2"}}
EOF
expect_fail "TKC without spec" P create tkc "$NS" "$T/tkc-nospec.json"
assert_contains "$OUT" "Required value" "required-field message shown"
assert_contains "$OUT" "[FieldValueRequired spec" "cause decoded"

step "unprivileged user gets 403 with the message"
expect_fail "alice get" PV --kubeconfig "$TKM_CLUSTER_DIR/alice.kubeconfig" get tkc "$NS" cache-a
assert_contains "$OUT" "rc=EACCES code=403 reason=Forbidden" "403 decoded"
assert_contains "$OUT" 'User "alice" cannot get resource "tritonkernelcaches"' "RBAC message shown"
expect_fail "alice apply" P --kubeconfig "$TKM_CLUSTER_DIR/alice.kubeconfig" apply tkc "$NS" x 1 "$T/tkc.json"
assert_contains "$OUT" 'cannot patch resource "tritonkernelcaches"' "RBAC patch message shown"

step "transport errors are not HTTP errors"
sed "s#server: https://127.0.0.1:[0-9]*#server: https://127.0.0.1:1#" "$TKM_CLUSTER_DIR/admin.kubeconfig" >"$T/dead.kubeconfig"
expect_fail "nothing listens" P --kubeconfig "$T/dead.kubeconfig" get configmaps "$NS" x
assert_contains "$OUT" "rc=ECONNREFUSED code=0 reason=- transport=1" "transport error marked as such"
# A CA that did not sign the apiserver's certificate: verification fails.
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$T/other.key" -out "$T/other.crt" -days 1 -subj /CN=other 2>/dev/null
cp "$TKM_CLUSTER_DIR/admin.kubeconfig" "$T/wrongca.kubeconfig"
kubectl config --kubeconfig="$T/wrongca.kubeconfig" set-cluster tkm-dev --certificate-authority="$T/other.crt" --embed-certs=true >/dev/null
expect_fail "wrong CA" PV --kubeconfig "$T/wrongca.kubeconfig" get configmaps "$NS" x
assert_contains "$OUT" "rc=EPROTO" "TLS verification failure is EPROTO"
assert_contains "$OUT" "transport=1" "and a transport error"

step "tls-server-name verifies another name on the same address"
cp "$TKM_CLUSTER_DIR/admin.kubeconfig" "$T/sni.kubeconfig"
kubectl config --kubeconfig="$T/sni.kubeconfig" set clusters.tkm-dev.tls-server-name kubernetes.default >/dev/null
expect_ok "tls-server-name in the certificate" P --kubeconfig "$T/sni.kubeconfig" get namespaces - default
kubectl config --kubeconfig="$T/sni.kubeconfig" set clusters.tkm-dev.tls-server-name wrong.example >/dev/null
expect_fail "tls-server-name not in the certificate" P --kubeconfig "$T/sni.kubeconfig" get namespaces - default
assert_contains "$OUT" "wrong.example" "the rejected name is shown"

step "events are aggregated"
expect_ok "emit events" PV events "$NS" ConfigMap ssa1
assert_eq "$OUT" "created=2 aggregated=2 failed=0" "3 repeats -> 1 Event (count 3) + 1 other"
CNT=$(kubectl get events -n "$NS" -o json | jq '[.items[] | select(.reason=="E2ERepeated")] | (length|tostring) + ":" + (.[0].count|tostring)')
assert_eq "$CNT" '"1:3"' "one E2ERepeated Event with count 3"
assert_eq "$(kubectl get events -n "$NS" -o json | jq -r '[.items[] | select(.reason=="E2EOther")] | length')" "1" "the other Event exists"

e2e_done
