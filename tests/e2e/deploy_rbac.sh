#!/usr/bin/env bash
# deploy_rbac: the kustomize base (manifests/base) on the real apiserver with
# RBAC authorization. Server-side dry-run and real apply accept every object;
# each ServiceAccount may do what its daemon needs and is denied what it must
# not do (kubectl auth can-i --as); the ValidatingAdmissionPolicy lets an
# agent's token write only the node status objects named after its own node.
source "$(dirname "$0")/lib.sh"

BASE=$TKM_SOURCE_DIR/manifests/base
T=$E2E_TMP

step "server-side dry run, then apply"
# A dry run creates nothing, so the namespace the other objects go into must exist first.
expect_ok "the namespace" kubectl apply --server-side -f "$BASE/namespace.yaml"
expect_ok "dry run" kubectl apply -k "$BASE" --server-side --dry-run=server
# for real without the workloads (lib.sh e2e_base_no_workloads says why; deploy_manifests checks them)
e2e_base_no_workloads "$T/base"
expect_ok "apply" kubectl apply -k "$T/base" --server-side --force-conflicts
assert_not_contains "$OUT" "daemonset" "no workload applied"
e2e_crds

can() { # SA VERB RESOURCE[/NAME][:SUBRESOURCE] [NS]
  local r=$3 sub=
  [[ $r == *:* ]] && sub=${r#*:} r=${r%%:*}
  kubectl auth can-i "$2" "$r" ${sub:+--subresource="$sub"} --as="system:serviceaccount:tkm-system:$1" ${4:+-n "$4"} 2>/dev/null || true
}
allowed() { # SA NS|- VERB RESOURCE...
  local sa=$1 ns=$2 verb=$3 r
  shift 3
  for r in "$@"; do
    [[ $(can "$sa" "$verb" "$r" "${ns#-}") == yes ]] || fail "$sa should be allowed to $verb $r${ns#-}"
  done
  pass "$sa may $verb $* ${ns#-}"
}
denied() {
  local sa=$1 ns=$2 verb=$3 r
  shift 3
  for r in "$@"; do
    [[ $(can "$sa" "$verb" "$r" "${ns#-}") == no ]] || fail "$sa must NOT be allowed to $verb $r${ns#-}"
  done
  pass "$sa may not $verb $* ${ns#-}"
}
TKC=tritonkernelcaches.tkm.io TKCC=tritonkernelcacheclusters.tkm.io
NS_=tritonkernelcachenodestatuses.tkm.io NSC=tritonkernelcachenodestatusclusters.tkm.io

step "tkm-controller"
for v in get list watch patch update; do allowed tkm-controller ml "$v" "$TKC"; allowed tkm-controller - "$v" "$TKCC"; done
allowed tkm-controller ml patch "$TKC:status"
allowed tkm-controller - patch "$TKCC:status"
for v in get list watch delete; do allowed tkm-controller ml "$v" "$NS_"; allowed tkm-controller - "$v" "$NSC"; done
allowed tkm-controller ml patch "$NS_:status"
allowed tkm-controller - get secrets/x configmaps/x
allowed tkm-controller - list nodes
allowed tkm-controller - patch nodes
allowed tkm-controller ml create events
allowed tkm-controller tkm-system create leases.coordination.k8s.io
allowed tkm-controller tkm-system watch configmaps
denied tkm-controller ml list secrets
denied tkm-controller ml watch secrets
denied tkm-controller ml create secrets pods "$TKC"
denied tkm-controller ml delete "$TKC" pods
denied tkm-controller ml create leases.coordination.k8s.io
denied tkm-controller - update nodes
denied tkm-controller - create "$NSC"
denied tkm-controller - delete namespaces
denied tkm-controller - create clusterrolebindings.rbac.authorization.k8s.io

step "tkm-agent"
for v in get list watch; do allowed tkm-agent ml "$v" "$TKC"; allowed tkm-agent - "$v" "$TKCC"; done
for v in get list watch create patch delete; do allowed tkm-agent ml "$v" "$NS_"; allowed tkm-agent - "$v" "$NSC"; done
allowed tkm-agent ml patch "$NS_:status"
allowed tkm-agent - get nodes/x secrets/x configmaps/x
allowed tkm-agent ml create events
denied tkm-agent ml patch "$TKC" "$TKC:status"
denied tkm-agent - patch "$TKCC" "$TKCC:status"
denied tkm-agent ml list secrets
denied tkm-agent ml get pods
denied tkm-agent - list nodes
denied tkm-agent - patch nodes
denied tkm-agent tkm-system create leases.coordination.k8s.io
denied tkm-agent ml create pods/exec

step "tkm-csi needs no API access at all"
denied tkm-csi - get nodes "$TKCC" "$NSC"
denied tkm-csi ml get "$TKC" secrets pods

step "an agent writes only its own node's status objects (ValidatingAdmissionPolicy)"
agent_kubeconfig() { # NODE|- OUT: the admin kubeconfig impersonating the agent's token
  kubectl config view --raw --flatten -o json |
    jq --arg node "$1" '.users[0].user += {"as": "system:serviceaccount:tkm-system:tkm-agent",
      "as-groups": ["system:serviceaccounts", "system:serviceaccounts:tkm-system", "system:authenticated"]}
      | if $node == "-" then . else .users[0].user += {"as-user-extra": {"authentication.kubernetes.io/node-name": [$node]}} end' >"$2"
}
agent_kubeconfig node-a "$T/agent-a.json"
agent_kubeconfig - "$T/agent-none.json"
status_obj() { # NAME
  printf '{"apiVersion":"tkm.io/v1alpha1","kind":"TritonKernelCacheNodeStatusCluster","metadata":{"name":"%s"}}' "$1"
}
as_apply() { # KUBECONFIG NAME [--dry-run=server]: server-side apply of a node status object
  status_obj "$2" | KUBECONFIG=$1 kubectl apply --server-side --field-manager=tkm-agent -f - ${3:+"$3"}
}
policy_denies_node_b() { ! as_apply "$T/agent-a.json" node-b --dry-run=server; }
e2e_on_exit "kubectl delete tkcnsc node-a node-b --ignore-not-found --wait=false >/dev/null 2>&1"
# The policy is compiled asynchronously after it is created: wait until it denies.
wait_for 30 "the policy is in force" policy_denies_node_b
expect_ok "agent on node-a creates node-a" as_apply "$T/agent-a.json" node-a
expect_fail "agent on node-a creates node-b" as_apply "$T/agent-a.json" node-b
assert_contains "$OUT" "tkm-agent on node node-a may write only the node status objects named node-a, not node-b" "the denial says why"
expect_ok "an admin creates node-b" bash -c "$(declare -f status_obj); status_obj node-b | kubectl apply --server-side --field-manager=admin -f -"
expect_fail "agent on node-a deletes node-b" env KUBECONFIG="$T/agent-a.json" kubectl delete tkcnsc node-b
assert_contains "$OUT" "not node-b" "delete denied too"
expect_fail "agent on node-a patches node-b's status" env KUBECONFIG="$T/agent-a.json" kubectl patch tkcnsc node-b --subresource=status --type=merge -p '{"status":{"nodeName":"node-b"}}'
expect_fail "a token bound to no node writes nothing" as_apply "$T/agent-none.json" node-a
assert_contains "$OUT" "no node name in the token" "and says why"
expect_ok "agent on node-a deletes node-a" env KUBECONFIG="$T/agent-a.json" kubectl delete tkcnsc node-a
e2e_done
