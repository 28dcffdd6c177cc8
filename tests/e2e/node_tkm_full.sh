#!/usr/bin/env bash
# node_tkm_full: the whole scenario with tkm-controller and tkm-agent (both in main
# since 2026-11-23 14:15-14:25 UTC).
#
# The issue's scenario with the real daemons, from manifests/overlays/fixture-gpu
# (the H200 GPU root of tests/fixtures/gpu/roots/h200 and the fake NVML) on the real
# node: tkm-controller as a Deployment and tkm-agent + tkm-csi as the tkm-node
# DaemonSet, with their ServiceAccounts' bound tokens; the path of `make demo`
# (hack/demo.sh, through hack/tkm-scenario.sh): a TritonKernelCache without a
# signaturePolicy of the sm90 fixture image, signed with cosign v3, its key in
# tkm-config and tkm-trusted-keys (the demo's overlay), pinned and verified by the controller,
# reported compatible by the agent; a workload pod with a csi.tkm.io inline volume
# sees the cache at its mountPath with group files rewritten for it and writes a
# kernel into its scratch layer only; a second pod shares the store copy; a pod in
# another namespace naming the first namespace's cache stays ContainerCreating with
# PermissionDenied in `kubectl describe pod`; deleting the agent pod mid-publish and
# restarting kubelet both converge; deleting the pods leaves no mount and no dir.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
NODE_WITH_CONTROLLER=1
# shellcheck source=tests/e2e/node_scenario.inc
source "$(dirname "$0")/node_scenario.inc"
