#!/usr/bin/env bash
# A real Kubernetes node on loopback, added to the control plane that
# hack/cluster.sh runs: containerd 2.x with runc, kubelet, kube-scheduler and
# kube-controller-manager, all built from Go modules by hack/testbin/build.sh
# (Kubernetes 1.37 by default; TKM_KUBE_VERSION picks another we build), so that
# Pods, Deployments and DaemonSets really run.
#
# Usage: hack/node.sh up|down|status|env|check FILE|apply FILE
#   up       needs `hack/cluster.sh up` first; builds what is missing, pushes the
#            pause and busybox images (hack/images/build.sh) to the local registry,
#            starts containerd, kubelet (node "127.0.0.1"), kube-scheduler and
#            kube-controller-manager, waits for the Node to be Ready. Again: reuses what runs.
#   down     stops what `up` started (pid files checked against command lines),
#            removes every container, and undoes what kubelet changed on the host:
#            mounts under the kubelet root, kubepods cgroups, KUBE-* iptables chains,
#            sysctls, /var/lib/kubelet/device-plugins, /var/log/{containers,pods},
#            containerd's /run/containerd and /opt/containerd (those it created only)
#   status   what runs, the Node's Ready condition, what listens
#   env      exports for eval: TKM_NODE_NAME, TKM_PAUSE_IMAGE, TKM_BUSYBOX_IMAGE, TKM_PYTHON_IMAGE,
#            CONTAINERD_ADDRESS/CONTAINERD_NAMESPACE and TKM_CTR (ctr), TKM_KUBELET_ROOT, ...
#   check FILE|-   refuse a manifest breaking the network rule (below); exit 1 with reasons
#   apply FILE|- [FLAGS]   check, then kubectl apply (FLAGS: more kubectl apply flags)
#
# Network rule (enforced by check/apply): every pod is hostNetwork; every image
# comes from the local registry ($TKM_REGISTRY); every container of a pod that
# may talk to the apiserver (automountServiceAccountToken not false) sets
# KUBERNETES_SERVICE_HOST=127.0.0.1 and KUBERNETES_SERVICE_PORT=<apiserver port>,
# since kubelet otherwise injects the service IP (10.0.0.1), which must never be
# contacted. Nothing listens on or talks to a non-loopback address.
#
# One test node per host: kubelet's cgroups (kubepods), iptables chains, sysctls
# and /var/lib/kubelet/device-plugins are host-wide. State and logs live in
# $TKM_CLUSTER_DIR/node (the kubelet root in ${TKM_KUBELET_ROOT:-/var/lib/kubelet}).
set -eEuo pipefail
trap 'echo "error: hack/node.sh: line $LINENO: \"$BASH_COMMAND\" failed (exit $?)" >&2' ERR
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=hack/lib.sh
source "$here/lib.sh"

dir=${TKM_CLUSTER_DIR:-$repo/.tkm/cluster}
node=127.0.0.1
kroot=${TKM_KUBELET_ROOT:-/var/lib/kubelet}

init_paths() {
  [[ -d $dir ]] || die "no control plane in $dir; run: hack/cluster.sh up"
  dir=$(realpath "$dir")
  pki=$dir/pki
  N=$dir/node
  host=$N/host # what the host looked like before the first `up`
  csock=$N/containerd/containerd.sock
  kcfg="--kubeconfig=$dir/admin.kubeconfig"
}

t_start=$(date +%s.%N)
elapsed() { awk -v a="$t_start" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }

kubectl_bin() { "$here/testbin/build.sh" --path kubectl; }
# runtime_bins: containerd 2.x, its runc shim, ctr and runc, built from Go modules
# (hack/testbin/build.sh; Debian 12's containerd 1.6 is past its end of life).
runtime_bins() {
  local b=$here/testbin/build.sh
  CONTAINERD=$("$b" --path containerd) || die "containerd build failed"
  SHIM=$("$b" --path containerd-shim-runc-v2) || die "containerd-shim-runc-v2 build failed"
  CTR=$("$b" --path ctr) || die "ctr build failed"
  RUNC=$("$b" --path runc) || die "runc build failed (needs Debian's libseccomp-dev: hack/deps.sh)"
}
kc() { "$KUBECTL" "$kcfg" "$@"; }

sysctls=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes)
created_dirs=(/var/lib/kubelet/device-plugins /var/log/containers /var/log/pods /run/containerd
  /opt/containerd)

# tail_die LOG WHAT: prints the end of LOG and dies naming it.
tail_die() {
  echo "---- last lines of $1 ----" >&2
  tail -20 "$1" >&2 || true
  die "$2; log: $1"
}

# our_kubelet_pids: kubelet processes that are not the one our pid file names.
foreign_kubelets() {
  local p mine=
  [[ -s $N/kubelet.pid ]] && mine=$(cat "$N/kubelet.pid")
  for p in /proc/[0-9]*; do
    [[ $(cat "$p/comm" 2>/dev/null) == kubelet ]] || continue
    [[ ${p#/proc/} == "$mine" ]] && continue
    echo "${p#/proc/}"
  done
}

# kroot_owner: the cluster dir whose node last took the kubelet root ("" if none).
kroot_owner() { cat "$kroot/.tkm-node" 2>/dev/null || true; }

# refuse_foreign_node: dies, before `up` touches anything, when another node
# (another cluster dir's, e.g. `make demo`'s while `make test` runs, or a kubelet
# not ours) runs on this host. Two nodes cannot share the host: kubelet's root,
# kubepods cgroups, iptables chains and sysctls are host-wide.
refuse_foreign_node() {
  local other owner
  other=$(foreign_kubelets | tr '\n' ' ')
  [[ -n $other ]] || return 0
  owner=$(kroot_owner)
  if [[ -n $owner && $owner != "$dir" ]]; then
    die "another test node runs on this host (kubelet pid ${other% }, cluster dir $owner); one node per host. Stop it first: TKM_CLUSTER_DIR=$owner hack/node.sh down (for \`make demo\`'s: make demo-down)"
  fi
  die "another kubelet runs on this host (pid ${other% }); one test node per host (kubepods cgroups, iptables and sysctls are host-wide)"
}

iptables_kube_chains() { # prints "CMD TABLE CHAIN" for every KUBE-* chain
  local cmd t
  for cmd in iptables ip6tables; do
    command -v "$cmd" >/dev/null || continue
    for t in filter nat mangle; do
      "$cmd" -t "$t" -S 2>/dev/null | awk -v c="$cmd" -v t="$t" '$1 == "-N" && $2 ~ /^KUBE-/ {print c, t, $2}'
    done
  done
}

# record_host: once, before kubelet first touches the host.
record_host() {
  [[ -e $host/recorded ]] && return 0
  mkdir -p "$host"
  local s d
  for s in "${sysctls[@]}"; do
    echo "$s=$(sysctl -n "$s" 2>/dev/null || true)"
  done >"$host/sysctls"
  : >"$host/created"
  for d in "${created_dirs[@]}" "$kroot"; do
    [[ -e $d ]] || echo "$d" >>"$host/created"
  done
  : >"$host/cgroups"
  for d in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
    [[ -d $d ]] && echo "$d" >>"$host/cgroups"
  done
  iptables_kube_chains >"$host/iptables" || true
  touch "$host/recorded"
}

check_prereqs() {
  [[ $(id -u) -eq 0 ]] || die "hack/node.sh must run as root (kubelet and containerd need it)"
  local b
  command -v iptables >/dev/null || die "iptables is not installed (run hack/deps.sh)"
  pid_alive "$dir/kube-apiserver.pid" kube-apiserver ||
    die "kube-apiserver of $dir is not running; run: hack/cluster.sh up"
  local cmdline
  cmdline=$(tr '\0' ' ' <"/proc/$(cat "$dir/kube-apiserver.pid")/cmdline")
  [[ $cmdline == *--kubelet-preferred-address-types=InternalIP* && $cmdline == *--authorization-mode=Node,RBAC* ]] ||
    die "kube-apiserver was started by an older hack/cluster.sh (no --kubelet-preferred-address-types=InternalIP / Node authorizer); run: hack/cluster.sh restart-apiserver"
  # Pods get ServiceAccount tokens (bound to the pod and node: the tkm-agent policy needs the node name).
  [[ $cmdline != *--disable-admission-plugins=ServiceAccount* ]] ||
    die "kube-apiserver runs without the ServiceAccount admission plugin (an older hack/cluster.sh): pods would get no tokens; run: hack/cluster.sh restart-apiserver"
  [[ -s $dir/node.kubeconfig && -s $dir/kube-controller-manager.kubeconfig && -s $dir/kube-scheduler.kubeconfig ]] ||
    die "no node/controller-manager/scheduler kubeconfigs in $dir; run: hack/cluster.sh up (it adds them)"
  [[ -s $dir/registry/addr ]] || die "no local registry in $dir; run: hack/cluster.sh up"
  ((${#csock} < 100)) || die "containerd socket path too long for a unix socket (${#csock} chars): $csock; use a shorter TKM_CLUSTER_DIR"
}

# port_for NAME ENV_VALUE: a loopback port for a component, remembered in $N/NAME.port
port_for() {
  local f=$N/$1.port want=${2:-}
  if [[ -n $want ]]; then
    port_free "$want" || die "port 127.0.0.1:$want ($1) is in use; free it or choose another"
    echo "$want" >"$f"
  elif [[ -s $f ]] && port_free "$(cat "$f")"; then
    :
  else
    free_port >"$f"
  fi
  cat "$f"
}

push_images() {
  local reg out
  reg=$(cat "$dir/registry/addr")
  out=$("$here/images/build.sh" "$reg" "$N/images") || die "building or pushing the test images to $reg failed"
  awk '$1 == "pause" {print "export TKM_PAUSE_IMAGE=" $2; print "export TKM_PAUSE_IMAGE_DIGEST=" $3}
       $1 == "busybox" {print "export TKM_BUSYBOX_IMAGE=" $2; print "export TKM_BUSYBOX_IMAGE_DIGEST=" $3}
       $1 == "python" {print "export TKM_PYTHON_IMAGE=" $2; print "export TKM_PYTHON_IMAGE_DIGEST=" $3}' \
    <<<"$out" >"$N/images.env"
  [[ $(grep -c -e TKM_BUSYBOX_IMAGE= -e TKM_PYTHON_IMAGE= "$N/images.env") == 2 ]] ||
    die "hack/images/build.sh printed no busybox or python image reference"
}

write_containerd_config() {
  local reg port=$1
  reg=$(cat "$dir/registry/addr")
  # shellcheck source=/dev/null # written above from hack/images/build.sh's output
  source "$N/images.env"
  rm -rf "$N/containerd/certs.d"
  mkdir -p "$N/containerd"/{root,state,opt} "$N/cni/net.d" "$N/cni/bin" "$N/containerd/certs.d/$reg"
  cat >"$N/containerd/certs.d/$reg/hosts.toml" <<EOF
server = "http://$reg"
[host."http://$reg"]
  capabilities = ["pull", "resolve"]
  skip_verify = true
EOF
  # Belt and braces (the rule is enforced by `check`): every other registry goes to a
  # closed loopback port: `_default` (containerd 2.x) for any host, and the common
  # public registries by name as well.
  local r
  for r in _default docker.io registry-1.docker.io registry.k8s.io k8s.gcr.io gcr.io ghcr.io quay.io \
    mcr.microsoft.com public.ecr.aws nvcr.io; do
    mkdir -p "$N/containerd/certs.d/$r"
    printf 'server = "http://127.0.0.1:9"\n[host."http://127.0.0.1:9"]\n  capabilities = ["pull", "resolve"]\n' \
      >"$N/containerd/certs.d/$r/hosts.toml"
  done
  # Only loopback: a CNI config is needed for NetworkReady; every pod is hostNetwork,
  # so no plugin binary is ever run.
  cat >"$N/cni/net.d/10-tkm-loopback.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "tkm-loopback", "plugins": [{"type": "loopback"}]}
EOF
  # containerd 2.x configuration (version 3): the CRI plugin is split into
  # io.containerd.cri.v1.images (pulls, registry hosts, the pause image),
  # io.containerd.cri.v1.runtime (runc, CNI) and io.containerd.grpc.v1.cri (streaming).
  cat >"$N/containerd/config.toml" <<EOF
# containerd of tkm's test node (written by hack/node.sh up; do not edit): $CONTAINERD
version = 3
root = "$N/containerd/root"
state = "$N/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.erofs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "$csock"
[ttrpc]
  address = ""
[debug]
  address = ""
  level = "info"
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$N/containerd/opt"
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "$TKM_PAUSE_IMAGE"
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = "$N/containerd/certs.d"
[plugins."io.containerd.cri.v1.runtime"]
  # root here lacks CAP_SYS_RESOURCE: without this every sandbox fails with
  # "can't get final child's PID from pipe: EOF"
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      runtime_path = "$SHIM"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "$RUNC"
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["$N/cni/bin"]
    conf_dir = "$N/cni/net.d"
[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "$port"
EOF
}

start_containerd() {
  if pid_alive "$N/containerd.pid" "$N/containerd/config.toml"; then
    log "containerd: running (pid $(cat "$N/containerd.pid"))"
    return 0
  fi
  [[ -e $N/containerd.pid ]] && log "removing stale pid file $N/containerd.pid"
  rm -f "$N/containerd.pid"
  if [[ -e $csock && ! -S $csock ]]; then
    die "$csock exists and is not a socket; remove it (containerd listens there)"
  fi
  rm -f "$csock"
  local sport
  sport=$(port_for containerd-stream "${TKM_CONTAINERD_STREAM_PORT:-}")
  write_containerd_config "$sport"
  log "starting containerd ($N/containerd/config.toml, log $N/containerd.log)"
  # PATH: the shim's dir first (containerd starts the shim runtime_path names; the
  # shim finds itself again by name for its children)
  PATH="$(dirname "$SHIM"):$PATH" setsid "$CONTAINERD" --config "$N/containerd/config.toml" \
    >"$N/containerd.log" 2>&1 </dev/null &
  echo $! >"$N/containerd.pid"
  for _ in $(seq 1 150); do
    if [[ -S $csock ]] && "$CTR" -a "$csock" version >/dev/null 2>&1; then
      return 0
    fi
    running "$N/containerd.pid" ||
      tail_die "$N/containerd.log" "containerd exited at start"
    sleep 0.1
  done
  tail_die "$N/containerd.log" "containerd did not answer on $csock within 15 s"
}

write_kubelet_config() {
  local port=$1 hport=$2
  mkdir -p "$N/kubelet/pki" "$N/pod-logs"
  # Pods get this resolv.conf (dnsPolicy Default / no cluster DNS): DNS stays on loopback.
  printf 'nameserver 127.0.0.1\noptions ndots:1 attempts:1 timeout:1\n' >"$N/kubelet/resolv.conf"
  cat >"$N/kubelet/config.yaml" <<EOF
# kubelet of tkm's test node (written by hack/node.sh up; do not edit)
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $hport
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$csock
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
resolvConf: $N/kubelet/resolv.conf
podLogsDir: $N/pod-logs
rotateCertificates: false
serverTLSBootstrap: false
registerNode: true
clusterDomain: cluster.local
# A busy shared disk must not evict the test pods.
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
syncFrequency: 10s
EOF
}

start_kubelet() {
  local kubelet=$1
  if pid_alive "$N/kubelet.pid" "$kubelet"; then
    log "kubelet: running (pid $(cat "$N/kubelet.pid"))"
    return 0
  fi
  [[ -e $N/kubelet.pid ]] && log "removing stale pid file $N/kubelet.pid"
  rm -f "$N/kubelet.pid"
  local other
  other=$(foreign_kubelets | tr '\n' ' ')
  [[ -z $other ]] || die "another kubelet runs on this host (pid $other); one test node per host (kubepods cgroups, iptables and sysctls are host-wide)"
  if [[ -d $kroot && ! -e $kroot/.tkm-node ]] && ! grep -qx "$kroot" "$host/created" 2>/dev/null; then
    die "$kroot exists and is not from hack/node.sh; move it away, or set TKM_KUBELET_ROOT to another directory"
  fi
  local port hport
  port=$(port_for kubelet "${TKM_KUBELET_PORT:-}")
  hport=$(port_for kubelet-healthz "${TKM_KUBELET_HEALTHZ_PORT:-}")
  write_kubelet_config "$port" "$hport"
  mkdir -p "$kroot"
  echo "$dir" >"$kroot/.tkm-node"
  log "starting kubelet on 127.0.0.1:$port as node $node (root $kroot, log $N/kubelet.log)"
  date -u +%Y-%m-%dT%H:%M:%SZ >"$N/kubelet.started"
  setsid "$kubelet" --config="$N/kubelet/config.yaml" --kubeconfig="$dir/node.kubeconfig" \
    --hostname-override="$node" --root-dir="$kroot" --cert-dir="$N/kubelet/pki" \
    --v="${TKM_KUBELET_V:-2}" >"$N/kubelet.log" 2>&1 </dev/null &
  echo $! >"$N/kubelet.pid"
}

wait_node_ready() {
  local kubelet=$1 t0=$SECONDS st started
  started=$(cat "$N/kubelet.started" 2>/dev/null || true)
  while ((SECONDS - t0 < 120)); do
    # Ready, and reported by this kubelet (not a condition left from an earlier one)
    st=$(kc get node "$node" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].lastHeartbeatTime}' 2>/dev/null || true)
    if [[ ${st%% *} == True && ! ${st#* } < $started ]]; then
      return 0
    fi
    if ! running "$N/kubelet.pid"; then
      grep -q "address already in use" "$N/kubelet.log" &&
        tail_die "$N/kubelet.log" "kubelet: port $(cat "$N/kubelet.port") or $(cat "$N/kubelet-healthz.port") is in use"
      tail_die "$N/kubelet.log" "kubelet exited"
    fi
    sleep 0.25
  done
  kc get node "$node" -o jsonpath='{range .status.conditions[*]}{.type}={.status} {.reason}: {.message}{"\n"}{end}' >&2 || true
  tail_die "$N/kubelet.log" "node $node not Ready after 120 s"
}

# start_component NAME BIN PORT ARGS...: kube-scheduler / kube-controller-manager
start_component() {
  local name=$1 bin=$2 port=$3
  shift 3
  if pid_alive "$N/$name.pid" "$bin"; then
    log "$name: running (pid $(cat "$N/$name.pid"))"
    return 0
  fi
  [[ -e $N/$name.pid ]] && log "removing stale pid file $N/$name.pid"
  rm -f "$N/$name.pid"
  log "starting $name on 127.0.0.1:$port (log $N/$name.log)"
  setsid "$bin" --bind-address=127.0.0.1 --secure-port="$port" \
    --authentication-kubeconfig="$dir/$name.kubeconfig" --authorization-kubeconfig="$dir/$name.kubeconfig" \
    "$@" >"$N/$name.log" 2>&1 </dev/null &
  echo $! >"$N/$name.pid"
}

wait_component() {
  local name=$1 bin=$2 port=$3 t0=$SECONDS
  while ((SECONDS - t0 < 60)); do
    [[ $(curl -sk "https://127.0.0.1:$port/healthz" 2>/dev/null) == ok ]] && return 0
    if ! running "$N/$name.pid"; then
      grep -q "address already in use" "$N/$name.log" && tail_die "$N/$name.log" "$name: port $port is in use"
      tail_die "$N/$name.log" "$name exited"
    fi
    sleep 0.25
  done
  tail_die "$N/$name.log" "$name not healthy after 60 s"
}

write_env() {
  {
    echo "export TKM_NODE_NAME=$node"
    echo "export TKM_KUBELET_ROOT=$kroot"
    echo "export TKM_NODE_DIR=$N"
    echo "export CONTAINERD_ADDRESS=$csock"
    echo "export CONTAINERD_NAMESPACE=k8s.io"
    echo "export TKM_CTR=$CTR"
    echo "export TKM_APISERVER_PORT=$(cat "$dir/apiserver.port")"
    cat "$N/images.env"
  } >"$N/env"
}

cmd_up() {
  init_paths
  check_prereqs
  KUBECTL=$(kubectl_bin)
  local kubelet kcm sched
  kubelet=$("$here/testbin/build.sh" --path kubelet) || die "kubelet binary missing and its build failed"
  kcm=$("$here/testbin/build.sh" --path kube-controller-manager) || die "kube-controller-manager build failed"
  sched=$("$here/testbin/build.sh" --path kube-scheduler) || die "kube-scheduler build failed"
  runtime_bins
  mkdir -p "$N"
  t_start=$(date +%s.%N)
  pid_alive "$N/kubelet.pid" "$kubelet" || refuse_foreign_node
  record_host
  push_images
  log "images pushed to $(cat "$dir/registry/addr") ($(elapsed) s)"
  start_containerd
  start_kubelet "$kubelet"
  local sport cport
  # a component that runs keeps its port (which is then, of course, not free)
  if pid_alive "$N/kube-scheduler.pid" "$sched"; then sport=$(cat "$N/kube-scheduler.port")
  else sport=$(port_for kube-scheduler "${TKM_SCHEDULER_PORT:-}"); fi
  cat >"$N/kube-scheduler.yaml" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {kubeconfig: $dir/kube-scheduler.kubeconfig}
leaderElection: {leaderElect: false}
EOF
  start_component kube-scheduler "$sched" "$sport" --config="$N/kube-scheduler.yaml" --v=1
  if pid_alive "$N/kube-controller-manager.pid" "$kcm"; then cport=$(cat "$N/kube-controller-manager.port")
  else cport=$(port_for kube-controller-manager "${TKM_CONTROLLER_MANAGER_PORT:-}"); fi
  start_component kube-controller-manager "$kcm" "$cport" --kubeconfig="$dir/kube-controller-manager.kubeconfig" \
    --leader-elect=false --use-service-account-credentials=true \
    --service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt" \
    --node-monitor-period=1s --cert-dir="$N/kcm-certs" --v=1
  wait_node_ready "$kubelet"
  log "node $node Ready ($(elapsed) s after up)"
  wait_component kube-scheduler "$sched" "$sport"
  wait_component kube-controller-manager "$kcm" "$cport"
  # kube-controller-manager lifts the not-ready taint kubelet registered with; only
  # then does the scheduler place pods on the node.
  local t0=$SECONDS
  until [[ $(kc get node "$node" -o jsonpath='{.spec.taints[*].key}' 2>/dev/null) != *node.kubernetes.io/not-ready* ]]; do
    ((SECONDS - t0 < 60)) || tail_die "$N/kube-controller-manager.log" "node $node still has the not-ready taint after 60 s"
    sleep 0.25
  done
  write_env
  log "test node up in $(elapsed) s: kubelet 127.0.0.1:$(cat "$N/kubelet.port"), containerd $csock, scheduler :$sport, controller-manager :$cport"
  echo "eval \"\$($0 env)\"   # images, containerd address for ctr" >&2
}

# ---- down ------------------------------------------------------------------

# remove_containers: every task and container in containerd's k8s.io namespace.
remove_containers() {
  pid_alive "$N/containerd.pid" "$N/containerd/config.toml" || return 0
  local c ids
  ids=$("$CTR" -a "$csock" -n k8s.io tasks ls -q 2>/dev/null || true)
  for c in $ids; do
    "$CTR" -a "$csock" -n k8s.io tasks kill -s SIGKILL "$c" >/dev/null 2>&1 || true
  done
  for c in $ids; do
    for _ in $(seq 1 50); do
      "$CTR" -a "$csock" -n k8s.io tasks delete "$c" >/dev/null 2>&1 && break
      sleep 0.1
    done
  done
  ids=$("$CTR" -a "$csock" -n k8s.io containers ls -q 2>/dev/null || true)
  for c in $ids; do
    "$CTR" -a "$csock" -n k8s.io containers delete "$c" >/dev/null 2>&1 || log "could not delete container $c"
  done
  [[ -z $ids ]] || log "removed $(wc -w <<<"$ids") containers"
}

# stop_shims: shims of our containerd that outlived it (matched by our socket path).
stop_shims() {
  local p cmd
  for p in /proc/[0-9]*; do
    [[ $(cat "$p/comm" 2>/dev/null) == containerd-shim* ]] || continue
    cmd=$(tr '\0' ' ' 2>/dev/null <"$p/cmdline" || true)
    [[ $cmd == *"$csock"* ]] || continue
    log "stopping leftover shim pid ${p#/proc/}"
    kill -TERM "${p#/proc/}" 2>/dev/null || true
    sleep 0.5
    kill -KILL "${p#/proc/}" 2>/dev/null || true
  done
}

# mounts_under DIR...: mount points at or below the DIRs, deepest first.
mounts_under() {
  local d
  for d in "$@"; do
    awk -v d="$d" '{ gsub(/\\040/, " ", $5); if ($5 == d || index($5, d "/") == 1) print $5 }' /proc/self/mountinfo
  done | awk '{ print length($0) "\t" $0 }' | sort -rn | cut -f2- | uniq
}

unmount_all() {
  local m n=0
  while read -r m; do
    [[ -n $m ]] || continue
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "could not unmount $m"
    n=$((n + 1))
  done < <(mounts_under "$@")
  ((n == 0)) || log "unmounted $n mounts under $*"
}

remove_cgroups() {
  local d
  for d in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
    [[ -d $d ]] || continue
    grep -qx "$d" "$host/cgroups" 2>/dev/null && continue # there before us
    # leaves first; a cgroup with processes stays (and is reported)
    find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null || true
    [[ -d $d ]] && log "cgroup $d still exists (processes in it: $(find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null | tr '\n' ' '))"
  done
  return 0
}

remove_iptables() {
  local cmd t ch line n=0
  while read -r cmd t ch; do
    [[ -n $ch ]] || continue
    grep -qx "$cmd $t $ch" "$host/iptables" 2>/dev/null && continue
    # rules that jump to the chain first, then the chain itself
    local rule
    while read -r line; do
      read -ra rule <<<"${line/-A /-D }" # the rule's words, as iptables -S printed them
      "$cmd" -t "$t" "${rule[@]}" 2>/dev/null || true
    done < <("$cmd" -t "$t" -S 2>/dev/null | grep -E -- "^-A .* -j $ch( |$)" || true)
    "$cmd" -t "$t" -F "$ch" 2>/dev/null || true
    n=$((n + 1))
  done < <(iptables_kube_chains)
  while read -r cmd t ch; do
    [[ -n $ch ]] || continue
    grep -qx "$cmd $t $ch" "$host/iptables" 2>/dev/null && continue
    "$cmd" -t "$t" -X "$ch" 2>/dev/null || log "could not delete $cmd -t $t chain $ch"
  done < <(iptables_kube_chains)
  ((n == 0)) || log "removed $n KUBE-* iptables chains"
}

restore_sysctls() {
  [[ -s $host/sysctls ]] || return 0
  local kv k v
  while read -r kv; do
    k=${kv%%=*} v=${kv#*=}
    [[ -n $v ]] || continue
    [[ $(sysctl -n "$k" 2>/dev/null) == "$v" ]] && continue
    if sysctl -qw "$k=$v" >/dev/null 2>&1; then log "sysctl $k restored to $v"; else log "could not restore sysctl $k=$v"; fi
  done <"$host/sysctls"
}

cmd_down() {
  init_paths
  [[ -d $N ]] || { log "no test node in $dir"; return 0; }
  runtime_bins
  stop_pidfile "$N/kube-scheduler.pid" kube-scheduler
  stop_pidfile "$N/kube-controller-manager.pid" kube-controller-manager
  stop_pidfile "$N/kubelet.pid" kubelet
  # The Node goes too, so that a later `up` waits for a fresh registration and
  # never reads a Ready condition left over from this kubelet.
  if [[ -s $dir/admin.kubeconfig ]] && pid_alive "$dir/kube-apiserver.pid" kube-apiserver; then
    KUBECTL=$(kubectl_bin)
    kc delete node "$node" --wait=false --request-timeout=10s >/dev/null 2>&1 || true
  fi
  remove_containers
  stop_pidfile "$N/containerd.pid" "$N/containerd/config.toml"
  stop_shims
  [[ -d $host ]] || { log "test node stopped ($N); no host changes recorded"; return 0; }
  local owner
  owner=$(kroot_owner)
  if [[ -n $owner && $owner != "$dir" ]]; then
    # Another node took the kubelet root (and /run/containerd) after ours: its
    # mounts are not ours to undo.
    log "$kroot belongs to the node of $owner: left alone"
    unmount_all "$N"
    rm -rf --one-file-system "$N/containerd/state" "$N/pod-logs" "$host"
    rm -f "$N/env"
    log "test node stopped ($N); the host is the other node's"
    return 0
  fi
  unmount_all "$kroot" "$N" /run/containerd
  remove_cgroups
  remove_iptables
  restore_sysctls
  if [[ -e $kroot/.tkm-node ]] || grep -qx "$kroot" "$host/created" 2>/dev/null; then
    if [[ -z $(mounts_under "$kroot") ]]; then
      rm -rf --one-file-system "$kroot"
    else
      log "kept $kroot: mounts remain under it"
    fi
  fi
  local d
  while read -r d; do
    [[ -n $d && $d != "$kroot" && -e $d ]] || continue
    if [[ -z $(mounts_under "$d") ]]; then rm -rf --one-file-system "$d"; else log "kept $d: mounts remain under it"; fi
  done <"$host/created"
  rm -rf --one-file-system "$N/containerd/state" "$N/pod-logs" "$host"
  rm -f "$N/env"
  log "test node stopped and host restored ($N)"
}

cmd_status() {
  init_paths
  local rc=0 c pat
  for c in containerd kubelet kube-scheduler kube-controller-manager; do
    pat=$c
    [[ $c == containerd ]] && pat=$N/containerd/config.toml
    if pid_alive "$N/$c.pid" "$pat"; then
      echo "$c: running (pid $(cat "$N/$c.pid"), log $N/$c.log)"
    else
      echo "$c: not running"
      rc=1
    fi
  done
  if [[ -s $dir/admin.kubeconfig ]]; then
    KUBECTL=$(kubectl_bin)
    echo "node $node Ready: $(kc get node "$node" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null || echo unknown)"
  fi
  return $rc
}

# ---- network rule ------------------------------------------------------------

cmd_check() {
  local f=${1:-}
  [[ -n $f ]] || die "usage: hack/node.sh check FILE|-"
  init_paths
  KUBECTL=$(kubectl_bin)
  local reg port json
  reg=$(cat "$dir/registry/addr")
  port=$(cat "$dir/apiserver.port")
  json=$(kc create --dry-run=client -o json -f "$f") || die "cannot parse manifest $f"
  local bad
  bad=$(jq -r --arg reg "$reg/" --arg port "$port" '
    def pods:
      if .kind == "List" then .items[] | pods
      elif .kind == "Pod" then {n: "Pod/\(.metadata.name)", s: .spec}
      elif .kind == "CronJob" then {n: "CronJob/\(.metadata.name)", s: .spec.jobTemplate.spec.template.spec}
      elif (.spec.template.spec? // null) != null then {n: "\(.kind)/\(.metadata.name)", s: .spec.template.spec}
      elif .kind == "PodTemplate" then {n: "PodTemplate/\(.metadata.name)", s: .template.spec}
      else empty end;
    pods | . as $p | $p.s as $s
    | (if $s.hostNetwork != true then "\($p.n): not hostNetwork (every test pod must set hostNetwork: true)" else empty end),
      ($s.containers + ($s.initContainers // []) + ($s.ephemeralContainers // []) | .[] | . as $c
        | (if ($c.image | startswith($reg)) | not then
             "\($p.n): container \($c.name): image \($c.image) is not from the local registry \($reg)" else empty end),
          (if $s.automountServiceAccountToken != false then
             ([$c.env // [] | .[] | {(.name): .value}] | add // {}) as $e
             | (if $e.KUBERNETES_SERVICE_HOST != "127.0.0.1" then
                  "\($p.n): container \($c.name): KUBERNETES_SERVICE_HOST must be set to 127.0.0.1 (or automountServiceAccountToken: false)" else empty end),
               (if $e.KUBERNETES_SERVICE_PORT != $port then
                  "\($p.n): container \($c.name): KUBERNETES_SERVICE_PORT must be set to \($port)" else empty end)
           else empty end))' <<<"$json") || die "checking manifest $f failed"
  if [[ -n $bad ]]; then
    local refused
    mapfile -t refused <<<"$bad"
    printf 'refused: %s\n' "${refused[@]}" >&2
    return 1
  fi
}

cmd_apply() {
  local f=${1:-}
  [[ -n $f ]] || die "usage: hack/node.sh apply FILE|-"
  if [[ $f == - ]]; then
    manifest_tmp=$(mktemp "${TMPDIR:-/tmp}/tkm-manifest-XXXXXX")
    trap 'rm -f "$manifest_tmp"' EXIT
    cat >"$manifest_tmp"
    f=$manifest_tmp
  fi
  shift
  cmd_check "$f" || die "manifest $f breaks the test network rule (see hack/node.sh header); not applied"
  kc apply -f "$f" "$@"
}

case ${1:-} in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  env)
    init_paths
    [[ -s $N/env ]] || die "no test node in $dir; run: hack/node.sh up"
    cat "$N/env"
    ;;
  check) shift; cmd_check "$@" ;;
  apply) shift; cmd_apply "$@" ;;
  *) sed -n '2,32p' "$0" >&2; exit 2 ;;
esac
