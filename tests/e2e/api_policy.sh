#!/usr/bin/env bash
# api_policy: <tkm/api/policy.h> on the real apiserver. A cache's effective
# signature policy (spec, else ConfigMap tkm-config, else the default) with
# the keys and trusted roots it references read from Secrets and ConfigMaps,
# the failure reasons a person sees (SecretNotFound, NoTrustedKey,
# InvalidPolicy, KeyInvalid), tenant isolation (a namespaced cache reads only
# its namespace; a cluster cache reads the daemon's namespace), and the
# registry credentials of imagePullSecrets.
source "$(dirname "$0")/lib.sh"

PBIN=$TKM_BUILD_DIR/tests/e2e_api_policy
[[ -x $PBIN ]] || fail "missing $PBIN (build first)"
e2e_crds
NS=$(e2e_namespace)    # the tenant
SYS=$(e2e_namespace)   # the daemons' namespace (tkm-system in a deployment)
OTHER=$(e2e_namespace) # another tenant
T=$E2E_TMP
IMG=registry.example.com:5000/kernels/vector-add:v1

openssl ecparam -name prime256v1 -genkey -noout -out "$T/k1.pem" 2>/dev/null
openssl ec -in "$T/k1.pem" -pubout -out "$T/k1.pub" 2>/dev/null
openssl ecparam -name prime256v1 -genkey -noout -out "$T/k2.pem" 2>/dev/null
openssl ec -in "$T/k2.pem" -pubout -out "$T/k2.pub" 2>/dev/null
cat "$T/k1.pub" "$T/k2.pub" >"$T/both.pub"
printf '{"mediaType":"x","keys":[]}' >"$T/trusted_root.json"
indent() { sed 's/^/      /' "$1"; }

tkc() { # NAME POLICY-YAML [EXTRA-SPEC-YAML]
  cat >"$T/$1.yaml" <<EOF
apiVersion: tkm.io/v1alpha1
kind: TritonKernelCache
metadata: {name: $1, namespace: $NS}
spec:
  cacheImage: $IMG
${2:-}
${3:-}
EOF
  kubectl apply -f "$T/$1.yaml" >/dev/null
}
# runv: under valgrind (a few calls cover the fetch, failure and credential paths).
run() { OUT=$("$PBIN" "$@") || fail "e2e_api_policy $*: $OUT"; echo "$OUT"; }
runv() { OUT=$(e2e_valgrind "$PBIN" "$@") || fail "e2e_api_policy $*: $OUT"; echo "$OUT"; }

step "no tkm-config, no spec policy: the default (Enforce) has no key"
tkc plain ""
OUT=$(run "$NS" plain "$SYS")
assert_contains "$OUT" "policy rc=-126 reason=NoTrustedKey" "default policy without a key"
assert_contains "$OUT" "ConfigMap $SYS/tkm-config" "the message says where to put a key"
assert_contains "$OUT" "creds rc=0 user=-" "no pull secrets: anonymous"

step "an inline key in the spec"
tkc inline "  signaturePolicy:
    mode: Enforce
    publicKey: |
$(indent "$T/k1.pub")"
OUT=$(run "$NS" inline "$SYS")
assert_contains "$OUT" "policy rc=0 source=spec mode=Enforce keys=1 root=0" "inline key"

step "a key from a Secret in the cache's namespace (default key cosign.pub)"
tkc secret "  signaturePolicy: {mode: Enforce, publicKeySecretRef: {name: sig}}"
OUT=$(runv "$NS" secret "$SYS")
assert_contains "$OUT" "policy rc=-2 reason=SecretNotFound message=Secret $NS/sig not found" "missing Secret"
kubectl -n "$NS" create secret generic sig --from-file=other.pub="$T/k1.pub" >/dev/null
OUT=$(run "$NS" secret "$SYS")
assert_contains "$OUT" "reason=SecretNotFound message=Secret $NS/sig has no key \"cosign.pub\"" "Secret without the key"
kubectl -n "$NS" delete secret sig >/dev/null
kubectl -n "$NS" create secret generic sig --from-file=cosign.pub="$T/both.pub" >/dev/null
OUT=$(runv "$NS" secret "$SYS")
assert_contains "$OUT" "policy rc=0 source=spec mode=Enforce keys=2" "both keys of the Secret"
assert_contains "$OUT" "key from Secret $NS/sig cosign.pub" "describe names the Secret"

step "a Secret holding garbage: KeyInvalid"
kubectl -n "$NS" create secret generic junk --from-literal=cosign.pub="-----BEGIN PUBLIC KEY-----
bm90IGEga2V5
-----END PUBLIC KEY-----" >/dev/null
tkc junk "  signaturePolicy: {mode: Enforce, publicKeySecretRef: {name: junk}}"
OUT=$(run "$NS" junk "$SYS")
assert_contains "$OUT" "reason=KeyInvalid" "a key that does not parse"

step "the floor: a namespaced cache may not weaken the cluster's default (Enforce)"
tkc disabled "  signaturePolicy: {mode: Disabled, publicKeySecretRef: {name: absent}}"
OUT=$(run "$NS" disabled "$SYS")
assert_contains "$OUT" "policy rc=-1 reason=PolicyBelowFloor message=spec.signaturePolicy (Disabled): signature mode Disabled is weaker than the floor Enforce" "Disabled under the default floor"
tkc audit "  signaturePolicy: {mode: Audit, publicKeySecretRef: {name: absent}}"
OUT=$(run "$NS" audit "$SYS")
assert_contains "$OUT" "reason=PolicyBelowFloor" "Audit under the default floor"

step "tkm-config in the daemons' namespace gives the default; signatureFloor lowers the floor"
kubectl -n "$SYS" create configmap tkm-config --from-file=signaturePublicKeys="$T/k2.pub" \
  --from-literal=signatureMode=Enforce --from-literal=signatureAllowCrossRepository=true \
  --from-literal=prefetch=true --from-literal=signatureFloor=Disabled >/dev/null
OUT=$(run "$NS" disabled "$SYS")
assert_contains "$OUT" "policy rc=0 source=spec mode=Disabled keys=0" "Disabled under floor Disabled: no fetch, no error"
OUT=$(run "$NS" plain "$SYS")
assert_contains "$OUT" "policy rc=0 source=config mode=Enforce keys=1 root=0 ids=0 cross=1" "tkm-config keys, mode and cross-repository"
tkc modeonly "  signaturePolicy: {mode: Audit}"
OUT=$(run "$NS" modeonly "$SYS")
assert_contains "$OUT" "policy rc=0 source=spec mode=Audit keys=1" "a spec policy with only a mode takes tkm-config's keys"

step "keyless: trusted root from a ConfigMap, identities from the spec"
kubectl -n "$NS" create configmap root --from-file=trusted_root.json="$T/trusted_root.json" >/dev/null
tkc keyless "  signaturePolicy:
    mode: Enforce
    keyless:
      trustedRoot: {kind: ConfigMap, name: root}
      identities: [{issuer: https://issuer.example, subject: dev@example.com}]"
OUT=$(run "$NS" keyless "$SYS")
assert_contains "$OUT" "policy rc=0 source=spec mode=Enforce keys=0 root=$(stat -c %s "$T/trusted_root.json") ids=1" "keyless policy"

step "tenant isolation: a namespaced cache never reads another namespace"
kubectl -n "$OTHER" create secret generic sig --from-file=cosign.pub="$T/k1.pub" >/dev/null
kubectl -n "$OTHER" create configmap root --from-file=trusted_root.json="$T/trusted_root.json" >/dev/null
cat >"$T/thief.yaml" <<EOF
apiVersion: tkm.io/v1alpha1
kind: TritonKernelCache
metadata: {name: thief, namespace: $NS}
spec:
  cacheImage: $IMG
  signaturePolicy:
    mode: Enforce
    keyless:
      trustedRoot: {kind: ConfigMap, name: root, namespace: $OTHER}
      identities: [{issuer: https://issuer.example, subject: dev@example.com}]
EOF
expect_fail "the schema has no trustedRoot.namespace for namespaced caches" kubectl apply -f "$T/thief.yaml"
assert_contains "$OUT" 'unknown field "spec.signaturePolicy.keyless.trustedRoot.namespace"' "refused by the apiserver"
OUT=$(run "$NS" secret "$SYS")
assert_contains "$OUT" "key from Secret $NS/sig" "a namespaced cache's Secret is read in its own namespace, not $OTHER"

step "a cluster cache reads the daemons' namespace"
CC=e2e-policy-cc-$RANDOM
cat >"$T/cc.yaml" <<EOF
apiVersion: tkm.io/v1alpha1
kind: TritonKernelCacheCluster
metadata: {name: $CC}
spec:
  cacheImage: $IMG
  signaturePolicy: {mode: Enforce, publicKeySecretRef: {name: sig}}
  imagePullSecrets: [{name: pull}]
EOF
kubectl apply -f "$T/cc.yaml" >/dev/null
e2e_on_exit "kubectl delete tkcc $CC --wait=false >/dev/null 2>&1"
OUT=$(run - "$CC" "$SYS")
assert_contains "$OUT" "message=Secret $SYS/sig not found" "cluster cache: the Secret is looked up in the daemons' namespace"
assert_contains "$OUT" "creds rc=-2 reason=SecretNotFound message=imagePullSecret $SYS/pull not found" "missing pull secret"
kubectl -n "$SYS" create secret generic sig --from-file=cosign.pub="$T/k1.pub" >/dev/null
kubectl -n "$SYS" create secret docker-registry pull --docker-server=registry.example.com:5000 \
  --docker-username=robot --docker-password=s3cret >/dev/null
OUT=$(runv - "$CC" "$SYS")
assert_contains "$OUT" "policy rc=0 source=spec mode=Enforce keys=1" "cluster cache key from the daemons' namespace"
assert_contains "$OUT" "creds rc=0 user=robot source=Secret $SYS/pull" "pull secret credentials for the image's host"

step "pull secrets: first match wins, other hosts are anonymous, wrong types refused"
kubectl -n "$NS" create secret docker-registry elsewhere --docker-server=other.example.com \
  --docker-username=nobody --docker-password=x >/dev/null
kubectl -n "$NS" create secret docker-registry pull --docker-server=registry.example.com:5000 \
  --docker-username=tenant --docker-password=pw >/dev/null
tkc pulls "  signaturePolicy: {mode: Disabled}" "  imagePullSecrets: [{name: elsewhere}, {name: pull}]"
OUT=$(run "$NS" pulls "$SYS")
assert_contains "$OUT" "creds rc=0 user=tenant source=Secret $NS/pull" "the Secret naming the host is used"
tkc nohost "  signaturePolicy: {mode: Disabled}" "  imagePullSecrets: [{name: elsewhere}]"
OUT=$(run "$NS" nohost "$SYS")
assert_contains "$OUT" "creds rc=0 user=-" "no Secret for the host: anonymous"
tkc badtype "  signaturePolicy: {mode: Disabled}" "  imagePullSecrets: [{name: sig}]"
OUT=$(run "$NS" badtype "$SYS")
assert_contains "$OUT" "reason=InvalidPolicy message=imagePullSecret $NS/sig has type \"Opaque\"" "an Opaque Secret is not a pull secret"

step "tkm-config with garbage is an error naming the key"
kubectl -n "$SYS" create configmap tkm-config --dry-run=client -o yaml \
  --from-literal=signatureMode=enforce | kubectl apply -f - >/dev/null 2>&1
OUT=$(run "$NS" plain "$SYS")
assert_contains "$OUT" 'config rc=-22 message=tkm-config signatureMode: "enforce" is not Enforce, Audit or Disabled' "bad signatureMode"
e2e_done
