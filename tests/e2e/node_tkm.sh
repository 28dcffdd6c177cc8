#!/usr/bin/env bash
# node_tkm: tkm deployed as pods on the real test node (hack/node.sh) from
# manifests/overlays/local, with the ServiceAccounts' real tokens.
#
# What runs: the tkm-node DaemonSet with the real tkm-csi container, registering
# itself with the real kubelet; its tkm-agent container runs e2e_csi_testagent, a
# protocol-level STAND-IN for tkm-agent (tests/e2e/progs/csi_testagent.c: serves
# agent.proto from the sm90 fixture cache extracted into the store hostPath;
# declared caches are given on its command line, not read from the apiserver),
# until tkm-agent and tkm-controller are merged; the steps that need them are in
# tests/e2e/node_tkm_full.sh.pending. The controller Deployment is left out here
# (its image does not exist yet); e2e.deploy_manifests checks it server-side.
#
# Checks: the DaemonSet pod is Running and Ready with the tkm-agent ServiceAccount;
# its token is a bound token carrying the node name, and with it the apiserver lets
# the agent write its own node's status object and refuses another node's (the
# ValidatingAdmissionPolicy, with a real token, not impersonation); tkm-csi has no
# token; CSINode lists csi.tkm.io; a workload pod with a csi.tkm.io inline volume
# starts, sees the cache at its mountPath with group files rewritten for it, its
# written file lands in its scratch layer only; a second pod shares the store copy;
# a pod naming an undeclared cache stays ContainerCreating with PermissionDenied in
# `kubectl describe pod`; deleting the agent pod mid-publish and restarting kubelet
# both converge; deleting the pods leaves no mount and no directory.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
hack=$TKM_SOURCE_DIR/hack
# shellcheck source=hack/tkm-scenario.sh
source "$hack/tkm-scenario.sh"
eval "$("$hack/node.sh" env)"
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f", b-a}'; }
is() { [[ $(kubectl -n "$1" get "$2" -o jsonpath="$3" 2>/dev/null) == "$4" ]]; } # NS OBJ JSONPATH VALUE
none() { [[ -z $("$@" 2>/dev/null) ]]; }
TAG=e2e
NSA=e2e-tkm-a-$RANDOM NSB=e2e-tkm-b-$RANDOM # workload namespaces (a later run never meets a terminating one)
STORE=/var/lib/tkm/store/e2e-node-tkm # below the DaemonSet's store hostPath
CACHES=/var/run/tkm/caches
KROOT=$TKM_KUBELET_ROOT
[[ $KROOT == /var/lib/kubelet ]] || fail "the DaemonSet mounts /var/lib/kubelet; the test node's kubelet root is $KROOT"
t_all=$(now)

step "images: tkm-csi (make images) and the stand-in agent, pushed to $TKM_REGISTRY"
t0=$(now)
new_dirs=()
for d in /var/lib/tkm /var/run/tkm; do [[ -e $d ]] || new_dirs+=("$d"); done
tkm_workloads_clear || fail "the tkm workloads an earlier run left did not go"
# At exit, in this order: the workload pods (kubelet unpublishes their volumes through the
# driver), the node pod (gone, not only deleted), the CSIDriver, then what this test put on the host.
e2e_on_fail "tkm_diagnose $NSA $NSB"
e2e_on_exit "kubectl delete pods -n $NSA --all --wait=true --timeout=60s >/dev/null 2>&1; kubectl delete pods -n $NSB --all --wait=true --timeout=60s >/dev/null 2>&1; kubectl delete ns $NSA $NSB --ignore-not-found --wait=false >/dev/null 2>&1; tkm_workloads_down; kubectl delete csidriver csi.tkm.io --ignore-not-found >/dev/null 2>&1; rm -rf --one-file-system $STORE ${new_dirs[*]}"
expect_ok "hack/images/all.sh" "$hack/images/all.sh" "$TKM_BUILD_DIR" "$TKM_REGISTRY" "$TAG"
assert_contains "$OUT" "tkm-csi $TKM_REGISTRY/tkm/tkm-csi:$TAG" "tkm-csi image pushed"
expect_ok "stand-in agent image" "$hack/images/tkm.sh" "$TKM_REGISTRY" "$TAG" "tkm-test-agent=$TKM_BUILD_DIR/tests/e2e_csi_testagent"
echo "timing: images: $(since "$t0") s"

step "the fixture store on the node"
rm -rf "$STORE"
mkdir -p "$STORE"
tar -xzf "$TKM_FIXTURES/triton-cache/triton-3.6.0-cuda-sm90.tar.gz" -C "$STORE"
SD=$(find "$STORE" -mindepth 1 -maxdepth 1 -type d | head -1)
[[ -n $SD ]] || fail "no cache dir in the sm90 fixture"
a_kernel=$(cd "$SD" && find . -name '*.cubin' | head -1)
a_kernel=${a_kernel#./}
grp=$(cd "$SD" && find . -name '__grp__*.json' | head -1)
grp=${grp#./}
[[ -n $a_kernel && -n $grp ]] || fail "the fixture has no .cubin or group file"
pass "store $SD ($(find "$SD" -type f | wc -l) files)"
store_sum() { (cd "$SD" && find . -printf '%p %s %m\n' | sort && find . -type f -exec sha256sum {} + | sort) | sha256sum; }
sum0=$(store_sum)

step "deploy: manifests/overlays/local, the stand-in agent in the agent container"
# A kustomization over overlays/local: only what the stand-in needs differs.
ov=$E2E_TMP/overlay
mkdir -p "$ov"
cat >"$ov/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- $(realpath --relative-to="$ov" "$TKM_SOURCE_DIR/manifests/overlays/local")
patches:
- patch: |-
    \$patch: delete
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: tkm-controller, namespace: tkm-system}
- target: {kind: DaemonSet, name: tkm-node}
  patch: |-
    - {op: replace, path: /spec/template/spec/containers/0/image, value: 127.0.0.1:5000/tkm/tkm-test-agent:dev}
    - {op: replace, path: /spec/template/spec/containers/0/args, value: [--socket, /var/run/tkm/agent/agent.sock, --store, $SD, --cache, demo=/cache, --delay-ms, "1500"]}
    - {op: remove, path: /spec/template/spec/containers/0/startupProbe}
    - {op: remove, path: /spec/template/spec/containers/0/livenessProbe}
    - {op: remove, path: /spec/template/spec/containers/0/readinessProbe}
EOF
t_deploy=$(now)
expect_ok "hack/deploy.sh" "$hack/deploy.sh" --overlay "$ov" --tag "$TAG"
assert_contains "$OUT" "daemonset.apps/tkm-node serverside-applied" "DaemonSet applied"
assert_contains "$OUT" "csidriver.storage.k8s.io/csi.tkm.io serverside-applied" "CSIDriver applied"
e2e_crds >/dev/null
wait_for 120 "tkm-node pod Ready (2/2)" is tkm-system ds/tkm-node '{.status.numberReady}' 1
echo "timing: deploy -> DaemonSet Ready: $(since "$t_deploy") s"
NODEPOD=$(kubectl -n tkm-system get pods -l app.kubernetes.io/name=tkm-node -o jsonpath='{.items[0].metadata.name}')
assert_eq "Running $TKM_NODE_NAME tkm-agent true" "$(kubectl -n tkm-system get pod "$NODEPOD" -o jsonpath='{.status.phase} {.spec.nodeName} {.spec.serviceAccountName} {.spec.hostNetwork}')" "runs on the node, hostNetwork, as tkm-agent"
assert_eq "tkm-agent=false tkm-csi=true" "$(kubectl -n tkm-system get pod "$NODEPOD" -o jsonpath='{range .spec.containers[*]}{.name}={.securityContext.privileged}{" "}{end}' | sed 's/ $//')" "only tkm-csi is privileged"
assert_eq "Bidirectional" "$(kubectl -n tkm-system get pod "$NODEPOD" -o jsonpath='{.spec.containers[?(@.name=="tkm-csi")].volumeMounts[?(@.mountPath=="/var/lib/kubelet")].mountPropagation}')" "tkm-csi: Bidirectional on the kubelet dir"

step "ServiceAccount tokens: bound to the pod and the node, not admin"
sa_mounts() { kubectl -n tkm-system get pod "$NODEPOD" -o jsonpath="{.spec.containers[?(@.name==\"$1\")].volumeMounts[?(@.mountPath==\"/var/run/secrets/kubernetes.io/serviceaccount\")].name}"; }
tokvol=$(sa_mounts tkm-agent)
assert_contains "$tokvol" "kube-api-access-" "tkm-agent gets the projected token volume"
assert_eq "no-token" "$(sa_mounts tkm-csi)" "tkm-csi: the token path is masked by an empty dir"
uid=$(kubectl -n tkm-system get pod "$NODEPOD" -o jsonpath='{.metadata.uid}')
tokfile=$KROOT/pods/$uid/volumes/kubernetes.io~projected/$tokvol/token
wait_for 30 "kubelet wrote the token" test -s "$tokfile"
printf 'apiVersion: v1\nkind: Config\n' >"$E2E_TMP/empty.kubeconfig"
as_agent() { kubectl --kubeconfig="$E2E_TMP/empty.kubeconfig" --server="$TKM_APISERVER" --certificate-authority="$TKM_CLUSTER_DIR/pki/ca.crt" --token="$(cat "$tokfile")" "$@"; }
who=$(as_agent auth whoami -o json)
assert_eq "system:serviceaccount:tkm-system:tkm-agent" "$(jq -r .status.userInfo.username <<<"$who")" "the token authenticates as tkm-agent"
assert_eq "$TKM_NODE_NAME" "$(jq -r '.status.userInfo.extra["authentication.kubernetes.io/node-name"][0]' <<<"$who")" "the token carries the node name"
assert_eq "$NODEPOD" "$(jq -r '.status.userInfo.extra["authentication.kubernetes.io/pod-name"][0]' <<<"$who")" "and the pod name"
nsc() { printf '{"apiVersion":"tkm.io/v1alpha1","kind":"TritonKernelCacheNodeStatusCluster","metadata":{"name":"%s"}}' "$1"; }
agent_apply() { nsc "$1" | as_agent apply --server-side --field-manager=tkm-agent -f - "${@:2}"; } # NAME [FLAGS]
other_denied() { ! agent_apply e2e-other-node --dry-run=server; }
e2e_on_exit "kubectl delete tkcnsc $TKM_NODE_NAME e2e-other-node --ignore-not-found --wait=false >/dev/null 2>&1"
wait_for 30 "the node-status policy is in force" other_denied
expect_ok "the agent's token writes its own node's status object" agent_apply "$TKM_NODE_NAME"
expect_fail "the agent's token writes another node's" agent_apply e2e-other-node
assert_contains "$OUT" "tkm-agent on node $TKM_NODE_NAME may write only the node status objects named $TKM_NODE_NAME, not e2e-other-node" "denied by the policy, saying why"
assert_eq "no" "$(as_agent auth can-i list secrets -A 2>/dev/null || true)" "the agent's token may not list secrets"

step "tkm-csi registered itself with kubelet"
wait_for 60 "CSINode lists csi.tkm.io" is default "csinode/$TKM_NODE_NAME" '{.spec.drivers[*].name}' csi.tkm.io
assert_eq "$TKM_NODE_NAME" "$(kubectl get csinode "$TKM_NODE_NAME" -o jsonpath='{.spec.drivers[0].nodeID}')" "nodeID is the node name"
assert_eq "false true Ephemeral None" "$(kubectl get csidriver csi.tkm.io -o jsonpath='{.spec.attachRequired} {.spec.podInfoOnMount} {.spec.volumeLifecycleModes[*]} {.spec.fsGroupPolicy}')" "CSIDriver spec"
assert_eq "true 0" "$(kubectl -n tkm-system get pod "$NODEPOD" -o jsonpath='{.status.containerStatuses[?(@.name=="tkm-csi")].ready} {.status.containerStatuses[?(@.name=="tkm-csi")].restartCount}')" "tkm-csi ready (its exec probe passes), never restarted"
expect_ok "tkm-csi probe from the host, on the driver's socket" "$TKM_BUILD_DIR/csi/tkm-csi" probe --endpoint "$KROOT/plugins/csi.tkm.io/csi.sock"
assert_contains "$OUT" "csi.tkm.io " "it answers as csi.tkm.io"
expect_fail "tkm-csi probe on a socket nobody serves" "$TKM_BUILD_DIR/csi/tkm-csi" probe --endpoint "$E2E_TMP/none.sock" --timeout 2s
assert_contains "$OUT" "cannot connect to unix:$E2E_TMP/none.sock" "and says why"
logs=$(kubectl -n tkm-system logs "$NODEPOD" -c tkm-csi)
assert_contains "$logs" "kubelet registered driver csi.tkm.io" "tkm-csi logged kubelet's registration"

# ---- workload pods ------------------------------------------------------------
kubectl create namespace "$NSA" >/dev/null
kubectl create namespace "$NSB" >/dev/null
MP=/home/ml/.triton/cache
# wpod NS NAME CACHE: a workload pod with a csi.tkm.io inline volume at $MP
wpod() {
  cat <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $2, namespace: $1}
spec:
  hostNetwork: true
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: $TKM_BUSYBOX_IMAGE
    command: [sleep, "3600"]
    env: [{name: TRITON_CACHE_DIR, value: $MP}]
    volumeMounts: [{name: triton-cache, mountPath: $MP}]
  volumes:
  - name: triton-cache
    csi: {driver: csi.tkm.io, volumeAttributes: {cacheName: $3, mountPath: $MP}}
EOF
}
target() { echo "$KROOT/pods/$(kubectl -n "$1" get pod "$2" -o jsonpath='{.metadata.uid}')/volumes/kubernetes.io~csi/triton-cache/mount"; }
tkm_mounts() { awk '$0 ~ / - overlay tkm-csi:/ {print $5}' /proc/self/mountinfo; }
exec_in() { kubectl -n "$1" exec "$2" -- sh -c "$3"; }

step "a workload pod mounts the cache"
t0=$(now)
expect_ok "apply w1" "$hack/node.sh" apply - < <(wpod $NSA w1 demo)
wait_for 120 "w1 Running" is $NSA pod/w1 '{.status.phase}' Running
echo "timing: pod with a tkm volume created -> Running: $(since "$t0") s (the stand-in agent answers after 1.5 s)"
T1=$(target $NSA w1)
assert_eq "$T1" "$(tkm_mounts | grep -F "$T1")" "an overlay at w1's volume target, visible on the host (Bidirectional)"
opts1=$(findmnt -n -o OPTIONS "$T1")
assert_contains "$opts1" ":$SD," "the store is its lower layer"
assert_eq "$(sha256sum <"$SD/$a_kernel")" "$(exec_in $NSA w1 "cat $MP/$a_kernel" | sha256sum)" "w1 sees the store's kernel binary at $MP"
assert_contains "$(exec_in $NSA w1 "cat $MP/$grp")" "\"$MP/" "w1's group files name its mountPath"
assert_not_contains "$(cat "$SD/$grp")" "\"$MP/" "the store's group file is untouched"
expect_ok "w1 writes a new kernel" exec_in $NSA w1 "mkdir -p $MP/NEWKERNEL && echo compiled-in-w1 > $MP/NEWKERNEL/k.cubin && cat $MP/NEWKERNEL/k.cubin"
upper=$(find "$CACHES/$NSA/w1" -path '*/upper/NEWKERNEL/k.cubin' 2>/dev/null | head -1)
[[ -n $upper ]] || fail "the new kernel is not in w1's scratch layer under $CACHES/$NSA/w1"
assert_eq "compiled-in-w1" "$(cat "$upper")" "it lands in w1's scratch layer ($upper)"
[[ ! -e $SD/NEWKERNEL ]] || fail "the new kernel reached the store"
assert_eq "$sum0" "$(store_sum)" "the store is unchanged"

step "a second pod shares the store copy"
expect_ok "apply w2" "$hack/node.sh" apply - < <(wpod $NSA w2 demo)
wait_for 120 "w2 Running" is $NSA pod/w2 '{.status.phase}' Running
T2=$(target $NSA w2)
assert_contains "$(findmnt -n -o OPTIONS "$T2")" ":$SD," "w2's lower layer is the same store copy"
assert_eq "$(sha256sum <"$SD/$a_kernel")" "$(exec_in $NSA w2 "cat $MP/$a_kernel" | sha256sum)" "w2 sees the kernel binary"
expect_fail "w2 does not see w1's new kernel" exec_in $NSA w2 "cat $MP/NEWKERNEL/k.cubin"
assert_eq "1" "$(find "$STORE" -maxdepth 1 -mindepth 1 | wc -l)" "one copy in the store"

step "a pod naming a cache not declared for it: PermissionDenied in kubectl describe pod"
expect_ok "apply denied" "$hack/node.sh" apply - < <(wpod $NSB denied not-declared)
has_reason() { kubectl -n $NSB describe pod denied | grep -q "code = PermissionDenied"; }
wait_for 90 "describe pod shows PermissionDenied" has_reason
d=$(kubectl -n $NSB describe pod denied)
assert_contains "$d" "MountVolume.SetUp failed for volume \"triton-cache\"" "kubelet's mount failed"
# kubelet posts the container's waiting state on its own status sync, which may
# come after the mount's event: wait for it, then check it holds
waiting_reason() { kubectl -n $NSB get pod denied -o jsonpath='{.status.containerStatuses[0].state.waiting.reason}'; }
creating() { [[ $(waiting_reason) == ContainerCreating ]]; }
wait_for 60 "the pod is ContainerCreating" creating
assert_contains "$(kubectl -n $NSB describe pod denied)" "ContainerCreating" "describe pod shows it ContainerCreating"
assert_eq "Pending" "$(kubectl -n $NSB get pod denied -o jsonpath='{.status.phase}')" "phase Pending"
assert_eq "" "$(tkm_mounts | grep -F "$(kubectl -n $NSB get pod denied -o jsonpath='{.metadata.uid}')" || true)" "no mount for it"
[[ ! -e $CACHES/$NSB/denied ]] || fail "a layer dir was left for the denied pod: $(ls -R "$CACHES/$NSB/denied")"
pass "no layer dir for it"

step "deleting the agent pod mid-publish converges"
t0=$(now)
expect_ok "apply w3" "$hack/node.sh" apply - < <(wpod $NSA w3 demo)
# the stand-in answers Materialize after 1.5 s: delete the node pod while kubelet waits
mat_w3() { kubectl -n tkm-system logs "$NODEPOD" -c tkm-agent 2>/dev/null | grep -q "Materialize .* $NSA/w3 "; }
wait_for 60 "kubelet's publish of w3 reached the agent" mat_w3
kubectl -n tkm-system delete pod "$NODEPOD" --wait=false >/dev/null
pass "deleted $NODEPOD mid-publish"
new_node_pod() { n=$(kubectl -n tkm-system get pods -l app.kubernetes.io/name=tkm-node -o jsonpath='{.items[?(@.status.phase=="Running")].metadata.name}'); [[ -n $n && $n != "$NODEPOD" ]]; }
wait_for 120 "a new tkm-node pod Running" new_node_pod
wait_for 120 "tkm-node Ready again" is tkm-system ds/tkm-node '{.status.numberReady}' 1
wait_for 180 "w3 Running" is $NSA pod/w3 '{.status.phase}' Running
echo "timing: agent pod deleted mid-publish -> w3 Running: $(since "$t0") s"
T3=$(target $NSA w3)
assert_eq "$T3" "$(tkm_mounts | grep -F "$T3")" "exactly one overlay at w3's target"
assert_eq "$(sha256sum <"$SD/$a_kernel")" "$(exec_in $NSA w3 "cat $MP/$a_kernel" | sha256sum)" "w3 sees the kernel binary"
assert_eq "compiled-in-w1" "$(exec_in $NSA w1 "cat $MP/NEWKERNEL/k.cubin")" "w1's mount survived the driver's restart"
assert_eq "3" "$(find "$CACHES/$NSA" -mindepth 2 -maxdepth 2 -type d | wc -l)" "one volume dir per running pod (w1, w2, w3)"

step "restarting the node's kubelet converges"
t0=$(now)
kpid=$(cat "$TKM_NODE_DIR/kubelet.pid")
kill -TERM "$kpid"
wait_for 30 "kubelet $kpid exited" bash -c "! kill -0 $kpid"
expect_ok "node.sh up (restarts kubelet only)" "$hack/node.sh" up
[[ $(cat "$TKM_NODE_DIR/kubelet.pid") != "$kpid" ]] || fail "kubelet was not restarted"
wait_for 60 "CSINode still lists csi.tkm.io" is default "csinode/$TKM_NODE_NAME" '{.spec.drivers[*].name}' csi.tkm.io
expect_ok "apply w4 after the restart" "$hack/node.sh" apply - < <(wpod $NSA w4 demo)
wait_for 120 "w4 Running" is $NSA pod/w4 '{.status.phase}' Running
echo "timing: kubelet restart -> new tkm pod Running: $(since "$t0") s"
for p in w1 w2 w3 w4; do
  assert_eq "Running" "$(kubectl -n $NSA get pod "$p" -o jsonpath='{.status.phase}')" "$p Running after the restart"
done
assert_eq "$(sha256sum <"$SD/$a_kernel")" "$(exec_in $NSA w4 "cat $MP/$a_kernel" | sha256sum)" "w4 sees the kernel binary"
assert_eq "4" "$(tkm_mounts | grep -c -F "$KROOT/pods/")" "4 overlays: one per running pod, none stacked"

step "deleting the pods leaves no mount and no directory"
t0=$(now)
kubectl -n $NSA delete pod w1 w2 w3 w4 --wait=false >/dev/null
kubectl -n $NSB delete pod denied --wait=false >/dev/null
wait_for 120 "pods gone" none kubectl get pods -n $NSA -o name
wait_for 60 "denied gone" none kubectl get pods -n $NSB -o name
wait_for 60 "no tkm-csi overlay left" none tkm_mounts
echo "timing: delete -> no mount: $(since "$t0") s"
assert_eq "" "$(find "$CACHES" -mindepth 1 -not -name .release 2>/dev/null | grep -v -e "^$CACHES/$NSA\$" -e "^$CACHES/$NSB\$" || true)" "no layer dir left under $CACHES"
assert_eq "" "$(ls "$CACHES/.release" 2>/dev/null || true)" "no release pending"
assert_eq "$sum0" "$(store_sum)" "the store is unchanged"
echo "timing: node_tkm total: $(since "$t_all") s"
e2e_done
