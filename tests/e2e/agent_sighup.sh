#!/usr/bin/env bash
# agent_sighup: GPU facts are probed again on SIGHUP and a change re-judges every cache
# without a registry call: the node's fake NVML turns from an H200 into an A100, the
# cache goes from compatible to ArchMismatch and gpus[] follows.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/agent.inc"
e2e_crds
agent_ns
cd "$E2E_TMP"
REPO=$TKM_REGISTRY/e2e-agent-sighup-$RANDOM/vadd
D=$(agent_image "$REPO" "$TKM_FIXTURES/triton-cache/triton-3.6.0-cuda-sm90.tar.gz")
# the caches here switch signature checks off for themselves: the admin allows it (issue 23)
kubectl -n "$NS" create configmap tkm-config --from-literal=signatureFloor=Disabled >/dev/null
cache_create tkc "$NS" vadd "$REPO:v1" "$D" "  signaturePolicy: {mode: Disabled}"
cp -a "$ROOTS/h200" node
NODE=e2e-sighup-$RANDOM
agent_node "$NODE"
agent_start h200 "$E2E_TMP/node" "$NODE" "$NS"
wait_jp 60 "compatible on the H200" nvidia-h200 tkcns "$NODE" "$NS" '{.status.caches.vadd.compatibleGPUs[0].gpuType}'
sed -i 's/^name=.*/name=NVIDIA A100-SXM4-80GB/; s/^cc=.*/cc=8.0/' node/nvml.conf
kill -HUP "${AGENT_PID[h200]}"
wait_jp 30 "re-judged after SIGHUP: ArchMismatch" ArchMismatch tkcns "$NODE" "$NS" '{.status.caches.vadd.incompatibleGPUs[0].reason}'
assert_eq "nvidia-a100 80" "$(jp tkcns "$NODE" "$NS" '{.status.gpus[0].gpuType} {.status.gpus[0].arch}')" "gpus[] follows the probe"
n=$(grep -c "cache $NS/vadd@" "$E2E_TMP/h200.log" || true)
assert_eq 1 "$n" "judged again without a new verification (one verification in the log)"
agent_stop h200
e2e_done
