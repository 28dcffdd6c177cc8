#!/usr/bin/env bash
# agent_once: `tkm-agent --once -o json|yaml`. With --image (an OCI layout as tkmctl writes
# it, or a registry reference, optionally with --key) no apiserver is needed: it probes,
# judges, prints the node status it would apply and exits 0 when compatible, 1 with the
# reason otherwise. Without --image it reads the caches from the apiserver and writes
# nothing.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/agent.inc"
COSIGN=$("$TKM_SOURCE_DIR/hack/testbin/build.sh" --path cosign)
export COSIGN_PASSWORD='' COSIGN_YES=true
cd "$E2E_TMP"
once() { # ROOT ARGS...: tkm-agent --once on a GPU root, no kubeconfig
  local root=$1
  shift
  local gpu=(--sysfs-root "$ROOTS/$root/sys" --procfs-root "$ROOTS/$root/proc")
  if [[ $root == mi300x ]]; then gpu+=(--no-nvml); else gpu+=(--nvml-lib "$FAKE_NVML"); fi
  env -u KUBECONFIG TKM_FAKE_NVML="$ROOTS/$root/nvml.conf" "$AGENT" --once "${gpu[@]}" "$@"
}
mkdir c && tar -xzf "$TKM_FIXTURES/triton-cache/triton-3.6.0-cuda-sm90.tar.gz" -C c
"$TKMCTL" build c/tcache --output layout >/dev/null 2>&1 || fail "tkmctl build"

step "--image LAYOUT, no apiserver"
expect_ok "H200: compatible, exit 0" once h200 --image layout -o json --node-name gpu-1
assert_eq "TritonKernelCacheNodeStatusCluster gpu-1 nvidia-h200 90" "$(jq -r '.kind + " " + .metadata.name + " " + .status.caches.image.compatibleGPUs[0].gpuType + " " + .status.gpus[0].arch' <<<"$OUT")" "the status it would apply"
expect_fail "A100: exit 1" once a100 --image layout -o json --node-name gpu-2
assert_contains "$OUT" "ArchMismatch: arch mismatch: cache built for sm90, GPU 0 (NVIDIA A100-SXM4-80GB) is sm80" "A100: the reason"
expect_fail "MI300X: exit 1" once mi300x --image layout
assert_contains "$OUT" "BackendMismatch" "MI300X: the reason"
expect_ok "yaml output" once h200 --image layout -o yaml --node-name gpu-1
assert_contains "$OUT" "kind: TritonKernelCacheNodeStatusCluster" "yaml: kind"
assert_contains "$OUT" "gpuType: nvidia-h200" "yaml: fields"
expect_fail "a directory that is no layout" once h200 --image c
assert_contains "$OUT" "InvalidImage" "named InvalidImage"
expect_fail "usage: --image without --once" "$AGENT" --image layout
assert_contains "$OUT" "only with --once" "usage error says why"

step "--image REF with --key"
REPO=$TKM_REGISTRY/e2e-agent-once-$RANDOM/vadd
D=$(agent_image "$REPO" "$TKM_FIXTURES/triton-cache/triton-3.6.0-cuda-sm90.tar.gz")
"$COSIGN" generate-key-pair >/dev/null 2>&1
mkdir other && (cd other && "$COSIGN" generate-key-pair >/dev/null 2>&1)
"$COSIGN" sign --key cosign.key --tlog-upload=false -y "$REPO@$D" >/dev/null 2>&1 || fail "cosign sign"
expect_ok "signed, right key" once h200 --image "$REPO:v1" --key cosign.pub
assert_eq "$D true" "$(jq -r '.status.caches.image.digest + " " + (.status.caches.image.verified|tostring)' <<<"$OUT")" "digest and verified"
expect_fail "wrong key" once h200 --image "$REPO:v1" --key other/cosign.pub
assert_contains "$OUT" "KeyMismatch" "wrong key named"
expect_fail "missing image" once h200 --image "$REPO:nope"
assert_contains "$OUT" "ImageNotFound" "missing image named"

step "--once with an apiserver that does not answer gives up"
sed "s#server: .*#server: https://127.0.0.1:9#" "$KUBECONFIG" >dead.kubeconfig
t0=$SECONDS
expect_fail "no apiserver: exit 1" env TKM_FAKE_NVML="$ROOTS/h200/nvml.conf" "$AGENT" --once \
  --kubeconfig dead.kubeconfig --node-name n --sysfs-root "$ROOTS/h200/sys" --procfs-root "$ROOTS/h200/proc" \
  --nvml-lib "$FAKE_NVML" --once-timeout 3s
assert_contains "$OUT" "no answer after 3.0 s (the apiserver did not answer" "says why"
((SECONDS - t0 < 20)) || fail "took $((SECONDS - t0)) s"
pass "gave up in $((SECONDS - t0)) s"

step "--once against the apiserver writes nothing"
e2e_crds
agent_ns
# the caches here switch signature checks off for themselves: the admin allows it (issue 23)
kubectl -n "$NS" create configmap tkm-config --from-literal=signatureFloor=Disabled >/dev/null
cache_create tkc "$NS" vadd "$REPO:v1" "$D" "  signaturePolicy: {mode: Disabled}"
NODE=e2e-once-$RANDOM
agent_node "$NODE"
TKM_FAKE_NVML=$ROOTS/h200/nvml.conf "$AGENT" --once --kubeconfig "$KUBECONFIG" --node-name "$NODE" \
  --namespace "$NS" --sysfs-root "$ROOTS/h200/sys" --procfs-root "$ROOTS/h200/proc" \
  --nvml-lib "$FAKE_NVML" "${E2E_REACH_FLAGS[@]}" -o json >once.json 2>once.err || true # other tests' caches may fail
assert_eq "List" "$(jq -r .kind once.json)" "a List of node statuses"
assert_eq "nvidia-h200" "$(jq -r --arg ns "$NS" '.items[] | select(.metadata.namespace == $ns) | .status.caches.vadd.compatibleGPUs[0].gpuType' once.json)" "vadd judged compatible"
assert_eq "" "$(kubectl get tkcns "$NODE" -n "$NS" --ignore-not-found -o name)" "nothing written"
e2e_done
