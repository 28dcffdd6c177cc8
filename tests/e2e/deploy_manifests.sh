#!/usr/bin/env bash
# deploy_manifests: manifests/base and the overlays (local, fixture-gpu) on the real
# apiserver. Each renders with kustomize and passes a server-side dry run; the
# objects as the server would store them (defaults applied) follow the deploy
# rules: every container has requests and a memory limit, liveness and readiness
# probes, a read-only root fs and a non-root security context, except where the
# manifests say why (tkm-agent: uid 0 with no capabilities; tkm-csi: privileged); only tkm-csi is privileged and only it has Bidirectional propagation;
# hostPaths only where needed; the CSIDriver as tkm-csi needs it; 2 leader-elected
# controller replicas in the base, 1 on the local node; the local overlays keep the
# loopback rule (hack/node.sh check) and the base does not pretend to. The checker
# is shown to catch each kind of breach. Then the base is really applied, without
# its two workloads (they run on the test node from overlays/local: node_tkm).
source "$(dirname "$0")/lib.sh"
M=$TKM_SOURCE_DIR/manifests
T=$E2E_TMP

step "render"
for o in base overlays/local overlays/fixture-gpu; do
  expect_ok "kustomize $o" kubectl kustomize "$M/$o"
  echo "$OUT" >"$T/${o##*/}.yaml"
done
expect_ok "hack/deploy.sh --render (local, the running registry and apiserver port)" "$TKM_SOURCE_DIR/hack/deploy.sh" --render
echo "$OUT" >"$T/local-filled.yaml"
assert_contains "$OUT" "image: $TKM_REGISTRY/tkm/tkm-csi:dev" "images from the running registry"
assert_contains "$OUT" "value: \"${TKM_APISERVER##*:}\"" "the running apiserver's port"
assert_not_contains "$OUT" "127.0.0.1:5000" "no placeholder registry left"
assert_not_contains "$OUT" "\"6443\"" "no placeholder port left"

expect_fail "deploy.sh: fixture-gpu without a GPU root" "$TKM_SOURCE_DIR/hack/deploy.sh" --overlay fixture-gpu
assert_contains "$OUT" "needs --fixture-gpu-root DIR and --fakenvml LIB" "and says what it needs"
expect_fail "deploy.sh: a GPU root without sys/ proc/ nvml.conf" "$TKM_SOURCE_DIR/hack/deploy.sh" --overlay fixture-gpu --fixture-gpu-root "$T" --fakenvml /dev/null
assert_contains "$OUT" "has no sys/, proc/ and nvml.conf" "and says why"
expect_fail "make images without tkm-csi built" "$TKM_SOURCE_DIR/hack/images/all.sh" "$T/no-build" "$TKM_REGISTRY" e2e
assert_contains "$OUT" "$T/no-build/csi/tkm-csi is missing" "and names the binary"

step "the loopback rule of the test node (hack/node.sh check)"
expect_ok "local overlay, filled in, passes" "$TKM_SOURCE_DIR/hack/node.sh" check "$T/local-filled.yaml"
expect_fail "the base is refused on the test node" "$TKM_SOURCE_DIR/hack/node.sh" check "$T/base.yaml"
assert_contains "$OUT" "DaemonSet/tkm-node: not hostNetwork" "because it is not hostNetwork"

step "server-side dry run"
expect_ok "the namespace" kubectl apply --server-side -f "$M/base/namespace.yaml"
# A dry run merges with the live objects: workloads left by an earlier deployment (other
# ports, other managers) would make it about them. None belong here; see the end.
expect_ok "no workloads left from an earlier deployment" kubectl -n tkm-system delete ds/tkm-node deploy/tkm-controller --ignore-not-found --wait=true
for o in base local fixture-gpu local-filled; do
  # stdout only: kubectl's warnings (stderr) are not part of the JSON
  OUT=$(kubectl apply --server-side --force-conflicts --dry-run=server -f "$T/$o.yaml" -o json 2>"$T/$o.err") ||
    fail "dry run $o: $(cat "$T/$o.err")"
  pass "dry run $o"
  jq -c 'if .kind == "List" then .items[] else . end' <<<"$OUT" >"$T/$o.json"
  [[ $(jq -s length "$T/$o.json") -ge 20 ]] || fail "dry run $o: expected at least 20 objects back, got $(jq -s length "$T/$o.json")"
done

# rules: the breaches of the deploy rules in objects (one JSON object a line), one line each
rules() {
  jq -r -s '
    .[] | select(.kind == "Deployment" or .kind == "DaemonSet") | . as $o | .spec.template.spec as $s
    | "\($o.kind)/\($o.metadata.name)" as $w
    | (if ($s.securityContext.seccompProfile.type // "") != "RuntimeDefault" then "\($w): pod seccompProfile is not RuntimeDefault" else empty end),
      ($s.volumes // [] | .[] | select(.hostPath) | select(
          ($w == "DaemonSet/tkm-node" and (.hostPath.path | IN("/var/lib/kubelet", "/var/run/tkm", "/var/lib/tkm/store", "/var/lib/tkm-fixture-gpu"))) | not)
        | "\($w): hostPath \(.hostPath.path) is not one the node needs"),
      ($s.containers[] | . as $c | "\($w) container \($c.name)" as $n | ($c.securityContext // {}) as $sc
        | (if ($c.resources.requests.cpu // "") == "" or ($c.resources.requests.memory // "") == "" or ($c.resources.limits.memory // "") == ""
           then "\($n): no cpu/memory request or memory limit" else empty end),
          (if ($c.livenessProbe // null) == null or ($c.readinessProbe // null) == null
           then "\($n): no liveness or readiness probe" else empty end),
          (if ($sc.readOnlyRootFilesystem // false) != true then "\($n): root filesystem is writable" else empty end),
          (if ($sc.privileged // false) and $c.name != "tkm-csi" then "\($n): privileged" else empty end),
          (if $c.name == "tkm-csi" then empty
           else
             (if $sc.allowPrivilegeEscalation != false then "\($n): allowPrivilegeEscalation is not false" else empty end),
             (if ($sc.capabilities.drop // []) | index("ALL") | not then "\($n): capabilities not dropped (ALL)" else empty end),
             (if ($sc.capabilities.add // []) | length > 0 then "\($n): adds capabilities \($sc.capabilities.add)" else empty end),
             (if $c.name == "tkm-agent" then
                (if $sc.runAsUser != 0 then "\($n): expected uid 0 (see daemonset-node.yaml)" else empty end)
              elif ((if $sc.runAsNonRoot == null then $s.securityContext.runAsNonRoot else $sc.runAsNonRoot end) != true)
                or (($sc.runAsUser // $s.securityContext.runAsUser // 0) == 0)
              then "\($n): may run as root" else empty end)
           end),
          ($c.volumeMounts // [] | .[] | select(.mountPropagation == "Bidirectional")
            | select($c.name != "tkm-csi" or .mountPath != "/var/lib/kubelet")
            | "\($n): Bidirectional propagation on \(.mountPath)"))' "$@"
}
step "every workload follows the deploy rules (the objects as the server stores them)"
for o in base local fixture-gpu; do
  bad=$(rules "$T/$o.json")
  [[ -z $bad ]] || fail "$o breaks the deploy rules:
$bad"
  pass "$o: resources, probes, security contexts, hostPaths, propagation"
done
assert_eq "tkm-csi" "$(jq -r -s '[.[] | select(.spec.template.spec?) | .spec.template.spec.containers[] | select(.securityContext.privileged == true) | .name] | join(" ")' "$T/base.json")" "only tkm-csi is privileged"
assert_eq "/usr/bin/tkm-csi probe --endpoint=/var/lib/kubelet/plugins/csi.tkm.io/csi.sock" "$(jq -r -s '.[] | select(.kind == "DaemonSet") | .spec.template.spec.containers[] | select(.name == "tkm-csi") | .livenessProbe.exec.command | join(" ")' "$T/base.json")" "tkm-csi: an exec probe (tkm-csi probe) on its CSI socket"

step "the checker catches each breach"
breach() { # WHAT JQ-EDIT EXPECTED-MESSAGE
  jq -c "if .kind == \"DaemonSet\" or .kind == \"Deployment\" then $2 else . end" "$T/base.json" >"$T/bad.json"
  bad=$(rules "$T/bad.json")
  assert_contains "$bad" "$3" "$1"
}
ag='.spec.template.spec.containers[0]'
breach "privileged agent" "if .kind == \"DaemonSet\" then $ag.securityContext.privileged = true else . end" "container tkm-agent: privileged"
breach "no probe" "$ag |= del(.readinessProbe)" "container tkm-agent: no liveness or readiness probe"
breach "no csi probe" "if .kind == \"DaemonSet\" then .spec.template.spec.containers[1] |= del(.livenessProbe) else . end" "container tkm-csi: no liveness or readiness probe"
breach "no memory limit" "$ag.resources.limits = {}" "no cpu/memory request or memory limit"
breach "root controller" "if .kind == \"Deployment\" then .spec.template.spec.securityContext.runAsUser = 0 | .spec.template.spec.securityContext.runAsNonRoot = false | $ag.securityContext.runAsNonRoot = false else . end" "Deployment/tkm-controller container tkm-controller: may run as root"
breach "capabilities kept" "$ag.securityContext.capabilities.drop = []" "capabilities not dropped (ALL)"
breach "writable root fs" "$ag.securityContext.readOnlyRootFilesystem = false" "root filesystem is writable"
breach "extra hostPath" ".spec.template.spec.volumes += [{name: \"etc\", hostPath: {path: \"/etc\"}}]" "hostPath /etc is not one the node needs"
breach "Bidirectional on the agent" "if .kind == \"DaemonSet\" then $ag.volumeMounts[0].mountPropagation = \"Bidirectional\" else . end" "container tkm-agent: Bidirectional propagation"
breach "seccomp unconfined" ".spec.template.spec.securityContext.seccompProfile = {type: \"Unconfined\"}" "pod seccompProfile is not RuntimeDefault"

step "the objects"
q() { jq -r -s "$2" "$T/$1.json"; }
assert_eq "false true Ephemeral None" "$(q base '.[] | select(.kind == "CSIDriver") | "\(.spec.attachRequired) \(.spec.podInfoOnMount) \(.spec.volumeLifecycleModes | join(",")) \(.spec.fsGroupPolicy)"')" "CSIDriver csi.tkm.io"
assert_eq "2 true" "$(q base '.[] | select(.kind == "Deployment") | "\(.spec.replicas) \(.spec.template.spec.containers[0].args | index("--leader-elect") != null)"')" "base: 2 controller replicas, leader election on"
assert_eq "1 true true" "$(q local '.[] | select(.kind == "Deployment") | "\(.spec.replicas) \(.spec.template.spec.hostNetwork) \(.spec.template.spec.containers[0].args | index("--leader-elect") != null)"')" "local: 1 replica, hostNetwork, still leader-elected"
assert_eq "metadata.name metadata.name" "$(q base '[.[] | select(.kind == "Deployment") | .spec.template.spec.containers[0].env[] | select(.name == "POD_NAME") | .valueFrom.fieldRef.fieldPath] | join(" ")') $(q local '[.[] | select(.kind == "Deployment") | .spec.template.spec.containers[0].env[] | select(.name == "POD_NAME") | .valueFrom.fieldRef.fieldPath] | join(" ")')" "the controller's POD_NAME (its Lease identity) from the downward API, base and local"
assert_eq "tkm-controller tkm-agent" "$(q base '[.[] | select(.kind == "Deployment" or .kind == "DaemonSet") | .spec.template.spec.serviceAccountName] | join(" ")')" "the workloads' ServiceAccounts"
assert_eq "true" "$(q local '[.[] | select(.kind == "Deployment" or .kind == "DaemonSet") | .spec.template.spec.hostNetwork] | all')" "local: every workload hostNetwork"
assert_eq "127.0.0.1:28080 127.0.0.1:28081 127.0.0.1:28090 127.0.0.1:28091" "$(q local '[.[] | select(.spec.template.spec?) | .spec.template.spec.containers[].args // [] | join(" ") | scan("bind-address[= ]([^ ]+)") | .[0]] | join(" ")')" "local: listeners on loopback, distinct ports"
assert_eq "--sysfs-root /var/lib/tkm-fixture-gpu/sys --procfs-root /var/lib/tkm-fixture-gpu/proc --nvml-lib /var/lib/tkm-fixture-gpu/libnvidia-ml.so.1 /var/lib/tkm-fixture-gpu/nvml.conf true" \
  "$(q fixture-gpu '.[] | select(.kind == "DaemonSet") | .spec.template.spec.containers[0] | "\(.args[-6:] | join(" ")) \(.env[] | select(.name == "TKM_FAKE_NVML") | .value) \(.volumeMounts[] | select(.name == "gpu-root") | .readOnly)"')" "fixture-gpu: the agent probes the fixture root, read-only"
assert_eq "Enforce" "$(q base '.[] | select(.kind == "ConfigMap" and .metadata.name == "tkm-config") | .data.signatureMode')" "tkm-config: Enforce by default"
assert_eq "Opaque 0" "$(q base '.[] | select(.kind == "Secret" and .metadata.name == "tkm-trusted-keys") | "\(.type) \(.data // {} | length)"')" "tkm-trusted-keys: an empty placeholder"

step "apply the base for real (without its workloads: see e2e_base_no_workloads in lib.sh)"
e2e_base_no_workloads "$T/real"
expect_ok "apply" kubectl apply -k "$T/real" --server-side --force-conflicts
assert_not_contains "$OUT" "deployment.apps" "no Deployment applied"
assert_not_contains "$OUT" "daemonset.apps" "no DaemonSet applied"
for o in csidriver/csi.tkm.io -n\ tkm-system\ configmap/tkm-config -n\ tkm-system\ secret/tkm-trusted-keys -n\ tkm-system\ sa/tkm-agent \
  -n\ tkm-system\ sa/tkm-controller validatingadmissionpolicy/tkm-agent-own-node-only; do
  read -ra obj <<<"$o"
  expect_ok "exists: ${o##* }" kubectl get "${obj[@]}"
done
e2e_done
