# Shell functions for running tkm on the real node (hack/node.sh), shared by
# hack/demo.sh (`make demo`) and the node tests (tests/e2e/node_scenario.inc,
# node_workloads.inc), so that the demo and the tests take the same path: the
# same cache image, the same signing, the same workload pod. Sourced, not run.
# Each function prints what went wrong on stderr and returns 1; the caller decides
# how to fail (die in hack/, fail in tests/e2e/).

# tkm_workloads_down: deletes tkm's node DaemonSet and controller Deployment in
# tkm-system with foreground cascading and waits until none of their pods is left.
# A plain (background) delete returns before the garbage collector has deleted the
# pods: a host dir removed right after is still in use, and a DaemonSet applied
# again meanwhile finds the old pod Ready. Returns 1 if pods are left after 120 s.
tkm_workloads_down() {
  kubectl -n tkm-system delete ds/tkm-node deploy/tkm-controller --ignore-not-found \
    --cascade=foreground --wait=true --timeout=120s >/dev/null 2>&1 || true
  local _
  for _ in $(seq 240); do
    [[ -z $(kubectl -n tkm-system get pods -l 'app.kubernetes.io/name in (tkm-node,tkm-controller)' -o name 2>/dev/null) ]] &&
      return 0
    sleep 0.5
  done
  echo "tkm-system still has tkm-node or tkm-controller pods 120 s after their workloads were deleted" >&2
  return 1
}

# tkm_workloads_clear: before a deployment, removes tkm's workloads that an earlier
# run left (one killed before its cleanup), saying so: their pod would count as the
# new deployment's, with its own config and store. Returns 1 if they do not go.
tkm_workloads_clear() {
  local left
  left=$(kubectl -n tkm-system get ds/tkm-node deploy/tkm-controller --ignore-not-found -o name 2>/dev/null)
  [[ -n $left ]] || return 0
  echo "note: removing what an earlier run left in tkm-system: ${left//$'\n'/ }"
  tkm_workloads_down
}

# tkm_diagnose NS...: what explains a pod that does not start: every pod on the
# cluster, the events and the describe of the pods not Running in NS..., and the last
# lines of tkm-node's and tkm-controller's containers. For a failed test or demo.
tkm_diagnose() {
  local ns p c
  echo "--- pods"
  kubectl get pods -A -o wide 2>&1
  for ns in "$@"; do
    echo "--- events in $ns"
    kubectl -n "$ns" get events --sort-by=.lastTimestamp 2>&1 | tail -30
    for p in $(kubectl -n "$ns" get pods -o jsonpath='{range .items[?(@.status.phase!="Running")]}{.metadata.name}{" "}{end}' 2>/dev/null); do
      echo "--- describe pod $ns/$p"
      kubectl -n "$ns" describe pod "$p" 2>&1 | tail -25
    done
  done
  for p in $(kubectl -n tkm-system get pods -o name 2>/dev/null); do
    for c in $(kubectl -n tkm-system get "$p" -o jsonpath='{.spec.containers[*].name}' 2>/dev/null); do
      echo "--- logs tkm-system/${p#pod/} $c (last 40 lines)"
      kubectl -n tkm-system logs "$p" -c "$c" --tail=40 2>&1
    done
  done
}

# tkm_cache_image TKMCTL TGZ DIR REF: a cache image of the Triton cache dir that the
# archive TGZ holds (the fixtures: one top-level dir), built with `tkmctl build` into
# the OCI layout DIR/layout and pushed with `tkmctl push` to REF (repo:tag). Prints
# the manifest digest (sha256:...). DIR must be empty or new; it keeps the layout.
tkm_cache_image() {
  local tkmctl=$1 tgz=$2 dir=$3 ref=$4 d
  [[ -f $tgz ]] || { echo "tkm_cache_image: $tgz is missing" >&2; return 1; }
  { mkdir -p "$dir/c" && tar -xzf "$tgz" -C "$dir/c"; } || { echo "tkm_cache_image: cannot extract $tgz into $dir/c" >&2; return 1; }
  "$tkmctl" build "$dir/c/$(ls "$dir/c")" --output "$dir/layout" >"$dir/build.log" 2>&1 ||
    { echo "tkmctl build: $(cat "$dir/build.log")" >&2; return 1; }
  "$tkmctl" push "$dir/layout" "$ref" -o json >"$dir/push.json" 2>"$dir/push.err" ||
    { echo "tkmctl push: $(cat "$dir/push.err")" >&2; return 1; }
  d=$(jq -r .digest "$dir/push.json")
  [[ $d == sha256:* ]] || { echo "no digest from tkmctl push: $d" >&2; return 1; }
  echo "$d"
}

# tkm_cosign_sign COSIGN DIR REPO@DIGEST: makes a key pair DIR/cosign.key and
# DIR/cosign.pub (empty password) unless DIR has one, and signs the image with it,
# offline (no transparency log). cosign v3 writes a Sigstore bundle (as a referrer);
# v2 a classic .sig tag. tkm verifies both (docs/security.md).
tkm_cosign_sign() {
  local cosign=$1 dir=$2 ref=$3 v3=()
  [[ $("$cosign" version 2>&1) == *v3.* ]] && v3=(--use-signing-config=false)
  (
    cd "$dir" || exit 1
    [[ -s cosign.key ]] || COSIGN_PASSWORD='' COSIGN_YES=true "$cosign" generate-key-pair >keygen.log 2>&1 || { cat keygen.log >&2; exit 1; }
    COSIGN_PASSWORD='' COSIGN_YES=true "$cosign" sign --key cosign.key "${v3[@]}" --tlog-upload=false -y "$ref" >sign.log 2>&1 || { cat sign.log >&2; exit 1; }
  ) || { echo "cosign sign $ref failed (above)" >&2; return 1; }
}

# tkm_workload_pod NS NAME CACHE MOUNTPATH IMAGE [SCRIPT]: the YAML of a workload
# pod on the test node with a csi.tkm.io inline volume of cache CACHE at MOUNTPATH
# (and TRITON_CACHE_DIR pointing there). hostNetwork and no ServiceAccount token, as
# hack/node.sh's network rule wants. Without SCRIPT it sleeps for an hour; with it,
# it runs `sh -c SCRIPT` once (restartPolicy Never).
tkm_workload_pod() {
  local ns=$1 name=$2 cache=$3 mp=$4 image=$5 script=${6:-} cmd='[sleep, "3600"]' restart=
  if [[ -n $script ]]; then
    cmd="[sh, -c, $(jq -Rn --arg s "$script" '$s')]"
    restart='  restartPolicy: Never
'
  fi
  cat <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $name, namespace: $ns}
spec:
  hostNetwork: true
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
${restart}  containers:
  - name: main
    image: $image
    command: $cmd
    env: [{name: TRITON_CACHE_DIR, value: $mp}]
    volumeMounts: [{name: triton-cache, mountPath: $mp}]
  volumes:
  - name: triton-cache
    csi: {driver: csi.tkm.io, volumeAttributes: {cacheName: $cache, mountPath: $mp}}
EOF
}

# The local registries (hack/registry.sh on loopback, plain HTTP) that tkm's daemons may
# reach in the demo: the admin's registry reach, tkm-config's registryAllow,
# registryPrivate and registryPlainHTTP (docs/registry-reach.md); manifests/overlays/local
# lists the same. Without them the daemons refuse a loopback registry
# (RegistryNotAllowed) and speak https.
# shellcheck disable=SC2034 # read by hack/demo.sh, which sources this file
TKM_LOCAL_REGISTRIES="127.0.0.1 localhost [::1]"

# tkm_key_overlay DIR BASE PUB: writes DIR/kustomization.yaml, a kustomize overlay of
# the overlay dir BASE (e.g. manifests/overlays/fixture-gpu) that puts the cosign
# public key PUB where the manifests expect it: tkm-config's signaturePublicKeys (the
# cluster default, Enforce with this key, for caches without spec.signaturePolicy)
# and the Secret tkm-trusted-keys (cosign.pub, for TritonKernelCacheClusters). The
# local registries are allowed by BASE (manifests/overlays/local's tkm-config).
# Deploy it with hack/deploy.sh --overlay DIR.
tkm_key_overlay() {
  local dir=$1 base=$2 pub=$3
  [[ -s $base/kustomization.yaml ]] || { echo "tkm_key_overlay: no kustomization.yaml in $base" >&2; return 1; }
  grep -q 'BEGIN PUBLIC KEY' "$pub" 2>/dev/null || { echo "tkm_key_overlay: $pub is not a PEM public key" >&2; return 1; }
  mkdir -p "$dir" && cp "$pub" "$dir/cosign.pub" || return 1
  cat >"$dir/kustomization.yaml" <<EOT
# $(realpath "$base") with a cosign key in tkm-config and tkm-trusted-keys (hack/tkm-scenario.sh)
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- $(realpath --relative-to="$dir" "$base")
configMapGenerator:
- name: tkm-config
  namespace: tkm-system
  behavior: merge
  files: [signaturePublicKeys=cosign.pub]
secretGenerator:
- name: tkm-trusted-keys
  namespace: tkm-system
  behavior: replace
  files: [cosign.pub]
generatorOptions:
  disableNameSuffixHash: true
EOT
}
