#!/usr/bin/env bash
# node_helm: tkm installed, upgraded, rolled back and uninstalled with Helm on the real node
# (issue 27), the chart charts/tkm with its ci/ values for the local control plane and the H200
# fixture GPU root (what manifests/overlays/fixture-gpu is to hack/deploy.sh):
#   - `helm template` passes hack/node.sh's network rule; objects an earlier kustomize deployment left
#     (the CRDs, RBAC, tkm-config, ...) are adopted as docs/install.md says; `helm install --wait`: tkm-node and
#     tkm-controller Ready, the demo's signed cache Ready, a pod mounts it;
#   - `helm upgrade` to a new tkm image tag while that pod runs: the DaemonSet rolls (new node
#     pod on the new tag), the pod's mount still serves its files, the store is not extracted
#     again (the same store directory, the new agent's extraction count 0), the cache and node
#     statuses keep their digests;
#   - `helm upgrade` of values only (tkm-config's prefetch), with Helm 4 on the release Helm 3
#     installed: the ConfigMap changes;
#   - `helm rollback` to revision 1: the first tag again, the mount still serves;
#   - `helm uninstall`: no tkm object is left but the CRDs (and so the caches declared).
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
hack=$TKM_SOURCE_DIR/hack
# shellcheck source=hack/tkm-scenario.sh
source "$hack/tkm-scenario.sh"
eval "$("$hack/node.sh" env)"
is() { [[ $(kubectl -n "$1" get "$2" -o jsonpath="$3" 2>/dev/null) == "$4" ]]; } # NS OBJ JSONPATH VALUE
HELM=$("$hack/testbin/build.sh" --path helm) || fail "cannot build helm"
HELM4=$("$hack/testbin/build.sh" --path helm4) || fail "cannot build helm4"
COSIGN=$("$hack/testbin/build.sh" --path cosign3) || fail "cannot build cosign3"
export COSIGN_PASSWORD='' COSIGN_YES=true
TKMCTL=$TKM_BUILD_DIR/cli/tkmctl FAKE_NVML=$TKM_BUILD_DIR/fakenvml/libnvidia-ml.so.1
CHART=$TKM_SOURCE_DIR/charts/tkm
[[ -x $TKMCTL && -f $FAKE_NVML && -s $CHART/Chart.yaml ]] || fail "build tkmctl and the fake NVML first; the chart is $CHART"
PORT=$(cat "$TKM_CLUSTER_DIR/apiserver.port")
NS=e2e-helm-$RANDOM MP=/home/ml/.triton/cache STORE=/var/lib/tkm/store
GPUROOT=/var/lib/tkm-fixture-gpu
AGENT_METRICS=http://127.0.0.1:28090/metrics # ci/local-values.yaml: the agent's loopback port
h() { "$HELM" "$@"; }
new_dirs=()
for d in /var/lib/tkm /var/run/tkm $GPUROOT; do [[ -e $d ]] || new_dirs+=("$d"); done
tkm_workloads_clear || fail "the tkm workloads an earlier run left did not go"
e2e_on_fail "tkm_diagnose $NS"
e2e_on_exit "kubectl delete pods -n $NS --all --wait=true --timeout=60s >/dev/null 2>&1; '$HELM' uninstall tkm -n tkm-system --wait --timeout 2m >/dev/null 2>&1; tkm_workloads_down; kubectl delete ns $NS --ignore-not-found --wait=false >/dev/null 2>&1; kubectl delete csidriver csi.tkm.io --ignore-not-found >/dev/null 2>&1; ${new_dirs[*]:+rm -rf --one-file-system ${new_dirs[*]}}"

step "images under two tags; the demo's cache image, signed"
expect_ok "hack/images/all.sh (tag e2e)" "$hack/images/all.sh" "$TKM_BUILD_DIR" "$TKM_REGISTRY" e2e
expect_ok "hack/images/all.sh (tag e2e2: the upgrade's)" "$hack/images/all.sh" "$TKM_BUILD_DIR" "$TKM_REGISTRY" e2e2
IMG=$E2E_TMP/img REPO=$TKM_REGISTRY/e2e-node-helm-$RANDOM/vadd
D=$(tkm_cache_image "$TKMCTL" "$TKM_FIXTURES/triton-cache/triton-3.6.0-cuda-sm90.tar.gz" "$IMG" "$REPO:v1") ||
  fail "the cache image (tkmctl build + push): see above"
tkm_cosign_sign "$COSIGN" "$IMG" "$REPO@$D" || fail "cosign sign"
pass "image $REPO@$D signed"
# the fixture GPU root where the chart's node.gpu values point (what hack/deploy.sh does)
rm -rf "$GPUROOT" && mkdir -p "$GPUROOT"
cp -a "$TKM_FIXTURES/gpu/roots/h200"/. "$GPUROOT"/
cp "$FAKE_NVML" "$GPUROOT/libnvidia-ml.so.1"

# values TAG: this cluster's values on top of the chart's ci/ files (Helm replaces lists)
values() {
  cat <<EOT
images:
  agent: {repository: $TKM_REGISTRY/tkm/tkm-agent, tag: $1}
  csi: {repository: $TKM_REGISTRY/tkm/tkm-csi, tag: $1}
  controller: {repository: $TKM_REGISTRY/tkm/tkm-controller, tag: $1}
controller:
  extraEnv:
  - {name: KUBERNETES_SERVICE_HOST, value: "127.0.0.1"}
  - {name: KUBERNETES_SERVICE_PORT, value: "$PORT"}
node:
  agent:
    extraEnv:
    - {name: KUBERNETES_SERVICE_HOST, value: "127.0.0.1"}
    - {name: KUBERNETES_SERVICE_PORT, value: "$PORT"}
    - {name: TKM_FAKE_NVML, value: $GPUROOT/nvml.conf}
  csi:
    extraEnv:
    - {name: KUBERNETES_SERVICE_HOST, value: "127.0.0.1"}
    - {name: KUBERNETES_SERVICE_PORT, value: "$PORT"}
EOT
}
values e2e >"$E2E_TMP/v1.yaml"
values e2e2 >"$E2E_TMP/v2.yaml"
ARGS=(-n tkm-system -f "$CHART/ci/local-values.yaml" -f "$CHART/ci/fixture-gpu-values.yaml"
  --set-file config.signaturePublicKeys="$IMG/cosign.pub" --set-file "trustedKeys.keys.cosign\.pub=$IMG/cosign.pub")

step "helm template passes the node's network rule; helm install"
h template tkm "$CHART" "${ARGS[@]}" -f "$E2E_TMP/v1.yaml" >"$E2E_TMP/rendered.yaml" 2>"$E2E_TMP/template.err" ||
  fail "helm template: $(cat "$E2E_TMP/template.err")"
expect_ok "hack/node.sh check (hostNetwork, local images, the apiserver at 127.0.0.1)" "$hack/node.sh" check "$E2E_TMP/rendered.yaml"
# What an earlier kustomize deployment left (the node tests before this one deploy with hack/deploy.sh and
# delete only the DaemonSet and the Deployment; e2e_crds applies the CRDs): Helm refuses to take over an
# object it does not own, so adopt each one as docs/install.md tells an admin moving to Helm.
adopt_list() {
  kubectl create --dry-run=client -o json -f "$E2E_TMP/rendered.yaml" |
    jq -r '(.items // [.])[] | select(.kind != "Namespace") | "\(.kind) \(.metadata.name) \(.metadata.namespace // "")"'
}
adopted=0
while read -r kind name ons; do
  nsarg=()
  [[ -n $ons ]] && nsarg=(-n "$ons")
  kubectl get "$kind" "$name" "${nsarg[@]}" >/dev/null 2>&1 || continue
  kubectl annotate --overwrite "$kind" "$name" "${nsarg[@]}" meta.helm.sh/release-name=tkm \
    meta.helm.sh/release-namespace=tkm-system >/dev/null || fail "annotate $kind $name"
  kubectl label --overwrite "$kind" "$name" "${nsarg[@]}" app.kubernetes.io/managed-by=Helm >/dev/null ||
    fail "label $kind $name"
  adopted=$((adopted + 1))
done < <(adopt_list)
(($(adopt_list | wc -l) > 10)) || fail "the rendered chart lists only $(adopt_list | wc -l) objects"
pass "adopted $adopted existing objects of the chart for Helm (docs/install.md)"
expect_ok "helm install --wait" h install tkm "$CHART" "${ARGS[@]}" -f "$E2E_TMP/v1.yaml" --create-namespace --wait --timeout 4m
assert_contains "$OUT" "kubectl" "NOTES.txt tells the next commands"
wait_for 180 "tkm-node Ready" is tkm-system ds/tkm-node '{.status.numberReady}' 1
wait_for 180 "tkm-controller Available" kubectl -n tkm-system wait --for=condition=Available deploy/tkm-controller --timeout=1s
node_pod() { kubectl -n tkm-system get pods -l app.kubernetes.io/name=tkm-node -o jsonpath='{.items[?(@.status.phase=="Running")].metadata.name}'; }
NODEPOD1=$(node_pod)
assert_contains "$(kubectl -n tkm-system get pod "$NODEPOD1" -o jsonpath='{.spec.containers[*].image}')" "tkm-agent:e2e" "the node pod runs tag e2e"

step "the demo's cache Ready; a pod mounts it"
kubectl create namespace "$NS" >/dev/null
kubectl apply -f - >/dev/null <<EOT
apiVersion: tkm.io/v1alpha1
kind: TritonKernelCache
metadata: {name: vadd, namespace: $NS}
spec:
  cacheImage: $REPO:v1
  mountPath: $MP
EOT
wait_for 90 "Ready=True" is "$NS" tkc/vadd '{.status.conditions[?(@.type=="Ready")].status}' True
expect_ok "apply w1" "$hack/node.sh" apply - < <(tkm_workload_pod "$NS" w1 vadd "$MP" "$TKM_BUSYBOX_IMAGE")
wait_for 180 "w1 Running" is "$NS" pod/w1 '{.status.phase}' Running
SD=$(find "$STORE/sha256" -mindepth 1 -maxdepth 1 -type d | head -1)
[[ -n $SD ]] || fail "nothing extracted under $STORE/sha256"
SD_INO=$(stat -c %i "$SD")
a_kernel=$(cd "$SD" && find . -name '*.cubin' | head -1)
a_kernel=${a_kernel#./}
SUM=$(sha256sum <"$SD/$a_kernel")
serves() { [[ $(kubectl -n "$NS" exec w1 -- cat "$MP/$a_kernel" | sha256sum) == "$SUM" ]]; }
expect_ok "w1 reads a kernel through its mount" serves
extractions() { curl -sf --max-time 10 "$AGENT_METRICS" | awk '$1 == "tkm_agent_extraction_seconds_count" { print $2 }'; }
assert_eq 1 "$(extractions)" "one extraction"
ND=$(kubectl -n "$NS" get tkcns "$TKM_NODE_NAME" -o jsonpath='{.status.caches.vadd.digest}')
assert_eq "$D" "$ND" "the node status names the digest"

step "helm upgrade to tag e2e2 while w1 runs: the DaemonSet rolls, the mount and the store stay"
expect_ok "helm upgrade --wait" h upgrade tkm "$CHART" "${ARGS[@]}" -f "$E2E_TMP/v2.yaml" --wait --timeout 4m
rolled() { local p; p=$(node_pod); [[ -n $p && $p != "$NODEPOD1" && $(kubectl -n tkm-system get pod "$p" -o jsonpath='{.spec.containers[0].image}') == *:e2e2 ]]; }
wait_for 180 "a new node pod on tag e2e2" rolled
wait_for 180 "tkm-node Ready again" is tkm-system ds/tkm-node '{.status.numberReady}' 1
wait_for 120 "tkm-controller on e2e2" bash -c "kubectl -n tkm-system get deploy tkm-controller -o jsonpath='{.spec.template.spec.containers[0].image}' | grep -q ':e2e2\$'"
assert_eq Running "$(kubectl -n "$NS" get pod w1 -o jsonpath='{.status.phase}')" "w1 kept running"
expect_ok "w1's mount still serves the kernel" serves
wait_for 60 "the new agent serves metrics" bash -c "curl -sf $AGENT_METRICS >/dev/null"
wrote() { [[ $(curl -sf --max-time 10 "$AGENT_METRICS" | awk '$1 == "tkm_agent_status_writes_total" { print $2 }') -ge 1 ]]; }
wait_for 60 "the new agent wrote its node status (it judged the cache again)" wrote
assert_eq true "$(kubectl -n "$NS" get tkcns "$TKM_NODE_NAME" -o jsonpath='{.status.caches.vadd.extracted}')" "it found the cache extracted"
assert_eq 0 "$(extractions)" "the new agent extracted nothing"
assert_eq "$SD_INO" "$(stat -c %i "$SD")" "the same store directory"
assert_eq "$D" "$(kubectl -n "$NS" get tkc vadd -o jsonpath='{.status.resolvedDigest}')" "the cache keeps its digest"
assert_eq "$D" "$(kubectl -n "$NS" get tkcns "$TKM_NODE_NAME" -o jsonpath='{.status.caches.vadd.digest}')" "the node status keeps it"
expect_ok "apply w2 (a new pod on the upgraded node)" "$hack/node.sh" apply - < <(tkm_workload_pod "$NS" w2 vadd "$MP" "$TKM_BUSYBOX_IMAGE")
wait_for 180 "w2 Running" is "$NS" pod/w2 '{.status.phase}' Running
assert_eq 0 "$(extractions)" "w2 used the store copy"

step "helm upgrade of values only (with Helm 4, on the release Helm 3 made); helm rollback"
expect_ok "helm4 upgrade --set config.prefetch=true" "$HELM4" upgrade tkm "$CHART" "${ARGS[@]}" -f "$E2E_TMP/v2.yaml" --set config.prefetch=true --wait --timeout 4m
assert_eq "true" "$(kubectl -n tkm-system get cm tkm-config -o jsonpath='{.data.prefetch}')" "tkm-config's prefetch"
expect_ok "helm rollback to revision 1" h rollback tkm 1 -n tkm-system --wait --timeout 4m
back() { local p; p=$(node_pod); [[ -n $p && $(kubectl -n tkm-system get pod "$p" -o jsonpath='{.spec.containers[0].image}') == *:e2e ]]; }
wait_for 180 "the node pod on tag e2e again" back
wait_for 180 "tkm-node Ready" is tkm-system ds/tkm-node '{.status.numberReady}' 1
assert_eq "" "$(kubectl -n tkm-system get cm tkm-config -o jsonpath='{.data.prefetch}' | grep -x true || true)" "tkm-config as in revision 1"
expect_ok "w1's mount still serves the kernel" serves
assert_eq "$SD_INO" "$(stat -c %i "$SD")" "the same store directory"
assert_contains "$(h history tkm -n tkm-system)" "Rollback to 1" "helm history shows the rollback"

step "helm uninstall leaves the CRDs (and the caches), nothing else of tkm"
kubectl -n "$NS" delete pod w1 w2 --wait=true --timeout=120s >/dev/null || fail "delete w1 w2"
expect_ok "helm uninstall --wait" h uninstall tkm -n tkm-system --wait --timeout 4m
gone() { [[ -z $(kubectl get ds,deploy,pods,cm,secret,sa,role,rolebinding -n tkm-system -l app.kubernetes.io/instance=tkm -o name 2>/dev/null) ]]; }
wait_for 120 "no object of the release in tkm-system" gone
assert_eq "" "$(kubectl get clusterrole,clusterrolebinding,csidriver,validatingadmissionpolicy,validatingadmissionpolicybinding -l app.kubernetes.io/instance=tkm -o name 2>/dev/null)" "no cluster-wide object of the release"
assert_eq "" "$(kubectl get csidriver csi.tkm.io --ignore-not-found -o name)" "the CSIDriver went"
for c in tritonkernelcaches tritonkernelcacheclusters tritonkernelcachenodestatuses tritonkernelcachenodestatusclusters; do
  expect_ok "CRD $c.tkm.io kept" kubectl get crd "$c.tkm.io"
done
assert_eq "$D" "$(kubectl -n "$NS" get tkc vadd -o jsonpath='{.status.resolvedDigest}')" "the cache declared is kept"
e2e_done
