#!/usr/bin/env bash
# Runs tkm's daemons as local processes against the control plane of
# hack/cluster.sh, for `TKM_DEMO_MODE=local make demo` and by hand: tkm-controller, and one
# tkm-agent for a Node object "demo-node" whose GPU is the H200 of the fixture
# GPU root (tests/fixtures/gpu/roots/h200 through the fake NVML): the GPU a
# real cache of the fixtures was compiled on. No kubelet is needed; the real
# node (hack/node.sh, tests/e2e/node_*.sh) runs them as pods instead.
#
# Usage: hack/tkm-local.sh up|down|status [BUILD_DIR]
#   up      start both (idempotent), wait for their /readyz
#   down    stop what `up` started (pid files)
#   status  what runs
# State and logs under the cluster dir ($TKM_CLUSTER_DIR, as hack/cluster.sh):
#   tkm-controller.log, tkm-agent.log, tkm-agent/ (store, socket), tkm-controller/ (state)
# The daemons use the admin kubeconfig here; in a cluster they use their
# ServiceAccounts (manifests/base).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=hack/lib.sh
source "$repo/hack/lib.sh"
cmd=${1:-}
build=${2:-$repo/build}
dir=${TKM_CLUSTER_DIR:-$repo/.tkm/cluster}
ns=tkm-system
node=demo-node
root=$repo/tests/fixtures/gpu/roots/h200

ready() { # URL
  curl -fsS --max-time 2 "$1" >/dev/null 2>&1
}

up() {
  [[ -s $dir/admin.kubeconfig ]] || die "no control plane in $dir: run hack/cluster.sh up first"
  local kc=$dir/admin.kubeconfig ctl=$build/controller/tkm-controller agent=$build/agent/tkm-agent
  local nvml=$build/fakenvml/libnvidia-ml.so.1 k="kubectl --kubeconfig $dir/admin.kubeconfig"
  for f in "$ctl" "$agent" "$nvml"; do [[ -x $f || -f $f ]] || die "$f is missing: build first (cmake --build $build)"; done
  [[ -d $root ]] || die "$root is missing: the fixtures ship with the repository"
  $k get namespace "$ns" >/dev/null 2>&1 || $k create namespace "$ns" >/dev/null
  $k get node "$node" >/dev/null 2>&1 ||
    $k create -f - >/dev/null <<EOF
{"apiVersion":"v1","kind":"Node","metadata":{"name":"$node","labels":{"tkm.io/demo":"true"}}}
EOF
  local cport hport
  [[ -s $dir/tkm-controller.health ]] || free_port >"$dir/tkm-controller.health"
  [[ -s $dir/tkm-agent.health ]] || free_port >"$dir/tkm-agent.health"
  cport=$(cat "$dir/tkm-controller.health")
  hport=$(cat "$dir/tkm-agent.health")
  if ! pid_alive "$dir/tkm-controller.pid" tkm-controller; then
    mkdir -p "$dir/tkm-controller"
    log "starting tkm-controller (log: $dir/tkm-controller.log)"
    setsid "$ctl" --kubeconfig "$kc" --namespace "$ns" --state-dir "$dir/tkm-controller" \
      --metrics-bind-address 0 --health-probe-bind-address "127.0.0.1:$cport" \
      >>"$dir/tkm-controller.log" 2>&1 </dev/null &
    echo $! >"$dir/tkm-controller.pid"
  fi
  if ! pid_alive "$dir/tkm-agent.pid" tkm-agent; then
    mkdir -p "$dir/tkm-agent/store" "$dir/tkm-agent/run"
    chmod 0700 "$dir/tkm-agent/run"
    log "starting tkm-agent for node $node, GPU: the fixture H200 (log: $dir/tkm-agent.log)"
    TKM_FAKE_NVML=$root/nvml.conf setsid "$agent" --kubeconfig "$kc" --node-name "$node" \
      --namespace "$ns" --store-dir "$dir/tkm-agent/store" --socket "$dir/tkm-agent/run/agent.sock" \
      --sysfs-root "$root/sys" --procfs-root "$root/proc" --nvml-lib "$nvml" \
      --metrics-bind-address 0 --health-probe-bind-address "127.0.0.1:$hport" \
      >>"$dir/tkm-agent.log" 2>&1 </dev/null &
    echo $! >"$dir/tkm-agent.pid"
  fi
  for _ in $(seq 1 60); do
    ready "http://127.0.0.1:$cport/readyz" && ready "http://127.0.0.1:$hport/readyz" && {
      log "tkm-controller and tkm-agent are ready"
      return 0
    }
    pid_alive "$dir/tkm-controller.pid" tkm-controller || die "tkm-controller exited: $(tail -5 "$dir/tkm-controller.log")"
    pid_alive "$dir/tkm-agent.pid" tkm-agent || die "tkm-agent exited: $(tail -5 "$dir/tkm-agent.log")"
    sleep 0.5
  done
  die "tkm-controller or tkm-agent not ready after 30 s (logs in $dir)"
}

down() {
  stop_pidfile "$dir/tkm-agent.pid" tkm-agent
  stop_pidfile "$dir/tkm-controller.pid" tkm-controller
}

status() {
  local n
  for n in tkm-controller tkm-agent; do
    if pid_alive "$dir/$n.pid" "$n"; then echo "$n: running (pid $(cat "$dir/$n.pid"))"; else echo "$n: stopped"; fi
  done
}

case $cmd in
up) up ;;
down) down ;;
status) status ;;
*) die "usage: $0 up|down|status [BUILD_DIR]" ;;
esac
