#!/usr/bin/env bash
# node_variants: a mixed fleet (issue 24) on the real node plus a second node.
#
#   node 1  the real kubelet node, tkm deployed as make demo does (the H200 fixture GPU root,
#           tkm-controller, the key in tkm-config); its setup is node_tkm_full's
#           (node_scenario.inc, NODE_SETUP_ONLY=1), which also declares `vadd`, a single sm90
#           image
#   node 2  a Node object without kubelet, its own tkm-agent process (the A100 fixture root,
#           its driver raised to CUDA 13.0 so the PTX ISA 8.7 of the caches is JIT-able, as a
#           current A100 node would run) and its own tkm-csi process, driven through its CSI
#           socket as kubelet would (in this script's private mount namespace)
#
# The cache `mixed` is one signed variant index of two real Triton 3.6 caches of the same
# kernels, compiled on an H200 for sm90 and cross-compiled there for sm80
# (tests/fixtures/triton-3.6-sm{90-native,80-cross}), built with `tkmctl build --add-variant`
# and signed by its index digest with cosign v3. Asserted:
#   - each node's status names its own variant digest and GPUs; the cache status counts one
#     node per variant; `kubectl get tkc` shows it;
#   - each node pulled only its own variant's layer (its store holds that layer alone);
#   - a pod on node 1 starts and sees exactly the sm90 kernels; a publish through node 2's
#     own tkm-csi serves exactly the sm80 kernels;
#   - the sm90-only `vadd` on node 2 (whenIncompatible defaults to Empty): the publish
#     succeeds with an empty writable volume, one CacheNotUsed Warning event on the pod, and
#     tkm_agent_empty_volumes_total counts it; the same image with whenIncompatible: Fail:
#     today's FailedPrecondition refusal;
#   - scheduling help: vadd's Node label is on node 1 only, and a pod selecting it lands on
#     node 1 and runs.
# shellcheck source=tests/e2e/csi/env.sh
source "$(dirname "$0")/csi/env.sh"
csi_unshare "$0" "$@"
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
NODE_WITH_CONTROLLER=1 NODE_SETUP_ONLY=1
# shellcheck source=tests/e2e/node_scenario.inc
source "$(dirname "$0")/node_scenario.inc"
# shellcheck source=tests/e2e/agent.inc
source "$(dirname "$0")/agent.inc"
F90=$TKM_FIXTURES/triton-3.6-sm90-native/cache
F80=$TKM_FIXTURES/triton-3.6-sm80-cross/cache
[[ -d $F90 && -d $F80 ]] || fail "missing fixture $F90 or $F80"
# kernel dirs of a cache dir, sorted
kdirs() { find "$1" -mindepth 1 -maxdepth 1 -type d -printf '%f\n' | sort; }
K90=$(kdirs "$F90") K80=$(kdirs "$F80")
[[ -n $K90 && -n $K80 && -z $(comm -12 <(echo "$K90") <(echo "$K80")) ]] ||
  fail "the fixtures should have kernel dirs and share none"

# sleeper POD CACHE [SELECTOR_KEY]: a hostNetwork pod on the real node that sleeps with CACHE
# mounted at MP, optionally placed by nodeSelector {SELECTOR_KEY: "true"}
sleeper() {
  local sel=''
  [[ -n ${3:-} ]] && sel="  nodeSelector: {\"$3\": \"true\"}"$'\n'
  kubectl apply -f - >/dev/null <<EOT
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: $NSA}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 0
  hostNetwork: true
${sel}  containers:
  - name: c
    image: $TKM_PYTHON_IMAGE
    imagePullPolicy: IfNotPresent
    command: ["sleep", "3600"]
    volumeMounts: [{name: k, mountPath: $MP}]
  volumes:
  - name: k
    csi: {driver: csi.tkm.io, volumeAttributes: {cacheName: $2}}
EOT
}

step "the variant index: sm90 + sm80 with tkmctl build --add-variant, signed by its index digest"
REPO2=$TKM_REGISTRY/e2e-node-variants-$RANDOM/mixed
"$TKMCTL" build "$F90" --push "$REPO2:v1" --add-variant -o json >"$E2E_TMP/b90.json" || fail "tkmctl build sm90"
"$TKMCTL" build "$F80" --push "$REPO2:v1" --add-variant -o json >"$E2E_TMP/b80.json" || fail "tkmctl build sm80"
DI=$(jq -r .pushedIndex "$E2E_TMP/b80.json")
V90=$(jq -r .variant.digest "$E2E_TMP/b90.json") V80=$(jq -r .variant.digest "$E2E_TMP/b80.json")
L90=$(jq -r .layer "$E2E_TMP/b90.json") L80=$(jq -r .layer "$E2E_TMP/b80.json")
[[ $DI == sha256:* && $V90 == sha256:* && $V80 == sha256:* ]] || fail "tkmctl build -o json: no digests"
OUT=$("$TKMCTL" inspect "$REPO2:v1" -o json) || fail "tkmctl inspect"
assert_eq "$(jq -r '[.variants[] | "\(.arch)=\(.digest)"] | sort | join(" ")' <<<"$OUT")" "80=$V80 90=$V90" "tkmctl inspect lists both variants"
tkm_cosign_sign "$COSIGN" "$IMG" "$REPO2@$DI" || fail "cosign sign the index"
pass "index $REPO2@$DI signed"

step "node 2: a Node, tkm-agent with the A100 root (CUDA 13.0 driver), tkm-csi"
N2=e2e-a100-$RANDOM
agent_node "$N2"
cp -a "$ROOTS/a100" "$E2E_TMP/a100root"
sed -i 's/^driver=.*/driver=580.65.06/; s/^cuda=.*/cuda=13000/' "$E2E_TMP/a100root/nvml.conf"
# tkm-config and the trusted keys are in tkm-system, as for the node pod's agent
agent_start a100 "$E2E_TMP/a100root" "$N2" tkm-system --metrics-bind-address 127.0.0.1:0
csi_setup "$E2E_TMP/csi2"
e2e_on_exit csi_teardown
CSI_AGENT_SOCK=$E2E_TMP/a100/run/agent.sock
csi_driver_start
wait_for 60 "node 2's tkm-csi: its agent is ready" bash -c "$TKM_BUILD_DIR/tests/e2e_csi_client $CSI_SOCK probe | grep -q 'ready=true'"
metrics2() { curl -s "$(grep -o 'metrics on http://[^ ]*' "$E2E_TMP/a100.log" | tail -1 | sed 's/metrics on //')"; }

step "the cache 'mixed': one declaration, each node its own variant"
kubectl apply -f - >/dev/null <<EOT
apiVersion: tkm.io/v1alpha1
kind: TritonKernelCache
metadata: {name: mixed, namespace: $NSA}
spec:
  cacheImage: $REPO2:v1
  mountPath: $MP
EOT
wait_for 60 "the controller pinned the index digest" is "$NSA" tkc/mixed '{.status.resolvedDigest}' "$DI"
wait_for 60 "Verified=True (the index's signature)" is "$NSA" tkc/mixed '{.status.conditions[?(@.type=="Verified")].status}' True
wait_for 90 "node 1 uses the sm90 variant" is "$NSA" "tkcns/$TKM_NODE_NAME" '{.status.caches.mixed.variants[0].digest}' "$V90"
# a node names its variant by digest and GPU ids only; the GPU type is its gpus[] entry's, the
# target the signed index's (the cache status below)
vuse() { # NODE: "<the entry's keys> <gpuType of each GPU id> <ids> <entries>"
  kubectl -n "$NSA" get tkcns "$1" -o json | jq -r '.status as $s | $s.caches.mixed.variants |
    "\(.[0] | keys | join(",")) \([.[0].gpuIds[] as $i | $s.gpus[] | select(.id == $i) | .gpuType] | unique | join(",")) \(.[0].gpuIds | join(",")) \(length)"'
}
assert_eq "digest,gpuIds nvidia-h200 0 1" "$(vuse "$TKM_NODE_NAME")" "node 1: digest and GPU ids only; GPU 0, an H200"
wait_for 90 "node 2 uses the sm80 variant" is "$NSA" "tkcns/$N2" '{.status.caches.mixed.variants[0].digest}' "$V80"
assert_eq "digest,gpuIds nvidia-a100 0 1" "$(vuse "$N2")" "node 2: digest and GPU ids only; GPU 0, an A100 (as before the entry shrank); one variant"
wait_for 60 "the cache status counts one node per variant, with the index's targets" bash -c \
  "kubectl -n $NSA get tkc mixed -o json | jq -e '[.status.variants[] | \"\(.digest)=\(.arch):\(.nodes)\"] | sort == ([\"$V80=80:1\", \"$V90=90:1\"] | sort)' >/dev/null"
SUM=$(kubectl -n "$NSA" get tkc mixed -o jsonpath='{.status.variantSummary}')
assert_contains "$SUM" "cuda/90" "variantSummary names the sm90 variant"
assert_contains "$SUM" "cuda/80" "... and the sm80 one"
assert_contains "$(kubectl -n "$NSA" get tkc mixed)" "$SUM" "kubectl get tkc shows it"
wait_for 60 "Ready=True" is "$NSA" tkc/mixed '{.status.conditions[?(@.type=="Ready")].status}' True

step "node 1: a pod mounts 'mixed' and sees the sm90 kernels only; the store holds the sm90 layer only"
sleeper mixed-a mixed
wait_for 120 "pod mixed-a Running" is "$NSA" pod/mixed-a '{.status.phase}' Running
SEEN=$(kubectl -n "$NSA" exec mixed-a -- python3 -c "import os, sys; d = sys.argv[1]; print('\\n'.join(e for e in os.listdir(d) if os.path.isdir(os.path.join(d, e))))" "$MP" | sort)
assert_eq "$K90" "$SEEN" "the pod sees exactly the sm90 kernel dirs"
[[ -d $STORE/sha256/${L90#sha256:} ]] || fail "node 1's store has no sm90 layer ${L90#sha256:}"
[[ ! -e $STORE/sha256/${L80#sha256:} ]] || fail "node 1's store has the sm80 layer: it pulled a variant no GPU of it uses"
pass "node 1's store: the sm90 layer, not the sm80 one"

step "node 2: a publish through its own tkm-csi serves the sm80 kernels; its store holds the sm80 layer only"
P=$CSI_TMP/pods
csi() {
  [[ $1 != publish ]] || mkdir -p "$(dirname "$3")"
  "$TKM_BUILD_DIR/tests/e2e_csi_client" "$CSI_SOCK" "$@"
}
pub2() { csi publish "$1" "$2" "csi.storage.k8s.io/pod.namespace=$NSA" "${@:3}"; }
expect_ok "publish mixed on node 2" pub2 vol-m "$P/m/mount" cacheName=mixed
assert_eq "$K80" "$(kdirs "$P/m/mount")" "node 2's volume holds exactly the sm80 kernel dirs"
[[ -d $E2E_TMP/a100/store/sha256/${L80#sha256:} ]] || fail "node 2's store has no sm80 layer"
[[ ! -e $E2E_TMP/a100/store/sha256/${L90#sha256:} ]] || fail "node 2's store has the sm90 layer"
pass "node 2's store: the sm80 layer, not the sm90 one"
expect_ok "unpublish" csi unpublish vol-m "$P/m/mount"

step "node 2 and the sm90-only 'vadd' (whenIncompatible unset: Empty): an empty writable volume, one event, the metric"
wait_for 60 "node 2 judged vadd: ArchMismatch" is "$NSA" "tkcns/$N2" '{.status.caches.vadd.incompatibleGPUs[0].reason}' ArchMismatch
# a Pod object bound to node 2 (no kubelet runs it): the event's object
kubectl apply -f - >/dev/null <<EOT
apiVersion: v1
kind: Pod
metadata: {name: n2-pod, namespace: $NSA}
spec:
  nodeName: $N2
  hostNetwork: true
  containers: [{name: c, image: $TKM_PYTHON_IMAGE}]
EOT
UID2=$(kubectl -n "$NSA" get pod n2-pod -o jsonpath='{.metadata.uid}')
expect_ok "publish vadd on node 2" pub2 vol-e "$P/e/mount" cacheName=vadd \
  "csi.storage.k8s.io/pod.name=n2-pod" "csi.storage.k8s.io/pod.uid=$UID2"
assert_eq "" "$(ls -A "$P/e/mount")" "the volume is empty"
(cd "$P/e/mount" && mkdir k1 && echo x >k1/a.cubin) || fail "the empty volume is not writable"
pass "the empty volume is writable"
wait_for 30 "one CacheNotUsed Warning event on the pod" bash -c \
  "kubectl -n $NSA get events --field-selector involvedObject.name=n2-pod,reason=CacheNotUsed -o json | jq -e '[.items[] | select(.type == \"Warning\")] | length == 1' >/dev/null"
assert_contains "$(kubectl -n "$NSA" get events --field-selector involvedObject.name=n2-pod,reason=CacheNotUsed -o jsonpath='{.items[0].message}')" "ArchMismatch" "the event names the reason"
assert_eq "1" "$(metrics2 | awk '$1 ~ /^tkm_agent_empty_volumes_total\{.*ArchMismatch/ {print $2}')" "tkm_agent_empty_volumes_total{reason=ArchMismatch} 1"
wait_for 30 "node 2's status: vadd served empty" is "$NSA" "tkcns/$N2" '{.status.caches.vadd.fallback}' Empty
expect_ok "unpublish the empty volume" csi unpublish vol-e "$P/e/mount"
[[ -z $(find "$CSI_STATE" -maxdepth 3 -name vol-e) ]] || fail "the empty volume's dir is left"

step "the same image with whenIncompatible: Fail: today's refusal"
kubectl apply -f - >/dev/null <<EOT
apiVersion: tkm.io/v1alpha1
kind: TritonKernelCache
metadata: {name: vadd-fail, namespace: $NSA}
spec:
  cacheImage: $REPO:v1
  mountPath: $MP
  whenIncompatible: Fail
EOT
wait_for 90 "node 2 judged vadd-fail" is "$NSA" "tkcns/$N2" '{.status.caches.vadd-fail.incompatibleGPUs[0].reason}' ArchMismatch
expect_fail "publish vadd-fail on node 2" pub2 vol-f "$P/f/mount" cacheName=vadd-fail
assert_contains "$OUT" "FAILED_PRECONDITION" "refused with FAILED_PRECONDITION"
assert_contains "$OUT" "ArchMismatch" "naming the reason"
[[ ! -e $P/f/mount ]] || fail "a refused publish left its target"

step "scheduling help: vadd's Node label on node 1 only; a pod selecting it lands there"
LBL=$(kubectl -n "$NSA" get tkc vadd -o jsonpath='{.status.nodeLabel}')
[[ -n $LBL ]] || fail "vadd has no status.nodeLabel"
wait_for 60 "node 1 labelled $LBL" is default "node/$TKM_NODE_NAME" "{.metadata.labels['${LBL//./\\.}']}" true
assert_eq "" "$(kubectl get node "$N2" -o jsonpath="{.metadata.labels['${LBL//./\\.}']}")" "node 2 (no usable GPU for vadd) is not labelled"
RECIPE=$("$TKM_BUILD_DIR/kubectl-tkm/kubectl-tkm" schedule vadd -n "$NSA") || fail "kubectl tkm schedule: $RECIPE"
assert_contains "$RECIPE" "$LBL" "kubectl tkm schedule prints the label"
sleeper placed vadd "$LBL"
wait_for 120 "pod placed Running" is "$NSA" pod/placed '{.status.phase}' Running
assert_eq "$TKM_NODE_NAME" "$(kubectl -n "$NSA" get pod placed -o jsonpath='{.spec.nodeName}')" "scheduled onto node 1"
# n2-pod has no kubelet to confirm its end: removed at once
kubectl -n "$NSA" delete pod n2-pod --force --grace-period=0 >/dev/null 2>&1
kubectl -n "$NSA" delete pod mixed-a placed --wait=false >/dev/null
e2e_done
