#!/usr/bin/env bash
# The four tkm.io CRDs on a real kube-apiserver: they install and become
# Established, teach through `kubectl explain`, accept the samples, reject
# malformed objects with a message naming the field, and `kubectl get tkm`
# lists all four kinds with their printer columns.
source "$(dirname "$0")/lib.sh"

step "the apiserver is the real one we built (hack/testbin/build.sh; TKM_KUBE_VERSION picks the minor)"
want=$("$TKM_SOURCE_DIR/hack/testbin/build.sh" --version kube-apiserver)
ver=$(curl -sf --cacert "$TKM_CLUSTER_DIR/pki/ca.crt" "$TKM_APISERVER/version")
assert_eq "$want" "$(jq -r .gitVersion <<<"$ver")" "kube-apiserver /version gitVersion"
minor=${want#v1.}
assert_eq "${minor%%.*}" "$(jq -r .minor <<<"$ver")" "kube-apiserver /version minor"
assert_contains "$(kubectl version -o json | jq -r .serverVersion.gitVersion)" "$want" "kubectl sees the same server"

step "generated CRDs are up to date"
"$TKM_SOURCE_DIR/hack/gen-crds.sh" "$E2E_TMP/crds" 2>/dev/null
expect_ok "crds/ matches hack/gen-crds.sh output" diff -r "$E2E_TMP/crds" "$TKM_SOURCE_DIR/crds"

step "install"
expect_ok "kubectl apply -f crds/" kubectl apply --server-side --force-conflicts -f "$TKM_SOURCE_DIR/crds/"
for crd in tritonkernelcaches tritonkernelcacheclusters tritonkernelcachenodestatuses tritonkernelcachenodestatusclusters; do
  e2e_crds_established "$crd"
  assert_eq "True" "$(kubectl get crd "$crd.tkm.io" -o jsonpath='{.status.conditions[?(@.type=="NamesAccepted")].status}')" "$crd NamesAccepted"
done
scopes=$(kubectl get crd -l app.kubernetes.io/part-of=tkm -o jsonpath='{range .items[*]}{.spec.names.shortNames[0]}={.spec.scope} {end}')
for s in tkc=Namespaced tkcc=Cluster tkcns=Namespaced tkcnsc=Cluster; do
  assert_contains "$scopes" "$s" "scope and short name $s"
done
# Discovery can lag the Established condition by a moment.
wait_for 30 "category tkm in discovery" bash -c 'kubectl api-resources --categories=tkm --no-headers | wc -l | grep -qx 4'

step "kubectl explain teaches"
out=$(kubectl explain tkc.spec.cacheImage)
assert_contains "$out" "The OCI image holding the Triton cache" "explain tkc.spec.cacheImage"
assert_contains "$out" "registry/repository[:tag][@sha256:<64 hex digits>]" "explain shows the reference form"
out=$(kubectl explain tkcns.status.caches)
assert_contains "$out" "Per cache (keyed by the cache's name)" "explain tkcns.status.caches"
out=$(kubectl explain tkcc.spec.signaturePolicy.mode)
assert_contains "$out" "Enforce" "explain tkcc.spec.signaturePolicy.mode"

step "samples are accepted"
ns=$(e2e_namespace)
sed "s/namespace: ml/namespace: $ns/" "$TKM_SOURCE_DIR/manifests/samples/tritonkernelcache.yaml" >"$E2E_TMP/tkc.yaml"
expect_ok "sample TritonKernelCache" kubectl create --validate=strict -f "$E2E_TMP/tkc.yaml"
sed "s/namespace: ml/namespace: $ns/" "$TKM_SOURCE_DIR/manifests/samples/torch-compile.yaml" >"$E2E_TMP/torch-compile.yaml"
# no controller-manager here: the namespace's default service account, as it would make it
kubectl -n "$ns" create serviceaccount default >/dev/null 2>&1 || true
expect_ok "sample torch.compile cache and pod (server dry run)" kubectl create --dry-run=server --validate=strict -f "$E2E_TMP/torch-compile.yaml"
cluster_name="e2e-sample-$RANDOM"
sed "s/name: llama-blocks-h200/name: $cluster_name/" "$TKM_SOURCE_DIR/manifests/samples/tritonkernelcachecluster.yaml" >"$E2E_TMP/tkcc.yaml"
expect_ok "sample TritonKernelCacheCluster" kubectl create --validate=strict -f "$E2E_TMP/tkcc.yaml"
e2e_on_exit "kubectl delete tkcc $cluster_name --wait=false >/dev/null 2>&1"
assert_eq "registry.example.com:5000/kernels/vector-add:triton-3.6.0-sm90" \
  "$(kubectl -n "$ns" get tkc vector-add-h200 -o jsonpath='{.spec.cacheImage}')" "sample read back"

step "malformed objects are rejected, naming the field"
reject() { # WHAT EXPECTED-SUBSTRING YAML
  local what=$1 want=$2
  printf '%s\n' "$3" >"$E2E_TMP/bad.yaml"
  expect_fail "$what" kubectl create --validate=strict -f "$E2E_TMP/bad.yaml"
  assert_contains "$OUT" "$want" "$what: message"
}
tkc() { printf 'apiVersion: tkm.io/v1alpha1\nkind: TritonKernelCache\nmetadata: {name: bad, namespace: %s}\n%s\n' "$ns" "$1"; }
reject "image without registry host" 'spec.cacheImage: Invalid value' "$(tkc 'spec: {cacheImage: "vector-add:latest"}')"
assert_contains "$OUT" "must be a fully qualified OCI image reference" "bad image: explains the form"
reject "image with short digest" 'spec.cacheImage' "$(tkc 'spec: {cacheImage: "quay.io/x/y@sha256:abcd"}')"
reject "image with upper-case repository" 'spec.cacheImage' "$(tkc 'spec: {cacheImage: "quay.io/X/y:v1"}')"
reject "missing cacheImage" 'spec.cacheImage: Required value' "$(tkc 'spec: {mountPath: /x}')"
reject "missing spec" 'spec: Required value' "$(tkc '')"
reject "unknown field (strict)" 'unknown field "spec.cacheImag"' "$(tkc 'spec: {cacheImage: "quay.io/x/y:v1", cacheImag: "typo"}')"
long=$(printf 'a%.0s' $(seq 1 600))
reject "oversized cacheImage" 'spec.cacheImage: Too long' "$(tkc "spec: {cacheImage: \"quay.io/x/$long:v1\"}")"
reject "relative mountPath" 'must be an absolute path' "$(tkc 'spec: {cacheImage: "quay.io/x/y:v1", mountPath: "triton"}')"
reject "mountPath with .." "must not contain '..' components" "$(tkc 'spec: {cacheImage: "quay.io/x/y:v1", mountPath: "/a/../etc"}')"
reject "unknown signature mode" 'spec.signaturePolicy.mode: Unsupported value: "Strict"' \
  "$(tkc 'spec: {cacheImage: "quay.io/x/y:v1", signaturePolicy: {mode: Strict}}')"
reject "Enforce without a key" 'mode Enforce needs a key' "$(tkc 'spec: {cacheImage: "quay.io/x/y:v1", signaturePolicy: {mode: Enforce}}')"
reject "two key sources" 'set publicKey or publicKeySecretRef, not both' \
  "$(tkc 'spec: {cacheImage: "quay.io/x/y:v1", signaturePolicy: {publicKey: "-----BEGIN PUBLIC KEY-----\nx", publicKeySecretRef: {name: k}}}')"
KL_ID='{issuer: "https://token.actions.githubusercontent.com", subjectRegExp: "https://github.com/example/.*"}'
KL_ROOT='{kind: ConfigMap, name: sigstore-trusted-root}'
reject "keyless without identities" 'keyless needs a trustedRoot and at least one identity' \
  "$(tkc "spec: {cacheImage: \"quay.io/x/y:v1\", signaturePolicy: {mode: Enforce, keyless: {trustedRoot: $KL_ROOT}}}")"
reject "keyless with no identity in the list" 'any signer at all is not a policy' \
  "$(tkc "spec: {cacheImage: \"quay.io/x/y:v1\", signaturePolicy: {keyless: {trustedRoot: $KL_ROOT, identities: []}}}")"
reject "keyless without a trusted root" 'keyless needs a trustedRoot' \
  "$(tkc "spec: {cacheImage: \"quay.io/x/y:v1\", signaturePolicy: {keyless: {identities: [$KL_ID]}}}")"
reject "identity with subject and subjectRegExp" 'each identity needs exactly one of subject and subjectRegExp' \
  "$(tkc "spec: {cacheImage: \"quay.io/x/y:v1\", signaturePolicy: {keyless: {trustedRoot: $KL_ROOT, identities: [{issuer: \"https://i\", subject: a, subjectRegExp: b}]}}}")"
reject "identity with neither" 'each identity needs exactly one of subject and subjectRegExp' \
  "$(tkc "spec: {cacheImage: \"quay.io/x/y:v1\", signaturePolicy: {keyless: {trustedRoot: $KL_ROOT, identities: [{issuer: \"https://i\"}]}}}")"
reject "identity without issuer" 'issuer: Required value' \
  "$(tkc "spec: {cacheImage: \"quay.io/x/y:v1\", signaturePolicy: {keyless: {trustedRoot: $KL_ROOT, identities: [{subject: a}]}}}")"
reject "trusted root of an unknown kind" 'spec.signaturePolicy.keyless.trustedRoot.kind: Unsupported value: "Pod"' \
  "$(tkc "spec: {cacheImage: \"quay.io/x/y:v1\", signaturePolicy: {keyless: {trustedRoot: {kind: Pod, name: x}, identities: [$KL_ID]}}}")"
tkc "spec: {cacheImage: \"quay.io/x/y:v1\", signaturePolicy: {mode: Enforce, allowCrossRepository: true, keyless: {trustedRoot: $KL_ROOT, identities: [$KL_ID]}}}" |
  sed 's/name: bad/name: keyless-ok/' >"$E2E_TMP/keyless.yaml"
expect_ok "Enforce with keyless only is accepted" kubectl create --validate=strict -f "$E2E_TMP/keyless.yaml"
out=$(kubectl explain tkc.spec.signaturePolicy.keyless.identities)
assert_contains "$out" "Who may sign" "explain keyless.identities"
out=$(kubectl explain tkcc.spec.signaturePolicy.keyless.trustedRoot.namespace)
assert_contains "$out" "Namespace of the ConfigMap" "explain tkcc keyless.trustedRoot.namespace"
reject "too many pull secrets" 'spec.imagePullSecrets: Too many' \
  "$(tkc 'spec: {cacheImage: "quay.io/x/y:v1", imagePullSecrets: [{name: a},{name: b},{name: c},{name: d},{name: e},{name: f},{name: g},{name: h},{name: i}]}')"

step "unprivileged users are refused by RBAC"
expect_fail "alice cannot create a cache" kubectl --kubeconfig "$TKM_CLUSTER_DIR/alice.kubeconfig" create -f "$E2E_TMP/tkc.yaml"
assert_contains "$OUT" 'User "alice" cannot create resource "tritonkernelcaches" in API group "tkm.io"' "403 names the user and resource"

step "status is a subresource and feeds the printer columns"
digest="sha256:$(printf 'ab%.0s' $(seq 1 32))"
now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
status=$(jq -nc --arg d "$digest" --arg t "$now" '{status:{resolvedDigest:$d, counts:{nodes:3,compatible:2,incompatible:1,failed:0,inUse:1},
  conditions:[{type:"Ready",status:"True",reason:"CompatibleNodes",message:"2 of 3 nodes can use the cache",lastTransitionTime:$t,observedGeneration:1},
              {type:"Verified",status:"True",reason:"SignatureVerified",message:"cosign signature verified",lastTransitionTime:$t,observedGeneration:1}]}}')
expect_ok "patch status through /status" kubectl -n "$ns" patch tkc vector-add-h200 --subresource=status --type=merge -p "$status"
expect_ok "a status change through the main resource is ignored" kubectl -n "$ns" patch tkc vector-add-h200 --type=merge -p '{"status":{"counts":{"nodes":99}}}'
assert_eq "3" "$(kubectl -n "$ns" get tkc vector-add-h200 -o jsonpath='{.status.counts.nodes}')" "status kept its value"
expect_fail "bad digest in status" kubectl -n "$ns" patch tkc vector-add-h200 --subresource=status --type=merge -p '{"status":{"resolvedDigest":"sha256:xyz"}}'
assert_contains "$OUT" "status.resolvedDigest" "bad status digest names the field"

node="e2e-node-$RANDOM"
printf 'apiVersion: tkm.io/v1alpha1\nkind: TritonKernelCacheNodeStatus\nmetadata: {name: %s, namespace: %s}\n' "$node" "$ns" >"$E2E_TMP/ns.yaml"
printf 'apiVersion: tkm.io/v1alpha1\nkind: TritonKernelCacheNodeStatusCluster\nmetadata: {name: %s}\n' "$node" >"$E2E_TMP/nsc.yaml"
expect_ok "create a node status" kubectl create -f "$E2E_TMP/ns.yaml"
expect_ok "create a cluster node status" kubectl create -f "$E2E_TMP/nsc.yaml"
e2e_on_exit "kubectl delete tkcnsc $node --wait=false >/dev/null 2>&1"
nstatus=$(jq -nc --arg n "$node" --arg d "$digest" --arg t "$now" '{status:{nodeName:$n,gpuCount:8,gpuTypes:"nvidia-h200",cacheCount:1,lastUpdated:$t,
  gpus:[{id:0,gpuType:"nvidia-h200",vendor:"nvidia",productName:"NVIDIA H200",arch:"90",computeCapability:"9.0",warpSize:32,driverVersion:"580.95.05",cudaDriverVersion:"13.0",memoryBytes:150754820096}],
  caches:{"vector-add-h200":{digest:$d,verified:true,extracted:true,compatibleGPUs:[{ids:[0],gpuType:"nvidia-h200"}],incompatibleGPUs:[],lastUpdated:$t}}}}')
expect_ok "patch node status through /status" \
  kubectl -n "$ns" patch tkcns "$node" --subresource=status --type=merge -p "$nstatus"
expect_ok "patch cluster node status through /status" kubectl patch tkcnsc "$node" --subresource=status --type=merge -p "$nstatus"
expect_fail "unknown vendor enum" kubectl -n "$ns" patch tkcns "$node" --subresource=status --type=merge \
  -p '{"status":{"gpus":[{"id":1,"vendor":"intel"}]}}'
assert_contains "$OUT" 'status.gpus[0].vendor: Unsupported value: "intel"' "enum error names the field"

step "kubectl get tkm lists all four kinds with their columns"
out=$(kubectl get tkm -A)
echo "$out"
for kind in tritonkernelcache.tkm.io/vector-add-h200 "tritonkernelcachecluster.tkm.io/$cluster_name" \
  "tritonkernelcachenodestatus.tkm.io/$node" "tritonkernelcachenodestatuscluster.tkm.io/$node"; do
  assert_contains "$out" "$kind" "get tkm lists $kind"
done
hdr=$(kubectl get tkc -n "$ns")
hdr=${hdr%%$'\n'*} # first line; not `| head -1`, whose early exit fails kubectl under pipefail
for col in NAME READY VERIFIED DIGEST NODES COMPATIBLE FAILED AGE; do
  assert_contains "$hdr" "$col" "tkc column $col"
done
row=$(kubectl get tkc -n "$ns" vector-add-h200 --no-headers | tr -s ' ')
assert_contains "$row" "vector-add-h200 True True $digest 3 2 0 " "tkc row shows Ready/Verified/digest/counts"
hdr=$(kubectl get tkcns -n "$ns")
hdr=${hdr%%$'\n'*}
for col in NODE GPUS "GPU TYPE" CACHES AGE; do
  assert_contains "$hdr" "$col" "tkcns column $col"
done
assert_contains "$(kubectl get tkcnsc "$node" --no-headers | tr -s ' ')" "$node $node 8 nvidia-h200 1 " "tkcnsc row shows node/GPUs/type/caches"
e2e_done
