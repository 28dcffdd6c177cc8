#!/usr/bin/env bash
# node_tkm_agent: the real tkm-agent (merged) and tkm-csi as the tkm-node DaemonSet
# from manifests/overlays/fixture-gpu on the real node, without tkm-controller: its
# Deployment is left out and the test pins the digest in the cache's status as the
# controller would (as e2e.agent_three does), so a node-side failure is told apart
# from a controller one; e2e.node_tkm_full runs the same with the controller.
#
# The issue's scenario: tkm-agent + tkm-csi as the tkm-node DaemonSet with the
# tkm-agent ServiceAccount's bound token, the H200 GPU root of
# tests/fixtures/gpu/roots/h200 and the fake NVML; a TritonKernelCache of the sm90
# fixture image, signed with cosign, verified and reported compatible by the agent; a workload pod with a csi.tkm.io inline volume
# sees the cache at its mountPath with group files rewritten for it and writes a
# kernel into its scratch layer only; a second pod shares the store copy; a pod in
# another namespace naming the first namespace's cache stays ContainerCreating with
# PermissionDenied in `kubectl describe pod`; deleting the agent pod mid-publish and
# restarting kubelet both converge; deleting the pods leaves no mount and no dir.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
NODE_WITH_CONTROLLER=0
# shellcheck source=tests/e2e/node_scenario.inc
source "$(dirname "$0")/node_scenario.inc"
