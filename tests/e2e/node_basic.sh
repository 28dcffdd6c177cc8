#!/usr/bin/env bash
# The real test node (hack/node.sh; the ctest fixture e2e.node.up starts it after
# every other e2e scenario and e2e.node.down stops it): the Node is Ready; the
# network rule refuses what it must; a hostNetwork busybox pod runs and its logs
# come back through the apiserver and kubelet; a Deployment (scheduler + KCM) and
# a DaemonSet get their pods Running on the node; deleting them leaves no
# container and no pod mount; every listener is on loopback; `node.sh down`
# leaves no process, cgroup, iptables chain or changed sysctl, and `up` again works.
# shellcheck source=tests/e2e/lib.sh
source "$(dirname "$0")/lib.sh"
hack=$TKM_SOURCE_DIR/hack
eval "$("$hack/node.sh" env)"
ctr() { "$TKM_CTR" -a "$CONTAINERD_ADDRESS" -n k8s.io "$@"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f", b-a}'; }
# for wait_for, which runs its command again and again:
is() { [[ $(kubectl -n "$ns" get "$1" -o jsonpath="$2" 2>/dev/null) == "$3" ]]; } # OBJ JSONPATH VALUE
none() { [[ -z $("$@") ]]; }                                                        # CMD prints nothing

step "the Node is Ready, at 127.0.0.1"
assert_eq True "$(kubectl get node "$TKM_NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" "node Ready"
assert_eq 127.0.0.1 "$(kubectl get node "$TKM_NODE_NAME" -o jsonpath='{.status.addresses[?(@.type=="InternalIP")].address}')" "InternalIP is loopback"
assert_eq "" "$(kubectl get node "$TKM_NODE_NAME" -o jsonpath='{.spec.taints}')" "no taints (not NotReady, no disk pressure)"

ns=$(e2e_namespace)
e2e_on_exit "kubectl -n $ns delete deploy,ds,pods --all --wait=false >/dev/null 2>&1"
envs="        env:
        - {name: KUBERNETES_SERVICE_HOST, value: \"127.0.0.1\"}
        - {name: KUBERNETES_SERVICE_PORT, value: \"$TKM_APISERVER_PORT\"}"

# pod NAME HOSTNETWORK IMAGE ENVS COMMAND: a Pod manifest
pod() {
  # shellcheck disable=SC2001 # per line: ${4//} cannot anchor at each line's start
  cat <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $1, namespace: $ns}
spec:
  hostNetwork: $2
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: $3
    command: [sh, -c, '$5']
$(sed 's/^    //' <<<"$4")
EOF
}

step "the network rule: node.sh apply refuses what breaks it"
expect_fail "a pod that is not hostNetwork" "$hack/node.sh" apply - < <(pod bad1 false "$TKM_BUSYBOX_IMAGE" "$envs" true)
assert_contains "$OUT" "not hostNetwork" "reason named"
expect_fail "an image from outside the local registry" "$hack/node.sh" apply - < <(pod bad2 true docker.io/library/busybox "$envs" true)
assert_contains "$OUT" "is not from the local registry" "reason named"
expect_fail "no KUBERNETES_SERVICE_HOST" "$hack/node.sh" apply - < <(pod bad3 true "$TKM_BUSYBOX_IMAGE" "" true)
assert_contains "$OUT" "KUBERNETES_SERVICE_HOST must be set to 127.0.0.1" "reason named"
wrongenv=${envs//127.0.0.1/10.0.0.1}
expect_fail "KUBERNETES_SERVICE_HOST not loopback" "$hack/node.sh" apply - < <(pod bad4 true "$TKM_BUSYBOX_IMAGE" "$wrongenv" true)
assert_eq "" "$(kubectl -n "$ns" get pods -o name)" "nothing refused was created"

step "containerd's registry config sends public registries to a closed loopback port"
# ctr resolves in its own process with the node's hosts dir; in an empty network
# namespace nothing can leave the host whatever happens.
for r in docker.io/library/busybox:1 registry.k8s.io/pause:3.10; do
  expect_fail "pull $r" unshare -n "$TKM_CTR" -a "$CONTAINERD_ADDRESS" -n k8s.io images pull --hosts-dir "$TKM_NODE_DIR/containerd/certs.d" "$r"
  assert_contains "$OUT" "http://127.0.0.1:9/v2/" "$r resolved at 127.0.0.1:9"
done

step "a hostNetwork busybox pod runs; its logs come back through kubectl logs"
t0=$(now)
# shellcheck disable=SC2016 # the pod's shell expands them
expect_ok "apply hello" "$hack/node.sh" apply - < <(pod hello true "$TKM_BUSYBOX_IMAGE" "$envs" \
  'echo "hello from the tkm node: host=$KUBERNETES_SERVICE_HOST port=$KUBERNETES_SERVICE_PORT"')
wait_for 120 "hello Succeeded" is pod/hello '{.status.phase}' Succeeded
echo "timing: pod hello created -> Succeeded: $(since "$t0") s (includes pulling busybox when containerd does not have it yet)"
logs=$(kubectl -n "$ns" logs hello)
assert_eq "hello from the tkm node: host=127.0.0.1 port=$TKM_APISERVER_PORT" "$logs" "kubectl logs"

step "a Deployment of 1 replica: scheduled by kube-scheduler, made by kube-controller-manager"
t0=$(now)
expect_ok "apply deployment" "$hack/node.sh" apply - <<EOF
apiVersion: apps/v1
kind: Deployment
metadata: {name: sleeper, namespace: $ns}
spec:
  replicas: 1
  selector: {matchLabels: {app: sleeper}}
  template:
    metadata: {labels: {app: sleeper}}
    spec:
      hostNetwork: true
      automountServiceAccountToken: false
      terminationGracePeriodSeconds: 1
      containers:
      - name: main
        image: $TKM_BUSYBOX_IMAGE
        command: [sleep, "3600"]
EOF
wait_for 120 "deployment Available" kubectl -n "$ns" wait --for=condition=Available deploy/sleeper --timeout=1s
echo "timing: deployment created -> pod Running: $(since "$t0") s"
assert_eq "Running $TKM_NODE_NAME" "$(kubectl -n "$ns" get pods -l app=sleeper -o jsonpath='{.items[0].status.phase} {.items[0].spec.nodeName}')" "its pod runs on the node"

step "a DaemonSet gets its pod on the node"
t0=$(now)
expect_ok "apply daemonset" "$hack/node.sh" apply - <<EOF
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: perpod, namespace: $ns}
spec:
  selector: {matchLabels: {app: perpod}}
  template:
    metadata: {labels: {app: perpod}}
    spec:
      hostNetwork: true
      terminationGracePeriodSeconds: 1
      containers:
      - name: main
        image: $TKM_BUSYBOX_IMAGE
        command: [sleep, "3600"]
$envs
EOF
wait_for 120 "daemonset pod Ready" is ds/perpod '{.status.numberReady}' 1
echo "timing: daemonset created -> pod Ready: $(since "$t0") s"
assert_eq "Running $TKM_NODE_NAME" "$(kubectl -n "$ns" get pods -l app=perpod -o jsonpath='{.items[0].status.phase} {.items[0].spec.nodeName}')" "its pod runs on the node"
assert_eq 127.0.0.1 "$(kubectl -n "$ns" get pods -l app=perpod -o jsonpath='{.items[0].status.podIP}')" "hostNetwork pod IP is loopback"
running=$(ctr tasks ls -q | wc -l)
((running >= 4)) || fail "expected at least 4 running tasks (2 sandboxes, 2 containers), got $running"
pass "containers run in containerd ($running tasks)"

step "every listener of the node's processes is on loopback"
pids=" $(cat "$TKM_NODE_DIR"/{containerd,kubelet,kube-scheduler,kube-controller-manager}.pid | tr '\n' ' ') "
listeners=$(ss -Hltnp | while read -r _ _ _ local _ proc; do
  while read -r p; do
    if [[ $pids == *" $p "* ]]; then echo "$local"; fi
  done < <(grep -o 'pid=[0-9]*' <<<"$proc" | cut -d= -f2)
done | sort -u)
[[ -n $listeners ]] || fail "found no listener of the node's processes"
bad=$(grep -v '^127\.0\.0\.1:' <<<"$listeners" || true)
[[ -z $bad ]] || fail "listeners not on 127.0.0.1: $bad"
pass "listeners: $(tr '\n' ' ' <<<"$listeners")"

step "deleting them leaves no container and no pod mount"
t0=$(now)
kubectl -n "$ns" delete deploy/sleeper ds/perpod pod/hello --wait=true >/dev/null
wait_for 60 "pods gone" none kubectl -n "$ns" get pods -o name
wait_for 60 "no running task in containerd" none ctr tasks ls -q
# kubelet's container GC removes dead containers of deleted pods once a minute
wait_for 120 "no container in containerd" none ctr containers ls -q
echo "timing: delete -> no container left: $(since "$t0") s"
assert_eq "" "$(awk -v d="$TKM_KUBELET_ROOT/pods/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo)" "no mount under $TKM_KUBELET_ROOT/pods"

step "hack/node.sh down restores the host"
saved=$(cat "$TKM_NODE_DIR/host/sysctls")
expect_ok "node.sh down" "$hack/node.sh" down
ours() { # processes of this node (by binary or config path), if any
  local p cmd
  for p in /proc/[0-9]*; do
    cmd=$(tr '\0' ' ' 2>/dev/null <"$p/cmdline") || continue
    [[ $cmd == *"$TKM_NODE_DIR"* || $cmd == *"$TKM_CLUSTER_DIR/node"* ]] && echo "${p#/proc/} $cmd"
  done
  return 0
}
assert_eq "" "$(ours)" "no kubelet, containerd, shim, scheduler or controller-manager process left"
assert_eq "" "$(ls -d /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods 2>/dev/null || true)" "no kubepods cgroup"
assert_eq "" "$({ iptables-save; ip6tables-save; } 2>/dev/null | grep -E '^:KUBE-|-j KUBE-' || true)" "no KUBE-* iptables chains"
while IFS='=' read -r k v; do
  [[ -n $v ]] || continue
  assert_eq "$v" "$(sysctl -n "$k")" "sysctl $k restored"
done <<<"$saved"
assert_eq "" "$(awk -v d="$TKM_KUBELET_ROOT" '$5 == d || index($5, d "/") == 1 {print $5}' /proc/self/mountinfo)" "no mount under $TKM_KUBELET_ROOT"
[[ ! -e /var/lib/kubelet/device-plugins && ! -e /run/containerd ]] || fail "/var/lib/kubelet/device-plugins or /run/containerd left"
pass "kubelet and containerd dirs removed"

step "hack/node.sh up again (after down) brings the Node back Ready"
t0=$(now)
expect_ok "node.sh up" "$hack/node.sh" up
echo "timing: node.sh up (binaries and images cached) -> Node Ready: $(since "$t0") s"
assert_eq True "$(kubectl get node "$TKM_NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" "node Ready again"
e2e_done
