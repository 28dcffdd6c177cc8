#!/usr/bin/env bash
# helm.chart (ctest, no cluster): charts/tkm with Helm 3 and Helm 4.
#   - helm lint --strict, with the defaults and with every feature on;
#   - the chart and the kustomize base cannot drift: helm template with the default values renders
#     the objects of `kubectl kustomize manifests/base` (but the Namespace: helm install -n NS
#     --create-namespace makes it), with monitoring on those of manifests/monitoring too, and with
#     ci/local-values.yaml (+ ci/fixture-gpu-values.yaml) those of manifests/overlays/local
#     (fixture-gpu). Normalised: Helm's four labels and the CRDs' resource-policy annotation
#     removed, each container's env sorted by name, the objects sorted by kind/namespace/name;
#     then compared as JSON (a changed copy of the base is caught);
#   - values do what values.yaml says (images by digest, pull secrets, host paths, GPU root, runtime
#     class, maxUnavailable, pod annotations, extra args,
#     another namespace everywhere, controller without leader election, CRDs kept or left out);
#   - bad values fail naming the key: an unknown key (a typo) at the top and deep down, a wrong
#     type, a value outside its enum;
#   - NOTES.txt names the next three commands.
# helm (v3), helm4 and kubectl are built from Go modules by hack/testbin/build.sh (once, cached).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
chart=$root/charts/tkm
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tkm-helm-chart-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
checks=0
fail() { echo "FAIL [helm.chart]: $*" >&2; exit 1; }
pass() { checks=$((checks + 1)); echo "ok: $*"; }

command -v jq >/dev/null || fail "jq is needed (hack/deps.sh installs it)"
kubectl=$("$root/hack/testbin/build.sh" --path kubectl) || fail "cannot build kubectl"
[[ -x $kubectl ]] || fail "no kubectl at $kubectl"
declare -A helm
for h in helm helm4; do
  helm[$h]=$("$root/hack/testbin/build.sh" --path "$h") || fail "cannot build $h"
  [[ -x ${helm[$h]} ]] || fail "no $h at ${helm[$h]}"
done
kube_version=$("$root/hack/testbin/build.sh" --version kubectl)

# Helm reports the links under charts/tkm/files (to manifests/ and crds/) on stderr each time.
quiet() { grep -v 'found symbolic link in path' || true; }
# render HELM OUT [ARGS...]: helm template into OUT; its errors on stdout of the caller.
render() {
  local h=$1 out=$2
  shift 2
  "${helm[$h]}" template tkm "$chart" --namespace tkm-system --kube-version "$kube_version" "$@" \
    >"$out" 2>"$out.err"
}
# json FILE: the YAML stream as one sorted JSON list (kubectl's own YAML reader, no server).
json() {
  env -u KUBECONFIG "$kubectl" label --local -f "$1" -o json tkm.io/normalised=1 | jq -s '.'
}
# normalise: what Helm adds and what kustomize orders differently, taken out.
normalise() {
  jq -S '
    def strip_labels: del(.["helm.sh/chart", "app.kubernetes.io/managed-by",
      "app.kubernetes.io/instance", "app.kubernetes.io/version", "tkm.io/normalised"]);
    [ .[] | select(.kind != "Namespace")
      | .metadata.labels |= (strip_labels | if . == {} then null else . end)
      | if .metadata.labels == null then del(.metadata.labels) else . end
      | if .metadata.annotations then
          .metadata.annotations |= del(.["helm.sh/resource-policy"])
          | if .metadata.annotations == {} then del(.metadata.annotations) else . end
        else . end
      | if .spec.template.spec.containers then
          .spec.template.spec.containers |= map(if .env then .env |= sort_by(.name) else . end)
        else . end ]
    | sort_by(.kind, (.metadata.namespace // ""), .metadata.name)'
}
# same WHAT CHART_YAML KUSTOMIZE_YAML: the two render the same objects, normalised.
same() {
  json "$2" | normalise >"$tmp/a.json"
  json "$3" | normalise >"$tmp/b.json"
  [[ $(jq length "$tmp/a.json") -gt 0 ]] || fail "$1: the chart rendered no object"
  if ! diff -u "$tmp/b.json" "$tmp/a.json" >"$tmp/diff"; then
    head -60 "$tmp/diff" >&2
    fail "$1: the chart and kustomize differ (- kustomize, + chart; above)"
  fi
}
# q FILE JQ: a jq query on the rendered objects of FILE.
q() { json "$1" | jq -r "$2"; }
# bad HELM WHAT WANT ARGS...: helm template must fail, and its message contain WANT.
bad() {
  local h=$1 what=$2 want=$3
  shift 3
  if render "$h" "$tmp/bad.yaml" "$@"; then fail "$h: $what: rendered"; fi
  local msg
  msg=$(quiet <"$tmp/bad.yaml.err")
  [[ $msg == *"$want"* ]] || fail "$h: $what: the error does not name '$want': $msg"
  pass "$h: $what fails: $(echo "$msg" | grep -m1 -F "$want" | cut -c1-160)"
}

"$kubectl" kustomize "$root/manifests/base" >"$tmp/k-base.yaml"
{ cat "$tmp/k-base.yaml"; echo ---; "$kubectl" kustomize "$root/manifests/monitoring"; } >"$tmp/k-mon.yaml"
"$kubectl" kustomize "$root/manifests/overlays/local" >"$tmp/k-local.yaml"
"$kubectl" kustomize "$root/manifests/overlays/fixture-gpu" >"$tmp/k-gpu.yaml"
all_on=(--set monitoring.podMonitors.enabled=true --set monitoring.prometheusRule.enabled=true
  --set monitoring.dashboard.enabled=true)

for h in helm helm4; do
  echo "--- $h $("${helm[$h]}" version --short 2>/dev/null)"
  out=$("${helm[$h]}" lint --strict "$chart" 2>&1) || fail "$h lint --strict: $out"
  out=$("${helm[$h]}" lint --strict "$chart" "${all_on[@]}" -f "$chart/ci/local-values.yaml" \
    -f "$chart/ci/fixture-gpu-values.yaml" 2>&1) || fail "$h lint --strict (every feature on): $out"
  pass "$h lint --strict: the defaults and every feature on"

  render "$h" "$tmp/c-base.yaml" || fail "$h template: $(quiet <"$tmp/c-base.yaml.err")"
  same "$h defaults vs manifests/base" "$tmp/c-base.yaml" "$tmp/k-base.yaml"
  [[ $(q "$tmp/c-base.yaml" '[.[] | select(.kind == "Namespace")] | length') == 0 ]] ||
    fail "$h: the chart renders a Namespace (helm install -n NS --create-namespace makes it)"
  pass "$h: default values render manifests/base's $(jq length "$tmp/b.json") objects (no Namespace)"
  render "$h" "$tmp/c-mon.yaml" "${all_on[@]}" || fail "$h template (monitoring): $(quiet <"$tmp/c-mon.yaml.err")"
  same "$h monitoring on vs base + manifests/monitoring" "$tmp/c-mon.yaml" "$tmp/k-mon.yaml"
  pass "$h: monitoring on renders base + manifests/monitoring ($(jq length "$tmp/b.json") objects)"
  render "$h" "$tmp/c-local.yaml" -f "$chart/ci/local-values.yaml" || fail "$h template (local)"
  same "$h ci/local-values.yaml vs overlays/local" "$tmp/c-local.yaml" "$tmp/k-local.yaml"
  render "$h" "$tmp/c-gpu.yaml" -f "$chart/ci/local-values.yaml" -f "$chart/ci/fixture-gpu-values.yaml" ||
    fail "$h template (fixture-gpu)"
  same "$h ci/fixture-gpu-values.yaml vs overlays/fixture-gpu" "$tmp/c-gpu.yaml" "$tmp/k-gpu.yaml"
  pass "$h: ci/local-values.yaml and ci/fixture-gpu-values.yaml render overlays/local and fixture-gpu"
done

echo "--- the drift check catches a difference"
sed 's/periodSeconds: 10/periodSeconds: 11/' "$tmp/k-base.yaml" >"$tmp/k-changed.yaml"
cmp -s "$tmp/k-changed.yaml" "$tmp/k-base.yaml" && fail "the negative check changed nothing"
if (same "changed" "$tmp/c-base.yaml" "$tmp/k-changed.yaml") 2>"$tmp/neg"; then
  fail "a kustomize output with a changed probe period compared equal"
fi
grep -q 'periodSeconds.*11' "$tmp/neg" || fail "the diff does not show the changed field: $(cat "$tmp/neg")"
pass "a base that differs from the chart is refused (diff shown)"
# The chart reads the base itself: a changed base changes the chart the same way.
cp -rL "$chart" "$tmp/chart-copy"
sed -i 's/terminationGracePeriodSeconds: 30/terminationGracePeriodSeconds: 31/' \
  "$tmp/chart-copy/files/base/daemonset-node.yaml"
"${helm[helm]}" template tkm "$tmp/chart-copy" -n tkm-system --kube-version "$kube_version" >"$tmp/c-copy.yaml"
[[ $(q "$tmp/c-copy.yaml" '.[] | select(.kind == "DaemonSet") | .spec.template.spec.terminationGracePeriodSeconds') == 31 ]] ||
  fail "the chart did not follow a change of its base file"
pass "the chart renders the base's file as it is (a changed grace period follows)"

echo "--- values"
for h in helm helm4; do
  d=sha256:$(printf '%064d' 7)
  render "$h" "$tmp/v.yaml" -n gpu-ops --set images.agent.digest="$d" --set images.csi.tag=1.2.3 \
    --set images.controller.repository=registry.example.com/tkm/tkm-controller \
    --set images.pullPolicy=Always --set 'images.pullSecrets[0].name=regcred' \
    --set node.hostPaths.kubeletDir=/var/lib/k0s/kubelet --set node.hostPaths.store=/data/tkm/store \
    --set node.gpu.root=/run/nvidia/driver --set node.gpu.nvmlLib=/run/nvidia/driver/usr/lib64/libnvidia-ml.so.1 \
    --set-string node.nodeSelector.gpu=true --set controller.replicas=1 --set controller.leaderElection=false \
    --set controller.nodeLabels=false --set config.prefetch=true --set config.whenIncompatible=Fail \
    --set config.extra.mirrors=x --set-file trustedKeys.keys.cosign\\.pub="$root/tests/helm/chart.sh" \
    --set crds.keep=false --set admissionPolicy.validationActions='{Warn,Audit}' \
    --set node.runtimeClassName=nvidia --set node.maxUnavailable=10% --set controller.podAnnotations.a=b \
    --set 'node.agent.extraArgs={--store-budget,50Gi}' ||
    fail "$h template with values: $(quiet <"$tmp/v.yaml.err")"
  ds='(.[] | select(.kind == "DaemonSet") | .spec.template.spec)'
  ct='(.[] | select(.kind == "Deployment") | .spec.template.spec.containers[0])'
  [[ $(q "$tmp/v.yaml" "$ds.containers[0].image") == "ghcr.io/tkm-project/tkm-agent@$d" ]] || fail "$h: agent image by digest"
  [[ $(q "$tmp/v.yaml" "$ds.containers[1].image") == "ghcr.io/tkm-project/tkm-csi:1.2.3" ]] || fail "$h: csi image tag"
  [[ $(q "$tmp/v.yaml" "$ct.image") == "registry.example.com/tkm/tkm-controller:0.1.0" ]] || fail "$h: controller repository"
  [[ $(q "$tmp/v.yaml" "[$ds.containers[].imagePullPolicy, $ds.imagePullSecrets[0].name] | join(\",\")") == Always,Always,regcred ]] ||
    fail "$h: pull policy and secrets"
  v=$(q "$tmp/v.yaml" "[$ds | .. | strings] | join(\" \")")
  [[ $v == *"--kubelet-dir=/var/lib/k0s/kubelet"* && $v == *"/var/lib/k0s/kubelet/plugins/csi.tkm.io/csi.sock"* &&
    $v == *"/data/tkm/store"* && $v != *"/var/lib/kubelet"* && $v != *"/var/lib/tkm/store"* ]] ||
    fail "$h: host paths not replaced everywhere in the DaemonSet: $v"
  [[ $(q "$tmp/v.yaml" "$ds | [(.containers[0].args | join(\" \")), (.volumes[] | select(.name == \"gpu-root\") | .hostPath.path), .nodeSelector.gpu] | join(\"|\")") == \
    *"--nvml-lib /run/nvidia/driver/usr/lib64/libnvidia-ml.so.1 --store-budget 50Gi|/run/nvidia/driver|true" ]] || fail "$h: GPU root and nodeSelector"
  [[ $(q "$tmp/v.yaml" "[$ds.runtimeClassName, (.[] | select(.kind == \"DaemonSet\") | .spec.updateStrategy.rollingUpdate.maxUnavailable), (.[] | select(.kind == \"Deployment\") | .spec.template.metadata.annotations.a), ($ds.containers[0].args[-2:] | join(\" \"))] | join(\",\")") == \
    "nvidia,10%,b,--store-budget 50Gi" ]] || fail "$h: runtimeClassName, maxUnavailable, podAnnotations, agent extraArgs"
  a=$(q "$tmp/v.yaml" "$ct.args | join(\" \")")
  [[ $a != *leader-elect* && $a == *"--node-labels=false"* ]] || fail "$h: controller args: $a"
  # the node's registry mirrors: the flags, and the host's directories mounted read-only
  render "$h" "$tmp/m.yaml" --set node.mirrors.hostsDir=/etc/containerd/certs.d \
    --set node.mirrors.registriesConf=/etc/containers/registries.conf || fail "$h template with mirrors: $(quiet <"$tmp/m.yaml.err")"
  m=$(q "$tmp/m.yaml" "$ds | [(.containers[0].args | join(\" \")), ([.containers[0].volumeMounts[] | select(.readOnly) | .mountPath] | join(\",\")), ([.volumes[] | select(.name | test(\"mirrors|registries\")) | .hostPath.path] | join(\",\"))] | join(\"|\")")
  [[ $m == *"--mirrors-hosts-dir /etc/containerd/certs.d --registries-conf /etc/containers/registries.conf|"*"/etc/containerd/certs.d,/etc/containers|/etc/containerd/certs.d,/etc/containers" ]] ||
    fail "$h: node.mirrors: $m"
  bad "$h" "a relative mirrors directory" hostsDir --set node.mirrors.hostsDir=etc/containerd/certs.d
  v=$(jq -c '[.[] | tostring | select(test("tkm-system"))] | length' <(json "$tmp/v.yaml"))
  [[ $v == 0 ]] || fail "$h: -n gpu-ops: $v objects still name tkm-system"
  [[ $(q "$tmp/v.yaml" '.[] | select(.kind == "ValidatingAdmissionPolicy") | .spec.matchConditions[0].expression') == \
    *"'system:serviceaccount:gpu-ops:tkm-agent'"* ]] || fail "$h: the admission policy names another namespace's agent"
  [[ $(q "$tmp/v.yaml" '.[] | select(.kind == "ValidatingAdmissionPolicyBinding") | .spec.validationActions | join(",")') == Warn,Audit ]] ||
    fail "$h: validationActions"
  [[ $(q "$tmp/v.yaml" '.[] | select(.kind == "ConfigMap") | .data | [.prefetch, .whenIncompatible, .mirrors, .signatureMode] | join(",")') == true,Fail,x,Enforce ]] ||
    fail "$h: tkm-config data"
  [[ $(q "$tmp/v.yaml" '.[] | select(.kind == "Secret") | .data["cosign.pub"] | @base64d') == "$(cat "$root/tests/helm/chart.sh")" ]] ||
    fail "$h: trustedKeys"
  [[ $(q "$tmp/v.yaml" '[.[] | select(.kind == "CustomResourceDefinition")] | "\(length) \(map(.metadata.annotations // {} | has("helm.sh/resource-policy")) | any)"') == "4 false" ]] ||
    fail "$h: crds.keep=false"
  [[ $(q "$tmp/c-base.yaml" '[.[] | select(.kind == "CustomResourceDefinition") | .metadata.annotations["helm.sh/resource-policy"]] | join(",")') == keep,keep,keep,keep ]] ||
    fail "$h: the CRDs are not kept by default"
  render "$h" "$tmp/v2.yaml" --set crds.install=false --set admissionPolicy.enabled=false --set trustedKeys.create=false ||
    fail "$h: template with parts off"
  [[ $(q "$tmp/v2.yaml" '[.[].kind | select(test("CustomResourceDefinition|ValidatingAdmissionPolicy|Secret"))] | length') == 0 ]] ||
    fail "$h: crds.install, admissionPolicy.enabled, trustedKeys.create false still render them"
  pass "$h: images, pull policy/secrets, host paths, GPU root, namespace gpu-ops, controller flags, tkm-config, keys, CRDs on/off/kept"
done

echo "--- bad values fail, naming the key"
for h in helm helm4; do
  bad "$h" "a typo'd top-level key (controler)" controler --set controler.replicas=1
  bad "$h" "a typo'd key deep down (node.hostPaths.kubeletdir)" kubeletdir --set node.hostPaths.kubeletdir=/x
  bad "$h" "a typo'd key in a values file (images.agent.tags)" tags -f <(printf 'images:\n  agent:\n    tags: "1"\n')
  bad "$h" "a string for an integer (controller.replicas)" replicas --set-string controller.replicas=two
  bad "$h" "a string for a boolean (config.prefetch)" prefetch --set-string config.prefetch=yes
  bad "$h" "a value outside the enum (config.signatureMode)" signatureMode --set config.signatureMode=enforce
  bad "$h" "a digest that is not sha256:<64 hex>" digest --set images.agent.digest=sha256:abc
  bad "$h" "a relative host path" store --set node.hostPaths.store=var/tkm
  bad "$h" "two replicas without leader election" leaderElection --set controller.leaderElection=false
done

echo "--- NOTES.txt"
# Rendered as Helm renders it at install, without a cluster: Helm 3's install --dry-run=client
# still asks the apiserver for its version, so a copy of the chart renders NOTES.txt with tpl
# into a ConfigMap (lookup answers nothing here, as in helm template).
cp -rL "$chart" "$tmp/notes-chart"
cp "$chart/templates/NOTES.txt" "$tmp/notes-chart/files/notes.txt"
printf '%s\n' 'apiVersion: v1' 'kind: ConfigMap' 'metadata: {name: notes}' \
  'data: {notes: {{ tpl (.Files.Get "files/notes.txt") . | quote }}}' >"$tmp/notes-chart/templates/notes-test.yaml"
# notes HELM ARGS...: the NOTES text.
notes() {
  local h=$1
  shift
  "${helm[$h]}" template tkm "$tmp/notes-chart" -n tkm-system --kube-version "$kube_version" \
    --show-only templates/notes-test.yaml "$@" 2>/dev/null >"$tmp/notes.yaml" || fail "$h: NOTES.txt does not render"
  q "$tmp/notes.yaml" '.[0].data.notes'
}
for h in helm helm4; do
  n=$(notes "$h")
  for i in 1 2 3; do
    grep -qE "^$i\. " <<<"$n" || fail "$h: NOTES has no step $i: $n"
  done
  for c in 'rollout status ds/tkm-node' 'set-file config.signaturePublicKeys=cosign.pub' 'kubectl tkm status -A'; do
    grep -qF "$c" <<<"$n" || fail "$h: NOTES lacks '$c': $n"
  done
  n=$(notes "$h" --set config.signatureMode=Audit)
  grep -q 'kubectl get tkm -A' <<<"$n" || fail "$h: NOTES with Audit lacks step 2's kubectl get tkm -A: $n"
  if grep -q 'set-file' <<<"$n"; then fail "$h: NOTES asks for a key when none is needed: $n"; fi
  pass "$h: NOTES.txt names the next three commands (the key step only when Enforce has no key)"
done
echo "PASS [helm.chart]: $checks checks"
