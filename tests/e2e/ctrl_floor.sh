#!/usr/bin/env bash
# ctrl_floor: the floor under signature policy on the real tkm-controller (issue 23). With no
# signatureFloor the floor is the cluster's signatureMode: a namespaced cache with mode Disabled
# or Audit under Enforce gets Verified=False / PolicyBelowFloor and is not Ready; a stricter
# tenant policy (Enforce under a cluster default of Audit) is honoured (an unsigned image stays
# unusable); signatureFloor: Disabled lets tenants switch checks off, and a cluster-scoped cache
# may choose any mode. tkm-agent's own refusal is tested by csi_agent (publish refused).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/ctrl_helpers.bash"

ctrl_crds
NS=$(e2e_namespace)
CTRL_NS=$NS
CC=e2e-floor-cc-$RANDOM
finish() {
  kubectl -n "$NS" delete tkc --all --wait=false >/dev/null 2>&1
  kubectl delete tkcc "$CC" --wait=false >/dev/null 2>&1
  for _ in $(seq 20); do [[ -z $(kubectl -n "$NS" get tkc -o name 2>/dev/null) ]] && break; sleep 0.5; done
  ctrl_kill_all
}
e2e_on_exit finish

step "an unsigned image; tkm-config names a key, mode Enforce, no floor"
ctrl_keys
REPO=$TKM_REGISTRY/e2e-floor-$RANDOM/cache
D=$(ctrl_image "$REPO" v1)
[[ $D == sha256:* ]] || fail "no digest: $D"
kubectl -n "$NS" create configmap tkm-config --from-file=signaturePublicKeys="$E2E_TMP/cosign.pub" \
  --from-literal=signatureMode=Enforce >/dev/null
kubectl -n "$NS" create secret generic signing-key --from-file=cosign.pub="$E2E_TMP/cosign.pub" >/dev/null
tkc() { # NAME POLICY-YAML
  printf 'apiVersion: tkm.io/v1alpha1\nkind: TritonKernelCache\nmetadata: {name: %s}\nspec:\n  cacheImage: "%s"\n%s\n' \
    "$1" "$REPO:v1" "${2:-}" | kubectl -n "$NS" apply -f - >/dev/null
}
reason_is() { [[ $(ctrl_reason "$NS" "$1" Verified) == "$2" ]]; }
ctrl_start c1
tkc weak '  signaturePolicy: {mode: Disabled}'
tkc audit '  signaturePolicy: {mode: Audit}'
tkc strict '  signaturePolicy: {mode: Enforce, publicKeySecretRef: {name: signing-key, key: cosign.pub}}'
printf 'apiVersion: tkm.io/v1alpha1\nkind: TritonKernelCacheCluster\nmetadata: {name: %s}\nspec:\n  cacheImage: "%s"\n  signaturePolicy: {mode: Disabled}\n' \
  "$CC" "$REPO:v1" | kubectl apply -f - >/dev/null

step "below the floor: PolicyBelowFloor, never Ready"
wait_for 60 "weak: PolicyBelowFloor" reason_is tkc/weak PolicyBelowFloor
wait_for 30 "audit: PolicyBelowFloor" reason_is tkc/audit PolicyBelowFloor
assert_eq "False" "$(ctrl_cond "$NS" tkc/weak Verified)" "weak: Verified=False"
assert_eq "False" "$(ctrl_cond "$NS" tkc/weak Ready)" "weak: Ready=False"
assert_contains "$(kubectl -n "$NS" get tkc weak -o jsonpath='{.status.conditions[?(@.type=="Verified")].message}')" \
  "signature mode Disabled is weaker than the floor Enforce set for namespaced caches by ConfigMap $NS/tkm-config" \
  "the message says which floor and where it is set"
wait_for 30 "strict: NoSignature (the unsigned image, refused)" reason_is tkc/strict NoSignature
wait_for 30 "the cluster-scoped cache may choose Disabled" reason_is "tkcc/$CC" VerificationDisabled

step "a stricter tenant policy is honoured under a cluster default of Audit"
kubectl -n "$NS" patch configmap tkm-config --type=merge -p '{"data":{"signatureMode":"Audit"}}' >/dev/null
wait_for 60 "audit: no longer below the floor (Audit = Audit)" bash -c \
  "[[ \$(kubectl -n $NS get tkc audit -o jsonpath='{.status.conditions[?(@.type==\"Verified\")].reason}') != PolicyBelowFloor ]]"
assert_eq "PolicyBelowFloor" "$(ctrl_reason "$NS" tkc/weak Verified)" "weak: Disabled is still below Audit"
assert_eq "NoSignature" "$(ctrl_reason "$NS" tkc/strict Verified)" "strict: still refused"
assert_eq "False" "$(ctrl_cond "$NS" tkc/strict Ready)" "strict: Ready=False (Enforce, not the cluster's Audit)"

step "signatureFloor: Disabled lets tenants switch checks off"
kubectl -n "$NS" patch configmap tkm-config --type=merge -p '{"data":{"signatureFloor":"Disabled"}}' >/dev/null
wait_for 60 "weak: VerificationDisabled" reason_is tkc/weak VerificationDisabled
e2e_done
